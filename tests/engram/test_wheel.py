"""What users install: the built wheel holds one top-level name, ``engram``, with every module and
data file the code reads at run time and nothing else (no test or bench helper), and installed into
a fresh environment outside the checkout it serves the demo tenant. The wheel and that environment
come from the container image's build steps (scripts/image_build.py), run as the Dockerfile runs
them, which must say the same."""

from __future__ import annotations

import os
import re
import subprocess
import time
import tomllib
import zipfile
from pathlib import Path

import httpx
import pytest

from engram.settings import REPO, Settings
from scripts.image_build import SOURCES, STEPS, Built, Step, build, check_serves
from tests.harness import free_port, isolated_settings, settings_env

# every package of the source tree (the tests aside), so a new one cannot be left out
PACKAGES = tuple(sorted(p.parent.name for p in REPO.glob("*/__init__.py") if p.parent.name != "tests"))
DATA = (
    "ontology/*.ttl",
    "rules/*.dlog",
    "schemas/avro/*.avsc",
    "schemas/avro/history/*.avsc",  # every released Envelope: old records stay readable
    "engram/demo/*.jsonl",
    "streams/kafka/*",
    "api/console/templates/*",  # the console's pages and assets: no CDN, no build at run time
    "api/console/static/*",
)
# test and bench helpers that once lived in the server package and were shipped with it: a user's
# environment has no use for them (they moved to tests/ in issue 34)
HELPERS = ("engram/harness.py", "engram/evaluation.py", "engram/projections/rules/reference/")


def installed_name(path: Path) -> str:
    """Where a file of the checkout is in the wheel: every stage folder under ``engram/``."""
    rel = path.relative_to(REPO)
    return str(rel if rel.parts[0] == "engram" else Path("engram") / rel)


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """The image's build steps run as the Dockerfile runs them (scripts/image_build.py): wheels of
    engram and every dependency, then a fresh environment installing only those, not editable."""
    root = tmp_path_factory.mktemp("image")
    try:
        return build(root / "image", log=root / "build.log")
    except RuntimeError as exc:
        pytest.fail(f"{exc}\n{(root / 'build.log').read_text(errors='replace')[-3000:]}")


@pytest.fixture(scope="module")
def wheel(image: Built) -> Path:
    (found,) = image.wheels.glob("engram-*.whl")
    return found


def test_the_wheel_holds_one_name_every_module_and_data_file_and_no_test_helper(wheel: Path) -> None:
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
    # and nothing else: no module that is not the source tree's (a test helper, a stale build's)
    modules = {n for n in names if n.endswith(".py")}
    assert modules - wanted == set()
    assert not {n for n in names for helper in HELPERS if n.startswith(helper)}
    assert not {n for n in names if n.split("/")[1:2] in (["tests"], ["bench"])}
    # the compiled core, built for CPython 3.11 and later (abi3)
    assert "engram/_core.abi3.so" in names


@pytest.fixture(scope="module")
def installed(image: Built) -> Path:
    """The runtime stage's environment: outside the checkout, only the wheels installed."""
    return image.env


def test_the_installed_wheel_serves_the_demo_from_anywhere(
    installed: Path, broker: Settings, tmp_path: Path
) -> None:
    settings = isolated_settings(broker, tmp_path / "data")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(settings_env(settings))
    env.pop("ENGRAM_ONTOLOGY_DIR", None)  # the installed package's own
    env.pop("ENGRAM_RULES_DIR", None)
    env["ENGRAM_CACHE_DIR"] = str(installed.parent / "cache")  # the graph the build warmed
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


def dockerfile_steps(text: str) -> list[Step]:
    """The Dockerfile's RUN and COPY instructions as steps: continuation lines joined, comments
    dropped, a RUN's leading BuildKit ``--mount`` flags apart, the stage counted by FROM."""
    lines = re.sub(r"\\\n\s*", "", text).splitlines()
    steps, stage = [], -1
    for line in (raw.strip() for raw in lines):
        word, _, rest = line.partition(" ")
        if word == "FROM":
            stage += 1
        elif word in ("RUN", "COPY"):
            flags = re.match(r"((?:--mount=\S+\s+)*)(.*)", rest)
            assert flags is not None
            mounts, args = flags.group(1).strip(), flags.group(2)
            steps.append(Step(("build", "runtime")[stage], word, args, mounts))  # type: ignore[arg-type]
    return steps


def test_the_dockerfile_runs_the_steps_ci_runs() -> None:
    """Every RUN and COPY of the Dockerfile is the script's step, in order, word for word, so what
    CI runs without Docker is what `docker build` runs."""
    text = (REPO / "Dockerfile").read_text()
    ours = [Step(s.stage, s.instruction, s.args, s.mounts) for s in STEPS]  # docker_only is ours
    assert dockerfile_steps(text) == ours
    froms = re.findall(r"^FROM (\S+)(?: AS (\w+))?$", text, re.M)
    assert froms == [("python:3.11-slim", "build"), ("python:3.11-slim", "")]
    # the compiler only in the build stage; the runtime stage installs from the wheels alone
    assert all(s.stage == "build" for s in STEPS if "g++" in s.args)
    assert all("--no-index" in s.args for s in STEPS if s.stage == "runtime" and "pip install" in s.args)


def test_the_image_copies_every_source_folder_and_the_context_admits_them() -> None:
    package_dir = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    assert set(SOURCES) == set(package_dir.values())
    lines = (REPO / ".dockerignore").read_text().splitlines()
    ignore = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    copied = {word for s in STEPS if s.instruction == "COPY" for word in s.args.split()[:-1]}
    assert ignore[0] == "*" and {f"!{name}" for name in copied} <= set(ignore)


def test_the_image_runs_as_a_user_with_a_liveness_healthcheck() -> None:
    text = re.sub(r"\\\n\s*", "", (REPO / "Dockerfile").read_text())
    runtime = text.split("\nFROM ")[-1]
    (user,) = re.findall(r"^USER (\S+)$", runtime, re.M)
    assert user not in ("root", "0") and f"useradd --system --uid 10001 --create-home {user}" in runtime
    (check,) = re.findall(r"^HEALTHCHECK .*$", runtime, re.M)
    assert "http://127.0.0.1:8000/healthz" in check and "ENGRAM_API_PORT=8000" in runtime
    from engram.api.routes.health import router

    assert "/healthz" in {getattr(r, "path", None) for r in router.routes}
    assert re.search(r"^CMD \[\"engram\", \"serve\"\]$", runtime, re.M)
    # the weights and the int8 graph are in the image: nothing is fetched at run time
    assert "ENGRAM_CACHE_DIR=/opt/engram/cache" in runtime and "load_embedder('minilm-int8')" in runtime


def test_the_built_image_serves_a_remember_and_a_recall(
    image: Built, broker: Settings, tmp_path: Path
) -> None:
    seen = check_serves(image, broker.kafka_bootstrap, tmp_path / "data", free_port())
    assert seen["ready"]["ready"] is True and seen["memory_id"] in seen["recall"]
    graphs = list((image.cache / "embedders").glob("*.onnx"))
    assert len(graphs) == 1, graphs  # the build's warmed graph, used as is: no second one written
