"""Tenants held in memory (``ENGRAM_STORE=memory``): the same graph as on disk, opened from the
newest snapshot, evicted only after a snapshot, durable floors that hold the consumer's offsets,
and an erasure that leaves one snapshot, without the words."""

from __future__ import annotations

import asyncio
from pathlib import Path

from engram.projections.read import export_nquads
from engram.projections.stores import TenantStores
from engram.projections.tenant_graph import TenantGraph
from engram.schemas.events import Position
from engram.streams import codec, projector
from engram.streams.held_acks import HeldAcks
from engram.streams.keystore import KeyStore
from engram.streams.objects import LocalObjects
from engram.streams.snapshots import Snapshots
from engram.streams.topics import partition_for

from engram.settings import Settings
from tests.factories import event, remembered
from tests.harness import Server
from tests.streams.test_snapshots import events

PARTITIONS = 4


def records(tenant: str, values: list[bytes], start: int = 0) -> list[projector.Record]:
    home = partition_for(tenant, PARTITIONS)
    return [
        projector.Record(tenant.encode(), value, [], Position(home, start + i, 1_764_547_200_000 + i))
        for i, value in enumerate(values)
    ]


async def nowhere(*_: object) -> None:
    raise AssertionError("nothing is dead-lettered")


def feed(stores: TenantStores, batch: list[projector.Record], size: int = 7) -> None:
    async def go() -> None:
        for start in range(0, len(batch), size):
            await projector.handle_batch_with_retries(
                batch[start : start + size], stores, nowhere, partitions=PARTITIONS
            )

    asyncio.run(go())


def memory_stores(root: Path, every: int = 0, max_open: int = 256) -> TenantStores:
    stores = TenantStores(root / "tenants", memory=True, max_open=max_open)
    stores.snapshots = Snapshots(LocalObjects(root / "objects"), every=every)
    return stores


def test_memory_and_disk_build_the_same_graph_and_a_snapshot_reopens_it(tmp_path: Path) -> None:
    batch = records("memo", events("memo", 30))
    disk = TenantStores(tmp_path / "disk")
    feed(disk, batch)
    stores = memory_stores(tmp_path / "mem", every=8)
    feed(stores, batch)
    graph = stores.get("memo")
    assert graph is not None and graph.in_memory
    assert export_nquads(graph) == export_nquads(disk.get("memo"))
    assert not (tmp_path / "mem" / "tenants" / "memo" / "graph").exists()  # nothing of it on disk
    assert stores.tenants() == ["memo"] and stores.exists("memo") and not stores.exists("other")
    assert [s.offset for s in stores.snapshots.list("memo")] == [7, 15, 23]
    assert graph.unsaved() and graph.saved == Position(batch[0].position.partition, 23)
    live = export_nquads(graph)
    stores.close()  # an unsaved graph is snapshotted as it goes
    again = memory_stores(tmp_path / "mem")
    reopened = again.get("memo")
    assert reopened is not None and not reopened.unsaved()
    assert export_nquads(reopened) == live and reopened.checkpoint() == batch[-1].position
    assert reopened.handled() == 30
    feed(again, batch)  # redelivered: every record is at or below the checkpoint, none applies twice
    assert export_nquads(again.get("memo")) == live


def test_a_restarted_store_applies_only_the_tail_after_its_snapshot(tmp_path: Path) -> None:
    """A crash: the memory is gone, the snapshot at offset 15 stays; the log from the committed
    offset (here: earlier still) comes again, and the result equals the uninterrupted run."""
    batch = records("tail", events("tail", 30))
    whole = memory_stores(tmp_path / "whole")
    feed(whole, batch)
    crashed = memory_stores(tmp_path / "crash", every=16)
    feed(crashed, batch)  # one snapshot, at the 16th event; the rest only in memory
    del crashed  # kill -9: nothing saved on the way out
    restarted = memory_stores(tmp_path / "crash")
    graph = restarted.get("tail")
    assert graph is not None and graph.handled() == 16
    feed(restarted, batch[10:])  # from a committed offset at or before the snapshot's
    assert export_nquads(restarted.get("tail")) == export_nquads(whole.get("tail"))


def test_eviction_snapshots_an_unsaved_tenant_and_reopening_restores_it(tmp_path: Path) -> None:
    stores = memory_stores(tmp_path, max_open=2)
    for name in ("ev1", "ev2", "ev3"):
        feed(stores, records(name, events(name, 12)))
    assert len(stores._open) == 3  # no eviction in the middle of the projector's work
    before = export_nquads(stores.get("ev1"))
    stores.get("ev2")
    stores.get("ev3")  # ev1 is the least recently used
    assert asyncio.run(stores.trim()) == 1 and "ev1" not in stores._open
    assert [s.handled for s in stores.snapshots.list("ev1")] == [12]
    assert export_nquads(stores.get("ev1")) == before


def test_without_snapshots_an_unsaved_tenant_is_never_evicted(tmp_path: Path) -> None:
    stores = TenantStores(tmp_path, memory=True, max_open=1)
    for name in ("vol1", "vol2"):
        feed(stores, records(name, events(name, 3)))
    assert asyncio.run(stores.trim()) == 0 and len(stores._open) == 2


def test_the_durable_floor_is_the_lowest_unsaved_tenants_snapshot(tmp_path: Path) -> None:
    """Two tenants on one partition; the floor is where the one saved least far left off."""
    stores = memory_stores(tmp_path)
    a, b = "fla", "flb"
    while partition_for(b, PARTITIONS) != partition_for(a, PARTITIONS):
        b += "x"
    part = partition_for(a, PARTITIONS)
    assert stores.durable_below() == {}
    feed(stores, records(a, events(a, 5)))
    assert stores.durable_below() == {part: 0}  # never saved: nothing of the partition is durable
    stores.snapshots.take(a, stores.get(a))
    assert stores.durable_below() == {}
    feed(stores, records(b, events(b, 3), start=5))
    assert stores.durable_below() == {part: 0}
    stores.snapshots.take(b, stores.get(b))
    feed(stores, records(a, events(a, 9)[5:], start=8))  # a's offsets 8..11, after b's 5..7
    assert stores.durable_below() == {part: 5}  # a was saved at offset 4


class Message:
    def __init__(self, partition: int, offset: int) -> None:
        self.partition, self.offset, self.refcount, self.acked = partition, offset, 1, False

    def incref(self) -> None:
        self.refcount += 1

    def ack(self, _consumer: object) -> bool:
        self.refcount -= 1
        self.acked = self.refcount == 0
        return self.acked


class Event:
    def __init__(self, partition: int, offset: int) -> None:
        self.message = Message(partition, offset)


def test_held_acks_release_only_what_snapshots_hold(tmp_path: Path) -> None:
    stores = memory_stores(tmp_path)
    tenant = "held"
    batch = records(tenant, events(tenant, 6))
    feed(stores, batch)
    held = HeldAcks(stores, lambda: None, after_s=3600)
    taken = [Event(r.position.partition, r.position.offset) for r in batch]
    held.hold(taken)
    for e in taken:
        e.message.ack(None)  # Faust's own ack at the end of the batch
    assert held.held() == 6 and not any(e.message.acked for e in taken)
    assert asyncio.run(held.save_due()) == 0  # not unsaved for after_s yet
    assert asyncio.run(held.save_due(everything=True)) == 1
    assert held.held() == 0 and all(e.message.acked for e in taken)


def test_an_erasure_in_memory_keeps_one_snapshot_and_no_words(tmp_path: Path) -> None:
    keys = KeyStore(tmp_path / "keys")
    stores = memory_stores(tmp_path, every=2)
    stores.keys = keys
    tenant = "erase"
    values = [
        codec.encode(
            event("MemoryRemembered", remembered(f"m{i}", content=f"secret words {i}"), tenant=tenant)
        )
        for i in range(5)
    ]
    values.append(codec.encode(event("MemoryForgotten", {"memory_id": "m1"}, tenant=tenant)))
    feed(stores, records(tenant, values), size=100)
    snaps = stores.snapshots.list(tenant)
    assert len(snaps) == 1 and snaps[0].offset == 5  # the older ones, holding the words, purged
    data = (tmp_path / "objects" / "snapshots" / tenant / f"{5:020d}.nq.zst").read_bytes()
    from cramjam import zstd

    text = bytes(zstd.decompress(data)).decode()
    assert "words 0" in text and "words 1" not in text
    reopened = memory_stores(tmp_path).get(tenant)
    assert isinstance(reopened, TenantGraph) and "words 1" not in export_nquads(reopened)


def test_a_server_in_memory_evicts_reopens_and_restarts_from_its_snapshots(
    settings: Settings, tmp_path: Path
) -> None:
    """``engram serve`` with tenants in memory and room for two: six tenants written and read back
    (evicted and reopened as the projector goes), then read again after a clean restart."""
    memory = settings.model_copy(update={"store": "memory", "max_open_stores": 2, "snapshot_after_s": 0.5})
    tenants = [f"ev{i}" for i in range(6)]

    def read_all(server: Server) -> dict[str, list[str]]:
        out = {}
        for t in tenants:
            r = server.http.get(f"{server.url}/v1/tenants/{t}/memories", params={"limit": "50"}, timeout=30)
            assert r.status_code == 200, r.text
            out[t] = sorted(m["label"] for m in r.json()["data"])
        return out

    server = Server(memory, tmp_path / "server.log").start()
    try:
        server.wait_ready()
        for i in range(3):
            for t in tenants:
                body = {"source": "operator", "label": f"{t} {i}", "content": "c", "kind": "fact",
                        "importance": 3}  # fmt: skip
                r = server.http.post(
                    f"{server.url}/v1/tenants/{t}/memories", params={"wait": "true"}, json=body, timeout=40
                )
                assert r.status_code == 202 and r.json()["applied"], r.text
        before = read_all(server)
        assert before == {t: [f"{t} {i}" for i in range(3)] for t in tenants}
        r = server.http.post(f"{server.url}/v1/tenants/ev0/sparql", json={"query": "ASK {}"}, timeout=30)
        assert r.status_code == 503 and "memory" in r.text, r.text
    finally:
        server.stop()
    # every tenant was evicted at least once (a snapshot each), and the stop saved the rest
    snapshots = Snapshots(LocalObjects(memory.archive_root))
    assert all(snapshots.newest(t) is not None for t in tenants)
    again = Server(memory, tmp_path / "again.log").start()
    try:
        again.wait_ready()
        assert read_all(again) == before
    finally:
        again.stop()


def test_a_snapshot_taken_beside_a_commit_names_the_checkpoint_it_holds(tmp_path: Path) -> None:
    """An on-demand snapshot (a thread) while the projector commits: the dump is taken again, and
    the snapshot is named for the state it holds, not the one it started from."""
    stores = memory_stores(tmp_path)
    tenant = "race"
    feed(stores, records(tenant, events(tenant, 3)))
    graph = stores.get(tenant)
    assert graph is not None
    real = graph.store
    dumps = []

    class Racing:
        def __getattr__(self, name: str) -> object:
            return getattr(real, name)

        def dump(self, **kw: object) -> bytes:
            dumps.append(1)
            graph.store = real  # a commit lands while the dump is taken: the dump holds it
            graph.apply(event("MemoryRemembered", remembered("late"), tenant=tenant), Position(0, 99, 5))
            return real.dump(**kw)

    graph.store = Racing()  # type: ignore[assignment]
    snap = stores.snapshots.take(tenant, graph)
    assert dumps == [1] and snap.offset == 99 and graph.saved == Position(0, 99)
    loaded = stores.snapshots.load(snap)
    assert len(loaded) == len(real) and "late" in export_nquads(TenantGraph(tmp_path / "x", memory=loaded))
