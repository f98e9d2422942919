"""A process signalled while its broker is down stops within seconds, its stores flushed: the
Faust consumers' stops, which retried the group coordinator for ever (SIGTERM hung; it had to be
killed), are cut short after ENGRAM's stop bound, each said in the log."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from engram.projections.stores import TenantStores
from engram.projections.terms import ASSERTED, e
from engram.streams import kafka_local
from engram.streams.topics import ensure_topics

from engram.settings import Settings
from tests.harness import Server, isolated_settings

pytestmark = pytest.mark.integration

TENANT = "stopping-co"


def test_sigterm_with_the_broker_down_stops_promptly_and_keeps_what_was_applied(
    private_broker: Settings, tmp_path: Path
) -> None:
    settings = isolated_settings(private_broker, tmp_path / "data")
    asyncio.run(ensure_topics(settings))
    log_path = tmp_path / "server.log"
    server = Server(settings, log_path).start()
    try:
        server.wait_ready()
        r = server.http.post(
            f"{server.url}/v1/tenants/{TENANT}/memories",
            params={"wait": "true"},
            json={"source": "operator", "label": "applied before the outage", "content": "kept",
                  "kind": "fact", "importance": 3},
            timeout=30,
        )  # fmt: skip
        assert r.status_code == 202 and r.json()["applied"], r.text
        kafka_local.stop(private_broker)
        assert server.proc is not None
        server.proc.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        try:
            server.proc.wait(timeout=45)
        except subprocess.TimeoutExpired:
            server.kill()
            pytest.fail(f"not stopped 45 s after SIGTERM\n{log_path.read_text()[-3000:]}")
        took = time.monotonic() - signalled
    finally:
        server.kill()
    text = log_path.read_text()
    # the consumers' stops cut short after the bound (6 s), then the stores flushed: it hung before
    assert took < 15, f"{took:.1f} s to stop\n{text[-3000:]}"
    assert "did not stop in time (is the broker down?)" in text, text[-3000:]
    stores = TenantStores(settings.tenants_dir)
    try:
        graph = stores.get(TENANT)
        assert graph is not None
        labels = [q.object.value for q in graph.store.quads_for_pattern(None, e("label"), None, ASSERTED)]
        assert labels == ["applied before the outage"]
    finally:
        stores.close()


# a stop like a Faust app's: a cancellation ends one child's stop, and the next is awaited
UNCANCELLABLE = (
    "import asyncio, time\n"
    "from engram.logs import setup_logging\n"
    "from engram.process import bounded, run_command\n"
    "setup_logging()\n"
    "async def stop_children():\n"
    "    for _ in range(1000):\n"
    "        try:\n"
    "            await asyncio.sleep(3600)\n"
    "        except asyncio.CancelledError:\n"
    "            pass\n"
    "async def main():\n"
    "    loop = asyncio.get_running_loop()\n"
    "    await bounded(stop_children(), 'the stubborn part', loop.time() + 0.5)\n"
    "    print('went on', flush=True)\n"
    "raise SystemExit(run_command(main()))\n"
)


def exits_promptly(script: str, within_s: float) -> subprocess.CompletedProcess[str]:
    """``script`` run in a Python of its own: it exited 0 within ``within_s``."""
    began = time.monotonic()
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - began < within_s
    return done


def test_a_stop_that_takes_no_cancellation_is_left_behind_and_the_process_exits() -> None:
    done = exits_promptly(UNCANCELLABLE, within_s=30)
    assert done.stdout == "went on\n"
    assert "the stubborn part did not stop in time (is the broker down?): cut short" in done.stderr
    assert "exiting without what did not stop: the stubborn part" in done.stderr, done.stderr


STUCK = (
    "import threading, time\n"
    "from engram.logs import setup_logging\n"
    "from engram.process import exit_past_stuck_stops\n"
    "setup_logging()\n"
    "threading.Thread(target=time.sleep, args=(3600,), name='stuck-consumer').start()\n"
    "raise SystemExit(exit_past_stuck_stops(0, grace_s=0.2))\n"
)


def test_a_thread_left_running_by_a_stop_does_not_keep_the_process_alive() -> None:
    done = exits_promptly(STUCK, within_s=20)
    assert "exiting without what did not stop: stuck-consumer" in done.stderr, done.stderr
