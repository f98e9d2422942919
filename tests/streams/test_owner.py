"""A group of an `engram serve` and an `engram worker` with ENGRAM_ADVERTISED_URL (stores in memory,
one object store, key store and secret): the worker answers what the group routes to it (a read
for its tenant sent to the serve is answered by it, its own health and metrics), and a
conversation is extracted exactly once, by its tenant's owner, whichever process its turns went
through (every process stores every turn; before, each one extracted them all)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator

import httpx
import pytest
from engram.streams.topics import partition_for

from engram.settings import Settings
from tests.api.test_capture import SAID, extracted, post_turns, until
from tests.harness import Server, settings_env
from tests.streams.test_group import PARTITIONS, pair, status, wait_members

pytestmark = pytest.mark.integration


class Worker(Server):
    """`engram worker` as a child process, listening because it is given its URL."""

    def start(self) -> Worker:
        self.settings.token_secret()
        env = {**os.environ, **settings_env(self.settings), "ENGRAM_ADVERTISED_URL": self.url}
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "engram.cli", "worker"], env=env, stdout=out, stderr=subprocess.STDOUT
            )
        return self


@pytest.fixture(scope="module")
def group(broker: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Server]]:
    root = tmp_path_factory.mktemp("owner")
    sa, sb = pair(broker, root)
    capture = {"extraction_idle_s": 1.0}
    a = Server(sa.model_copy(update=capture), root / "serve.log").start()
    b = Worker(sb.model_copy(update=capture), root / "worker.log").start()
    try:
        a.wait_ready()
        b.wait_ready()
        wait_members(sa, {a.url, b.url})
        yield a, b
    finally:
        a.stop()
        b.stop()


def owned_by(server: Server, url: str, prefix: str) -> str:
    """A tenant id whose partition ``url`` owns (as the broker holds the group)."""
    owners = {p["partition"]: p["owner"] for p in status(server.settings)["partitions"]}
    return next(
        f"{prefix}{i}" for i in range(1000) if owners[partition_for(f"{prefix}{i}", PARTITIONS)] == url
    )


def test_a_read_for_a_workers_tenant_is_answered_by_the_worker(group: tuple[Server, Server]) -> None:
    a, b = group
    tenant = owned_by(a, b.url, "wread")
    body = {"source": "operator", "label": "L", "content": "C", "kind": "fact", "importance": 3,
            "memory_id": "m1"}  # fmt: skip
    wrote = a.http.post(f"{a.url}/v1/tenants/{tenant}/memories", json=body)
    assert wrote.status_code == 202, wrote.text
    assert wrote.headers["x-engram-owner"] == b.url  # the write's pre-check ran on the worker
    position = f"{wrote.json()['partition']}:{wrote.json()['offset']}"
    ctx = a.http.get(f"{a.url}/v1/tenants/{tenant}/context", params={"after": position})
    assert ctx.status_code == 200 and ctx.headers["x-engram-owner"] == b.url, ctx.text
    read = a.http.get(f"{a.url}/v1/tenants/{tenant}/memories/m1")
    assert read.status_code == 200, read.text
    assert read.headers["x-engram-owner"] == b.url and read.json()["label"] == "L"
    assert httpx.get(f"{b.url}/healthz", timeout=10).status_code == 200
    metrics = httpx.get(f"{b.url}/metrics", timeout=10)
    assert metrics.status_code == 200 and 'engram_events_total{outcome="applied"' in metrics.text


def test_a_conversation_is_extracted_once_by_its_owner(group: tuple[Server, Server]) -> None:
    a, b = group
    # each tenant's turns go in through the process that does not own it (and are forwarded)
    for entry, owner in ((a, b), (b, a)):
        tenant = owned_by(a, owner.url, "wcap")
        post_turns(entry, tenant, "conv-1", SAID)  # N = 6 turns: extracted at once
        memories = until(lambda: len(extracted(entry, tenant)) >= 2 and extracted(entry, tenant))  # noqa: B023
        assert len(memories) == 2
        time.sleep(2)  # a second extraction (the non-owner's, before) would be in the log by now
        log = entry.http.get(f"{entry.url}/v1/tenants/{tenant}/events", params={"limit": 500}).json()
        remembered = Counter(e["event_id"] for e in log["data"] if e["source"] == "extraction")
        assert len(remembered) == 2 and set(remembered.values()) == {1}, remembered
