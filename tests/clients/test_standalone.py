"""The client on its own: its wheel, installed into a fresh environment with only its declared
dependencies (httpx, pydantic and theirs, fetched by pip), imports and talks to a real server
without the server package or any agent framework present."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
import venv
import zipfile
from pathlib import Path

import pytest

from engram.settings import REPO
from tests.clients.conftest import Live

pytestmark = pytest.mark.integration

CLIENT = REPO / "clients" / "python"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("client-wheel")
    source = out / "src"  # a copy: building writes build/ and *.egg-info beside the sources
    shutil.copytree(CLIENT, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    (found,) = out.glob("engram_client-*.whl")
    return found


def test_the_wheel_holds_the_client_alone(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names if ".dist-info" not in n} == {"engram_client"}
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("METADATA"))).decode()
    required = [
        line.split(":", 1)[1].strip() for line in metadata.splitlines() if line.startswith("Requires-Dist")
    ]
    assert sorted(r for r in required if "extra ==" not in r) == ["httpx>=0.27", "pydantic>=2.6"]


def test_installed_alone_it_imports_and_remembers(wheel: Path, live: Live, tmp_path: Path) -> None:
    # nothing of this environment reaches the fresh one (PYTHONPATH would bring the checkout)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env_dir = tmp_path / "env"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    installed = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert installed.returncode == 0, installed.stderr
    frozen = subprocess.run(
        [str(python), "-m", "pip", "freeze"], capture_output=True, text=True, check=True, env=env
    )
    names = {line.split("==")[0].split(" @ ")[0].lower() for line in frozen.stdout.split()}
    assert "engram-client" in names and "httpx" in names and "pydantic" in names
    assert not names & {"engram", "langchain-core", "pydantic-ai-slim", "fastapi", "faust-streaming"}

    tenant = f"t{uuid.uuid4().hex[:10]}"
    script = """
import importlib.util, json, sys
import engram_client
from engram_client import Engram
with Engram(sys.argv[1], sys.argv[2]) as mem:
    accepted = mem.remember("Standalone", "Written by the client alone.", importance=5)
    context = mem.context()
try:
    import engram_client.adapters.langchain
    adapter_error = None
except ImportError as exc:
    adapter_error = str(exc)
print(json.dumps({
    "memory_id": accepted.memory_id,
    "in_context": accepted.memory_id in [i.id for i in context.items],
    "frameworks": sorted(m for m in sys.modules if m.split(".")[0] in ("langchain_core", "pydantic_ai")),
    "server": importlib.util.find_spec("engram") is not None,
    "adapter_error": adapter_error,
}))
"""
    ran = subprocess.run(
        [str(python), "-c", script, live.url, live.token(tenant)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,  # not the checkout: nothing of it on the path
    )
    assert ran.returncode == 0, ran.stderr
    out = json.loads(ran.stdout)
    assert out["in_context"] and out["memory_id"]
    assert out["frameworks"] == [] and out["server"] is False
    assert "pip install 'engram-client[langchain]'" in out["adapter_error"]
