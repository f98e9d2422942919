"""The local broker's packaged files resolve from the installed package, not a top-level ``streams``.

A broker already answering makes ``kafka start`` return before it reads these files, and a test run
has the checkout on ``sys.path`` (where ``streams`` imports as a top-level name), so only a fresh
machine showed a wrong package name: CI on a clean clone failed this way. The check runs in a
child in isolated mode (no current directory, no PYTHONPATH on the path), as the ``engram`` script
does.
"""

import subprocess
import sys
from pathlib import Path

PROBE = """
from engram.streams import kafka_local
for name in ("pom.xml", "log4j2.properties", "tools-log4j2.properties"):
    path = kafka_local._resource(name)
    assert path.is_file(), path
print("ok")
"""


def test_the_broker_resources_resolve_inside_the_engram_package(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-I", "-c", PROBE], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
