"""``engram worker``: the projector alone, in a process of its own, without FastAPI: it projects
events from the real broker into a tenant's store, and stops cleanly on SIGTERM."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from engram.projections.read import export_nquads
from engram.projections.stores import TenantStores
from engram.streams.group import group_status
from engram.streams.lag import LagMonitor

from engram.settings import Settings
from tests.factories import envelope, remembered
from tests.harness import settings_env

pytestmark = pytest.mark.integration

WEB = ("fastapi", "starlette", "uvicorn")
# the worker as `engram worker` runs it; on exit, the web modules it imported are written down
WORKER = (
    "import json, sys\n"
    "from engram.cli import main\n"
    "code = main(['worker'])\n"
    f"web = sorted(m for m in sys.modules if m.split('.')[0] in {WEB!r})\n"
    "seen = {'web': web, 'projector': 'engram.streams.projector' in sys.modules}\n"
    "open(sys.argv[1], 'w').write(json.dumps(seen))\n"
    "sys.exit(code)\n"
)


async def caught_up(settings: Settings, timeout_s: float = 60.0) -> None:
    """Until the worker's consumer group has committed every record of the events topic."""
    lag = LagMonitor(settings)
    await lag.start()
    try:
        deadline = time.monotonic() + timeout_s
        while any((await lag.lag({})).values()):
            assert time.monotonic() < deadline, "the worker did not project the events in time"
            await asyncio.sleep(0.2)
    finally:
        await lag.stop()


def test_a_worker_projects_events_without_fastapi(settings: Settings, tmp_path: Path) -> None:
    env = {**os.environ, **settings_env(settings), "ENGRAM_EMBEDDER": "hashing"}
    seen = tmp_path / "modules.json"
    with open(tmp_path / "worker.log", "wb") as log:
        worker = subprocess.Popen([sys.executable, "-c", WORKER, str(seen)], env=env, stdout=log, stderr=log)
    try:
        events = tmp_path / "events.jsonl"
        events.write_text(
            "\n".join(
                json.dumps(envelope("MemoryRemembered", remembered(m), tenant="acme")) for m in ("w1", "w2")
            )
        )
        produced = subprocess.run(
            [sys.executable, "-m", "engram.cli", "produce", str(events)],
            env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert produced.returncode == 0, produced.stderr
        asyncio.run(caught_up(settings))
        assert worker.poll() is None, (tmp_path / "worker.log").read_text()
        group = asyncio.run(group_status(settings, settings.projector_group()))  # as `engram status` shows it
        assert [(m["kind"], m["url"].split("/")[0]) for m in group["members"]] == [("worker", "worker:")]
    finally:
        worker.send_signal(signal.SIGTERM)
        code = worker.wait(timeout=60)
    assert code == 0, (tmp_path / "worker.log").read_text()
    assert json.loads(seen.read_text()) == {"web": [], "projector": True}

    stores = TenantStores(settings.tenants_dir)  # the worker has exited: its stores are free to open
    graph = stores.get("acme")
    assert graph is not None
    quads = export_nquads(graph)
    assert '<urn:engram:memory:w1> <https://engram.dev/ns#memoryId> "w1"' in quads
    assert '<urn:engram:memory:w2> <https://engram.dev/ns#memoryId> "w2"' in quads
    stores.close()
