"""The built wheel carries every module and every data file the code reads at run time."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from engram.settings import REPO

# every top-level package of the source tree (the tests aside), so a new one cannot be left out
PACKAGES = tuple(sorted(p.parent.name for p in REPO.glob("*/__init__.py") if p.parent.name != "tests"))
DATA = (
    "ontology/*.ttl",
    "rules/*.dlog",
    "schemas/avro/*.avsc",
    "schemas/avro/history/*.avsc",  # every released Envelope: old records stay readable
    "engram/demo/*.jsonl",
    "streams/kafka/*",
)


def test_the_wheel_holds_every_module_and_data_file(tmp_path: Path) -> None:
    source = tmp_path / "src"  # a copy: building writes build/ and *.egg-info beside the sources
    ignore = shutil.ignore_patterns(".venv", ".git", ".engram", "__pycache__", "build", "*.egg-info")
    shutil.copytree(REPO, source, ignore=ignore)
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = tmp_path.glob("engram-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    wanted = {
        str(p.relative_to(REPO))
        for pkg in PACKAGES
        for p in (REPO / pkg).rglob("*.py")
        if "__pycache__" not in p.parts
    }
    wanted |= {str(p.relative_to(REPO)) for pattern in DATA for p in REPO.glob(pattern)}
    assert wanted - names == set()
