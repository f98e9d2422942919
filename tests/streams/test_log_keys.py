"""A key store that does not hold the log's keys is an error said loudly, never "everything was
erased" (issue 34): a process refuses to start against a log sealed with another key store, and a
key missing from the right one holds the projection (readiness false with the reason, a metric),
projecting nothing as erased, until the key is back."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from engram.streams.log_keys import NotTheLogsKeys, check_log_keys
from engram.streams.topics import ensure_topics

from engram.settings import Settings
from tests.harness import Server, isolated_settings, serving, settings_env

pytestmark = pytest.mark.integration

MEMORY = {
    "label": "Tone",
    "content": "never use emoji",
    "kind": "preference",
    "importance": 3,
    "source": "operator",
}


def test_a_log_refuses_a_key_store_it_was_not_sealed_with(broker: Settings, tmp_path: Path) -> None:
    first = isolated_settings(broker, tmp_path / "first")
    asyncio.run(ensure_topics(first))
    bound = asyncio.run(check_log_keys(first))  # the first process binds the new log to its key store
    assert asyncio.run(check_log_keys(first)) == bound  # and keeps starting
    shares = first.model_copy(update={"data_dir": tmp_path / "shares", "keys_dir": first.key_store_dir})
    assert asyncio.run(check_log_keys(shares)) == bound  # another process on the same key store
    # another checkout's ./dev on the same local broker: its own, new key store, the same topics
    other = first.model_copy(update={"data_dir": tmp_path / "other", "keys_dir": None})
    with pytest.raises(NotTheLogsKeys, match="ENGRAM_TOPIC_PREFIX") as refused:
        asyncio.run(check_log_keys(other))
    assert bound in str(refused.value) and str(other.key_store_dir) in str(refused.value)
    # engram serve says it in one line and exits 1, before it serves anything
    env = {**os.environ, **settings_env(other)}
    done = subprocess.run(
        [sys.executable, "-m", "engram.cli", "serve"], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1, done.stderr[-2000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("engram serve: NotTheLogsKeys: the log at") and "Traceback" not in done.stderr
    # and engram produce seals nothing with it: the log's projectors could not unseal it
    line = '{"type": "MemoryRemembered", "tenant": "acme", "source": "operator", "payload": {}}'
    done = subprocess.run(
        [sys.executable, "-m", "engram.cli", "produce", "-"],
        env=env, input=line, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1 and "produce: NotTheLogsKeys: the log at" in done.stderr, done.stderr


def test_a_key_missing_from_the_log_key_store_holds_the_projection_and_erases_nothing(
    broker: Settings, tmp_path: Path
) -> None:
    server = serving(broker, tmp_path / "a")
    url = f"{server.url}/v1/tenants/acme"
    try:
        r = server.http.post(f"{url}/memories", params={"wait": "true"}, json={**MEMORY, "memory_id": "m1"})
        assert r.status_code == 202, r.text
    finally:
        server.stop()
    # the key store keeps its id but loses the tenant's keys (a partial restore); a new data
    # directory on it replays the log from the start
    keys = server.settings.key_store_dir
    shutil.move(keys / "acme", tmp_path / "saved-keys")
    again = server.settings.model_copy(update={"data_dir": tmp_path / "b" / "data", "keys_dir": keys})
    restarted = Server(again, tmp_path / "b.log").start()
    try:
        deadline = time.monotonic() + 90
        while True:
            assert restarted.proc is not None and restarted.proc.poll() is None, (
                restarted.log_path.read_text()
            )
            r = httpx.get(f"{restarted.url}/readyz", timeout=10) if _answers(restarted) else None
            if r is not None and "not in the key store" in (r.json().get("reason") or ""):
                break
            assert time.monotonic() < deadline, r.text if r is not None else restarted.log_path.read_text()
            time.sleep(0.2)
        assert r.status_code == 503 and not r.json()["ready"]
        metrics = httpx.get(f"{restarted.url}/metrics", timeout=10).text
        assert any(
            line.startswith("engram_keys_missing_total ") and float(line.split()[1]) >= 1
            for line in metrics.splitlines()
        ), metrics
        got = restarted.http.get(f"{restarted.url}/v1/tenants/acme/memories", params={"limit": 10}).json()
        assert "(erased)" not in str(got)  # nothing projected as erased
        # the key is back: the projection goes on, and the memory reads as it was written
        shutil.move(tmp_path / "saved-keys", keys / "acme")
        restarted.wait_ready()
        m1 = restarted.http.get(f"{restarted.url}/v1/tenants/acme/memories/m1").json()
        assert (m1["label"], m1["content"]) == (MEMORY["label"], MEMORY["content"])
    finally:
        restarted.stop()


def _answers(server: Server) -> bool:
    try:
        httpx.get(f"{server.url}/healthz", timeout=2)
        return True
    except httpx.HTTPError:
        return False
