"""The import layers hold: the contracts in pyproject.toml ([tool.importlinter]) are kept, and a
back-edge breaks them (so a kept contract means something).

import-linter reads packages from the file system, so it is run on the installed layout (engram/
with each stage folder inside it, as the wheel holds them), copied from the checkout."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.layout import installed_layout

LINT_IMPORTS = str(Path(sys.executable).with_name("lint-imports"))


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [LINT_IMPORTS, "--no-cache", str(root / "pyproject.toml")],
        cwd=root, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_the_import_contracts_are_kept(tmp_path: Path) -> None:
    done = lint_imports(installed_layout(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


def test_a_back_edge_breaks_the_layers(tmp_path: Path) -> None:
    """projections importing streams (the edge the Keys protocol removed) fails the contract."""
    root = installed_layout(tmp_path)
    stores = root / "engram" / "projections" / "stores.py"
    stores.write_text(stores.read_text() + "\nfrom engram.streams.keystore import KeyStore  # noqa\n")
    done = lint_imports(root)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "engram.projections.stores -> engram.streams.keystore" in done.stdout
