"""What users install: the built wheel holds one top-level name, ``engram``, with every module and
data file the code reads at run time, and installed into a fresh environment outside the checkout
it serves the demo tenant."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import time
import venv
import zipfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from engram.harness import isolated_settings, settings_env
from engram.settings import REPO, Settings

# every package of the source tree (the tests aside), so a new one cannot be left out
PACKAGES = tuple(sorted(p.parent.name for p in REPO.glob("*/__init__.py") if p.parent.name != "tests"))
DATA = (
    "ontology/*.ttl",
    "rules/*.dlog",
    "schemas/avro/*.avsc",
    "schemas/avro/history/*.avsc",  # every released Envelope: old records stay readable
    "engram/demo/*.jsonl",
    "streams/kafka/*",
)


def installed_name(path: Path) -> str:
    """Where a file of the checkout is in the wheel: every stage folder under ``engram/``."""
    rel = path.relative_to(REPO)
    return str(rel if rel.parts[0] == "engram" else Path("engram") / rel)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("wheel")
    source = tmp / "src"  # a copy: building writes build/ and *.egg-info beside the sources
    ignore = shutil.ignore_patterns(".venv", ".git", ".engram", "__pycache__", "build", "*.egg-info")
    shutil.copytree(REPO, source, ignore=ignore)
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    (found,) = tmp.glob("engram-*.whl")
    return found


def test_the_wheel_holds_one_name_and_every_module_and_data_file(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top == {"engram"}
    (top_level,) = [n for n in names if n.endswith(".dist-info/top_level.txt")]
    assert zipfile.ZipFile(wheel).read(top_level).decode().split() == ["engram"]
    wanted = {
        installed_name(p)
        for pkg in PACKAGES
        for p in (REPO / pkg).rglob("*.py")
        if "__pycache__" not in p.parts
    }
    wanted |= {installed_name(p) for pattern in DATA for p in REPO.glob(pattern)}
    assert wanted - names == set()


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh environment outside the checkout with only the wheel installed (its dependencies
    are this environment's, reached through a .pth file: no download)."""
    env_dir = tmp_path_factory.mktemp("venv") / "env"
    venv.create(env_dir, with_pip=False)
    site = next((env_dir / "lib").glob("python3*/site-packages"))
    ours = [p for p in sys.path if p.endswith("site-packages")] or [sysconfig.get_paths()["purelib"]]
    (site / "deps.pth").write_text("".join(f"{p}\n" for p in ours))
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(env_dir / "bin" / "python"), "install", "-q",
         "--no-deps", str(wheel)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    yield env_dir


def test_the_installed_wheel_serves_the_demo_from_anywhere(
    installed: Path, broker: Settings, tmp_path: Path
) -> None:
    settings = isolated_settings(broker, tmp_path / "data")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(settings_env(settings))
    env.pop("ENGRAM_ONTOLOGY_DIR", None)  # the installed package's own
    env.pop("ENGRAM_RULES_DIR", None)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    where = subprocess.run(
        [str(installed / "bin" / "python"), "-c", "import engram.api.main as m; print(m.__file__)"],
        capture_output=True, text=True, cwd=elsewhere, env=env, timeout=60,
    )  # fmt: skip
    assert where.returncode == 0 and where.stdout.startswith(str(installed)), where.stderr
    log = open(tmp_path / "serve.log", "wb")  # noqa: SIM115 (closed below)
    proc = subprocess.Popen(
        [str(installed / "bin" / "engram"), "serve", "--demo"], cwd=elsewhere, env=env, stdout=log, stderr=log
    )
    try:
        url = f"http://127.0.0.1:{settings.api_port}"
        token = subprocess.run(
            [str(installed / "bin" / "engram"), "token", "acme", "--role", "operator", "--user", "dana"],
            capture_output=True, text=True, cwd=elsewhere, env=env, timeout=60,
        ).stdout.strip()  # fmt: skip
        deadline, found = time.monotonic() + 120, None
        while time.monotonic() < deadline:
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()[-3000:]
            try:
                r = httpx.get(f"{url}/v1/tenants/acme/memories/roas-target-q1",
                              headers={"Authorization": f"Bearer {token}"}, timeout=5)  # fmt: skip
                if r.status_code == 200:
                    found = r.json()
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        assert found is not None and found["statuses"]["targetStatus"] == "below", found
        bench = subprocess.run(
            [str(installed / "bin" / "engram"), "bench", "throughput"],
            capture_output=True, text=True, cwd=elsewhere, env=env, timeout=60,
        )  # fmt: skip
        assert bench.returncode == 2 and "checkout" in bench.stderr, bench.stderr
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        log.close()
