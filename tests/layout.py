"""The checkout's packages laid out as the wheel installs them (engram/ with each stage folder
inside it), for tests that need an installed engram rather than this checkout's."""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# the stage folders and their names in the engram namespace, as pyproject maps them for the wheel
PACKAGE_DIR: dict[str, str] = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"][
    "package-dir"
]


def installed_layout(root: Path) -> Path:
    """The checkout's packages as the wheel installs them, under ``root`` (with pyproject.toml,
    which import-linter reads); returns ``root``."""
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(REPO / PACKAGE_DIR["engram"], root / "engram", ignore=ignore)
    for name, folder in PACKAGE_DIR.items():
        if name.startswith("engram."):
            shutil.copytree(REPO / folder, root / "engram" / name.removeprefix("engram."), ignore=ignore)
    shutil.copy(REPO / "pyproject.toml", root)
    return root
