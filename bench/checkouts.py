"""Another checkout's code in a child process, for the benches that run two builds side by side.

A checkout keeps its stages as top-level folders (``api/``, ``streams/`` …) that only an install
maps into the ``engram`` namespace, and this environment's editable install maps them to *this*
checkout: a child given another checkout on ``PYTHONPATH`` alone would import that checkout's
``engram/`` and this one's stages. ``importable`` lays the other checkout out as the wheel installs
it (``engram/`` with each stage inside, as symlinks), so what comes first on ``sys.path`` is that
checkout whole.
"""

from __future__ import annotations

import tomllib
from pathlib import Path


def importable(checkout: Path, root: Path) -> Path:
    """``checkout``'s packages as the wheel installs them, under ``root`` (made; symlinks into the
    checkout, so a module's resolved ``__file__`` is the checkout's own). Put the result first on
    the child's ``PYTHONPATH``; a child run with ``-c`` or ``-m`` needs it as its working directory
    too (the current directory comes first on ``sys.path`` there)."""
    checkout = checkout.resolve()
    pyproject = tomllib.loads((checkout / "pyproject.toml").read_text())
    package_dir: dict[str, str] = pyproject["tool"]["setuptools"]["package-dir"]
    engram = root / "engram"
    engram.mkdir(parents=True)
    for entry in (checkout / package_dir["engram"]).iterdir():
        if entry.name != "__pycache__":
            (engram / entry.name).symlink_to(entry)
    for name, folder in package_dir.items():
        if name.startswith("engram."):
            (engram / name.removeprefix("engram.")).symlink_to(checkout / folder)
    return root
