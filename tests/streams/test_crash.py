"""kill -9 the worker in the middle of 5,000 events for 50 tenants; restart; every tenant's graph
must equal a from-scratch replay of its events, and match an oracle kept by the generator; with
stores on disk and in memory (where the memory is lost and the snapshots and the log remain)."""

from __future__ import annotations

import asyncio
import gc
import random
import re
import threading
import time
from pathlib import Path

import pytest
from engram.projections.read import export_nquads
from engram.schemas.events import event_from_json
from engram.streams.producer import EventProducer
from engram.streams.replay import replay_tenant

from engram.settings import Settings
from tests.factories import TenantModel, random_stream
from tests.harness import Server, isolated_settings

pytestmark = pytest.mark.integration

TENANTS, PER_TENANT = 50, 100


def interleave(rng: random.Random, streams: dict[str, list[dict]]) -> list[dict]:
    """All tenants' events in one random order that keeps each tenant's own order."""
    queues = {t: list(evs) for t, evs in streams.items()}
    out = []
    while queues:
        t = rng.choice(sorted(queues))
        out.append(queues[t].pop(0))
        if not queues[t]:
            del queues[t]
    return out


class Feeder(threading.Thread):
    """Produces the events in chunks of ``chunk`` with ``pause_s`` between them, so a kill lands
    mid-stream."""

    def __init__(
        self, settings: Settings, events: list[dict], *, chunk: int = 100, pause_s: float = 0.01
    ) -> None:
        super().__init__(daemon=True)
        self.settings, self.events = settings, [event_from_json(e) for e in events]
        self.chunk, self.pause_s = chunk, pause_s
        self.produced = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            asyncio.run(self._feed())
        except BaseException as exc:
            self.error = exc

    async def _feed(self) -> None:
        async with EventProducer(self.settings) as producer:
            for start in range(0, len(self.events), self.chunk):
                await producer.send_many(self.events[start : start + self.chunk])
                self.produced = min(start + self.chunk, len(self.events))
                await asyncio.sleep(self.pause_s)


def count(server: Server, tenant: str, **params: str) -> int:
    r = server.http.get(
        f"{server.url}/v1/tenants/{tenant}/memories", params={"limit": "1", **params}, timeout=30
    )
    return int(r.json()["count"])


def assert_equals_its_replay(
    server: Server,
    settings: Settings,
    tenant: str,
    model: TenantModel,
    live: str,
    replay_dir: Path,
    handled: int,
) -> None:
    """``live``, the tenant's graph as ``server`` exports it, handled each of its ``handled`` events
    once, holds the model's memories, and equals a replay of the tenant's log from offset zero."""
    seen = re.search(r'<urn:engram:projection> <https://engram.dev/ns#handled> "(\d+)"', live)
    assert seen and int(seen.group(1)) == handled, f"{tenant}: handled {seen}"
    assert count(server, tenant) == len(model.memories), tenant
    assert count(server, tenant, active="true") == model.active, tenant
    replayed = asyncio.run(replay_tenant(settings, tenant, replay_dir))
    from_scratch = export_nquads(replayed)
    del replayed
    gc.collect()
    assert live == from_scratch, f"{tenant}: live graph differs from its replay"


# in memory, snapshots every 30 events or 1 s: the kill lands between snapshots, so each tenant
# restarts from one and the consumer's committed offsets (held back for them) bring the rest again
STORES = {"disk": {}, "memory": {"store": "memory", "snapshot_every": 30, "snapshot_after_s": 1.0}}


@pytest.mark.parametrize("store", sorted(STORES))
def test_kill_9_mid_stream_loses_and_doubles_nothing(
    broker: Settings, tmp_path: Path, request: pytest.FixtureRequest, store: str
) -> None:
    settings = isolated_settings(broker, tmp_path / "data", partitions=12).model_copy(update=STORES[store])
    rng = random.Random(20261202)
    streams, models = {}, {}
    for i in range(TENANTS):
        tenant = f"t{i:02d}"
        streams[tenant], models[tenant] = random_stream(rng, tenant, PER_TENANT)
    events = interleave(rng, streams)
    assert len(events) == TENANTS * PER_TENANT

    server = Server(settings, tmp_path / "server.log").start()
    request.addfinalizer(server.stop)  # a failed assertion must not leave a worker running
    server.wait_ready()
    feeder = Feeder(settings, events)
    feeder.start()
    deadline = time.monotonic() + 120
    applied_at_kill = 0
    # kill once the first batches are applied: the backlog is still draining, so the kill lands in
    # the middle of a batch (its tenants' runs committed one by one: some are, some are not)
    while time.monotonic() < deadline:
        applied_at_kill = sum(server.http.get(f"{server.url}/readyz").json()["handled"].values())
        if applied_at_kill >= 500:
            break
        time.sleep(0.01)
    server.kill()  # SIGKILL: no shutdown, no final offset commit, no flush
    feeder.join(timeout=180)
    assert feeder.error is None, feeder.error
    assert 0 < applied_at_kill < len(events), f"the kill did not land mid-stream ({applied_at_kill})"

    restarted = Server(settings, tmp_path / "server.log").start()
    try:
        ready = restarted.wait_ready(timeout=180)
        # Records handled before the kill but not yet committed come again and are skipped; how many
        # depends on where the kill fell against Faust's one-second offset commit (none, if it fell
        # while the agent was idle after a commit), so this only reports them. Skipping by the
        # checkpoint is asserted deterministically in tests/projections/test_tenant_graph.py; here
        # the per-tenant counts and the replay below prove nothing was lost or applied twice.
        print({"applied_at_kill": applied_at_kill, "after_restart": ready["handled"]})
        if store == "memory":  # the tenants reopened from snapshots, not from offset zero
            assert list((settings.archive_root / "snapshots").rglob("*.nq.zst"))
        assert sum(ready["handled"].values()) + applied_at_kill >= len(events), ready
        for tenant, model in models.items():
            live = restarted.http.get(f"{restarted.url}/v1/tenants/{tenant}/graph", timeout=30).text
            assert_equals_its_replay(
                restarted, settings, tenant, model, live, tmp_path / "replay" / tenant, PER_TENANT
            )
    finally:
        restarted.stop()


def test_a_new_data_directory_rebuilds_every_tenant_from_the_log(broker: Settings, tmp_path: Path) -> None:
    first = isolated_settings(broker, tmp_path / "one")
    server = Server(first, tmp_path / "one.log").start()
    try:
        server.wait_ready()
        body = {
            "source": "operator",
            "actor": {"id": "dana", "role": "operator"},
            "label": "L",
            "content": "C",
            "kind": "fact",
            "importance": 3,
            "memory_id": "kept",
        }
        r = server.http.post(
            f"{server.url}/v1/tenants/acme/memories", params={"wait": "true"}, json=body, timeout=40
        )
        assert r.status_code == 202, r.text
        before = server.http.get(f"{server.url}/v1/tenants/acme/graph").text
    finally:
        server.stop()
    # the key store is the one thing besides the log a rebuild needs: without it every memory,
    # sealed on the log, would read as erased (as the next test shows)
    second = first.model_copy(update={"data_dir": tmp_path / "two", "keys_dir": first.key_store_dir})
    again = Server(second, tmp_path / "two.log").start()
    try:
        again.wait_ready()
        assert again.http.get(f"{again.url}/v1/tenants/acme/memories/kept").status_code == 200
        assert again.http.get(f"{again.url}/v1/tenants/acme/graph").text == before
    finally:
        again.stop()


def test_a_new_data_directory_without_the_key_store_is_refused_not_read_as_erased(
    broker: Settings, tmp_path: Path
) -> None:
    """It used to start and read every memory as "(erased)", silently: an operator was told the data
    was erased when only the key store was missing (issue 34)."""
    first = isolated_settings(broker, tmp_path / "one")
    server = Server(first, tmp_path / "one.log").start()
    try:
        server.wait_ready()
        body = {"source": "operator", "label": "L", "content": "C", "kind": "fact", "importance": 3,
                "memory_id": "kept"}  # fmt: skip
        r = server.http.post(
            f"{server.url}/v1/tenants/acme/memories", params={"wait": "true"}, json=body, timeout=40
        )
        assert r.status_code == 202, r.text
    finally:
        server.stop()
    again = Server(first.model_copy(update={"data_dir": tmp_path / "two"}), tmp_path / "two.log").start()
    assert again.proc is not None and again.proc.wait(timeout=120) == 1
    said = again.log_path.read_text().strip().splitlines()[-1]
    assert said.startswith("engram serve: NotTheLogsKeys: the log at") and "ENGRAM_KEYS_DIR" in said
    assert not (tmp_path / "two" / "tenants" / "acme").exists()  # nothing projected
