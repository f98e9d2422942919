"""The import layers hold: the contracts in pyproject.toml ([tool.importlinter]) are kept, and a
back-edge breaks them (so a kept contract means something)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("engram", "api", "commands", "streams", "projections", "schemas")
LINT_IMPORTS = str(Path(sys.executable).with_name("lint-imports"))


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [LINT_IMPORTS, "--no-cache", str(root / "pyproject.toml")],
        cwd=root, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_the_import_contracts_are_kept() -> None:
    done = lint_imports(REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


def test_a_back_edge_breaks_the_layers(tmp_path: Path) -> None:
    """projections importing streams (the edge the Keys protocol removed) fails the contract."""
    for package in PACKAGES:
        shutil.copytree(REPO / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    stores = tmp_path / "projections" / "stores.py"
    stores.write_text(stores.read_text() + "\nfrom streams.keystore import KeyStore  # noqa\n")
    done = lint_imports(tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "projections.stores -> streams.keystore" in done.stdout
