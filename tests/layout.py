"""The checkout's packages laid out as the wheel installs them (engram/ with each stage folder
inside it), for tests that need an installed engram rather than this checkout's."""

from __future__ import annotations

import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STAGES = ("api", "commands", "streams", "projections", "schemas", "ontology", "rules")


def installed_layout(root: Path) -> Path:
    """The checkout's packages as the wheel installs them, under ``root`` (with pyproject.toml,
    which import-linter reads); returns ``root``."""
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(REPO / "engram", root / "engram", ignore=ignore)
    for stage in STAGES:
        shutil.copytree(REPO / stage, root / "engram" / stage, ignore=ignore)
    shutil.copy(REPO / "pyproject.toml", root)
    return root
