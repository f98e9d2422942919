"""Tenant snapshots: a store copied at its checkpoint restores to the same store, the projector
takes one every N handled events, and a replay from the nearest one equals a replay from zero."""

from __future__ import annotations

import asyncio
import functools
import gc
import random
import shutil
from pathlib import Path

import pytest
from engram.projections.read import export_nquads
from engram.projections.stores import TenantStores
from engram.projections.tenant_graph import TenantGraph
from engram.schemas.events import Position
from engram.streams import codec, projector
from engram.streams.objects import LocalObjects, S3Objects
from engram.streams.replay import replay_tenant
from engram.streams.snapshots import Snapshots, retained
from engram.streams.topics import partition_for

from engram.settings import Settings
from tests.factories import event, remembered
from tests.streams.test_hostile_kafka import produce
from tests.tenant import Tenant

PARTITIONS = 4


def events(tenant: str, n: int) -> list[bytes]:
    """A tenant's history: memories, a supersession, KPIs over periods and clock ticks."""
    out = []
    for i in range(n):
        if i % 5 == 0:
            kpi = {"metric": "roas", "value": 2.0 + i / 10, "period": f"2026-{1 + i % 12:02d}"}
            e = event("KpiObserved", kpi, tenant=tenant)
        elif i % 7 == 0:
            e = event("ClockTicked", {"now": f"2026-{1 + i % 12:02d}-15T00:00:00Z"}, tenant=tenant)
        else:
            extra = {"replaces": f"m{i - 1}"} if i % 4 == 0 and (i - 1) % 5 and (i - 1) % 7 else {}
            e = event("MemoryRemembered", remembered(f"m{i}", importance=4, **extra), tenant=tenant)
        out.append(codec.encode(e))
    return out


@pytest.mark.parametrize("links", [True, False], ids=["directory", "tar"])
def test_a_snapshot_restores_to_the_same_store(tenant: Tenant, tmp_path: Path, links: bool) -> None:
    tenant.apply("MemoryRemembered", remembered("a", importance=5))
    tenant.apply("KpiObserved", {"metric": "roas", "value": 2.5, "period": "2026-11"})
    tenant.apply(
        "MemoryRemembered", remembered("b", importance=5, replaces="a"), timestamp_ms=1_764_600_000_123
    )
    objects = LocalObjects(tmp_path / "objects")
    snaps = Snapshots(objects, links=links)
    snap = snaps.take("acme", tenant.graph)
    assert (snap.partition, snap.offset, snap.timestamp_ms, snap.handled) == (0, 2, 1_764_600_000_123, 3)
    assert snap.format == ("dir" if links else "tar")
    assert snaps.list("acme") == [snap] and snaps.list("other") == []
    assert snaps.nearest("acme", 0, 3) == snap
    assert snaps.nearest("acme", 0, 2) is None  # a replay that stops before offset 2 cannot use it
    assert snaps.nearest("acme", 1, 3) is None  # another partition's checkpoint
    assert snaps.nearest("acme", 0, 3, at_or_before_ms=1_764_600_000_122) is None
    snaps.restore(snap, tmp_path / "restored")
    restored = TenantGraph(tmp_path / "restored", tenant.graph.knowledge)
    assert export_nquads(restored) == export_nquads(tenant.graph)
    assert restored.checkpoint() == Position(0, 2, 1_764_600_000_123)
    tenant.apply("MemoryRemembered", remembered("c"))  # the live store moves on; the restored one
    restored.apply(event("MemoryRemembered", remembered("d")), Position(0, 3, 1))  # too, elsewhere
    snaps.restore(snap, tmp_path / "again")  # the snapshot itself is unchanged by either
    assert export_nquads(TenantGraph(tmp_path / "again", tenant.graph.knowledge)).count("memoryId") == 2
    with pytest.raises(FileExistsError):
        snaps.restore(snap, tmp_path / "restored")  # never over a store
    if links:
        shutil.rmtree(objects.root / "snapshots" / "acme" / f"{snap.offset:020d}.d")
        with pytest.raises(ValueError, match="lost its data"):
            snaps.restore(snap, tmp_path / "lost")
    else:
        objects.put(f"{snap.key}.tar", b"not a tar")
        with pytest.raises(ValueError, match="corrupt"):
            snaps.restore(snap, tmp_path / "lost")
    assert not (tmp_path / "lost").exists()
    objects.delete(snap.descriptor)  # a snapshot whose description was never written: cut short
    assert snaps.list("acme") == []


def test_a_snapshot_round_trips_through_s3(tenant: Tenant, tmp_path: Path, s3_objects: S3Objects) -> None:
    tenant.apply("MemoryRemembered", remembered("a"))
    objects = s3_objects  # a bucket of this test's own
    snaps = Snapshots(objects)
    snap = snaps.take("acme", tenant.graph)
    snaps.restore(snaps.list("acme")[-1], tmp_path / "restored")
    assert export_nquads(TenantGraph(tmp_path / "restored", tenant.graph.knowledge)) == export_nquads(
        tenant.graph
    )
    for key in (f"{snap.key}.tar", snap.descriptor):
        objects.delete(key)


def test_the_projector_takes_one_every_n_handled_events(tmp_path: Path) -> None:
    tenant = "snappy"
    home = partition_for(tenant, PARTITIONS)
    records = [
        projector.Record(tenant.encode(), value, [], Position(home, i, 1_764_547_200_000 + i))
        for i, value in enumerate(events(tenant, 10))
    ]
    stores = TenantStores(tmp_path / "tenants")
    stores.snapshots = Snapshots(LocalObjects(tmp_path / "objects"), every=4)

    async def nowhere(*_: object) -> None:
        raise AssertionError("nothing is dead-lettered")

    async def run() -> None:
        for start in range(0, len(records), 3):  # cut where the count reaches 4 and 8, whatever the batches
            await projector.handle_batch_with_retries(
                records[start : start + 3], stores, nowhere, partitions=PARTITIONS
            )

    asyncio.run(run())
    taken = stores.snapshots.list(tenant)
    assert [(s.offset, s.handled) for s in taken] == [(3, 4), (7, 8)]
    assert taken[0].timestamp_ms == 1_764_547_200_003
    stores.close()


def replayed(settings: Settings, tenant: str, root: Path, **kw: object) -> tuple[str, list[int]]:
    """The tenant replayed into ``root`` (``replay_tenant``'s keywords passed on): its N-Quads, and
    the offsets the replay reported starting from."""
    starts: list[int] = []
    graph = asyncio.run(
        replay_tenant(settings, tenant, root, progress=lambda at, end: starts.append(at), **kw)
    )
    out = export_nquads(graph) if graph is not None else ""
    del graph
    gc.collect()
    return out, starts


def test_a_replay_starts_at_the_nearest_snapshot_and_equals_one_from_zero(
    settings: Settings, tmp_path: Path
) -> None:
    tenant = "snapr"
    asyncio.run(produce(settings, [(tenant.encode(), value) for value in events(tenant, 40)]))

    replay = functools.partial(replayed, settings, tenant)

    whole, _ = replay(tmp_path / "zero")
    snaps = Snapshots(LocalObjects(tmp_path / "objects"))
    stores = TenantStores(tmp_path / "half")
    asyncio.run(replay_tenant(settings, tenant, tmp_path / "half", until_offset=25, stores=stores))
    graph = stores.get(tenant)
    assert graph is not None
    snap = snaps.take(tenant, graph)
    assert snap.offset == 24
    del graph
    stores.close()
    gc.collect()
    again, starts = replay(tmp_path / "from-snapshot", snapshots=snaps)
    assert again == whole
    assert starts[0] == 25  # the replay began after the snapshot, not at zero
    early, starts = replay(tmp_path / "before", snapshots=snaps, until_offset=20)
    assert early == replay(tmp_path / "before-zero", until_offset=20)[0] and starts[0] == 0


def test_the_retention_applied_at_every_take_keeps_few_and_covers_every_point() -> None:
    """Pruned at each take, as the projector does: the newest ``keep`` and the first stay, O(log)
    in all, and an as_of at any point since the first replays at most its age (plus the gap between
    takes) from a snapshot: measured, at most 2/3 of it."""
    rng = random.Random(28)
    for _ in range(40):
        step, keep = rng.randint(1, 50), rng.randint(1, 4)  # a snapshot every `step` records
        taken = list(range(rng.randint(0, 1000), rng.randint(1000, 30_000), step))
        kept: list[int] = []
        for offset in taken:
            kept = retained([*kept, offset], keep)
        assert kept[-keep:] == taken[-keep:] and kept[0] == taken[0]
        assert len(kept) <= keep + 2 * (taken[-1] - taken[0]).bit_length()
        newest = taken[-1]
        for point in range(taken[0], newest + 1, 13):
            below = max(k for k in kept if k <= point)
            assert point - below <= newest - point + step, (point, below, kept)
    assert retained([5, 6, 7], 0) == [5, 6, 7] == retained([5, 6, 7], 3)


@pytest.mark.parametrize("links", [True, False], ids=["directory", "tar"])
def test_taking_a_snapshot_prunes_the_older_ones(tenant: Tenant, tmp_path: Path, links: bool) -> None:
    """Every take applies the retention: a few snapshots stay, their data and descriptors
    alike, the others' both gone (of 24: 9); the newest still restores; 0 keeps them all."""
    objects = LocalObjects(tmp_path / "objects")
    snaps, keep_all = Snapshots(objects, links=links, keep=2), Snapshots(objects, links=links)
    for i in range(24):
        tenant.apply("MemoryRemembered", remembered(f"m{i}"))
        snaps.take("acme", tenant.graph)
        keep_all.take("other", tenant.graph)
    kept = [s.offset for s in snaps.list("acme")]
    assert kept == [0, 8, 12, 16, 18, 20, 21, 22, 23]
    stored = {p.name for p in (objects.root / "snapshots" / "acme").iterdir() if not p.name.startswith(".")}
    assert stored == {f"{o:020d}.{'d' if links else 'tar'}" for o in kept} | {"index"}
    assert len(list((objects.root / "snapshots" / "acme" / "index").iterdir())) == len(kept)
    assert len(keep_all.list("other")) == 24
    snaps.restore(snaps.newest("acme"), tmp_path / "restored")  # type: ignore[arg-type]
    assert export_nquads(TenantGraph(tmp_path / "restored", tenant.graph.knowledge)) == export_nquads(
        tenant.graph
    )
