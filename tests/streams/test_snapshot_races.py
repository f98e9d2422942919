"""A snapshot deleted by another process (its retention, or a purge after a forget) between a
reader picking it and reading it: the reader picks again, or replays the log, and answers the same
graph as a replay from zero; never an error."""

from __future__ import annotations

import asyncio
import functools
import gc
from collections.abc import Callable
from pathlib import Path

import pytest
from engram.projections.read import export_nquads
from engram.projections.stores import TenantStores
from engram.streams.objects import LocalObjects, Objects
from engram.streams.replay import replay_tenant
from engram.streams.snapshots import Snapshot, Snapshots, Vanished

from engram.settings import Settings
from tests.streams.test_hostile_kafka import produce
from tests.streams.test_memory_stores import feed, records
from tests.streams.test_snapshots import events, replayed


class Raced(Snapshots):
    """Snapshots whose first pick is followed, before it is read, by ``rival`` (another process's
    work on the same object store)."""

    def __init__(self, objects: Objects, rival: Callable[[Snapshot], None], **kw: bool) -> None:
        super().__init__(objects, **kw)
        self.rival: Callable[[Snapshot], None] | None = rival
        self.picked: list[int] = []

    def _raced(self, snap: Snapshot | None) -> Snapshot | None:
        if snap is not None:
            self.picked.append(snap.offset)
            if self.rival is not None:
                rival, self.rival = self.rival, None
                rival(snap)
        return snap

    def nearest(self, *args, **kw) -> Snapshot | None:  # type: ignore[no-untyped-def]
        return self._raced(super().nearest(*args, **kw))

    def newest(self, tenant: str) -> Snapshot | None:
        return self._raced(super().newest(tenant))


@pytest.mark.parametrize("where", ["directory", "s3"])  # a local tar reads as S3 does
def test_an_as_of_whose_snapshot_is_pruned_or_purged_meanwhile_answers_the_replay(
    settings: Settings, tmp_path: Path, request: pytest.FixtureRequest, where: str
) -> None:
    tenant = f"race{where[:3]}"
    asyncio.run(produce(settings, [(tenant.encode(), value) for value in events(tenant, 40)]))

    replay = functools.partial(replayed, settings, tenant)

    objects: Objects = (
        request.getfixturevalue("s3_objects") if where == "s3" else LocalObjects(tmp_path / "objects")
    )
    links = where == "directory"
    taker = Snapshots(objects, links=links)
    for until in (15, 30):  # snapshots at offsets 14 and 29
        stores = TenantStores(tmp_path / f"at-{until}")
        asyncio.run(replay_tenant(settings, tenant, stores.root, until_offset=until, stores=stores))
        graph = stores.get(tenant)
        assert graph is not None
        taker.take(tenant, graph)
        del graph
        stores.close()
        gc.collect()
    whole, _ = replay(tmp_path / "zero")
    other = Snapshots(objects, links=links)  # another process sharing the object store

    def prune(snap: Snapshot) -> None:  # the retention drops the picked one; an older one stays
        other._delete(tenant, [snap.offset])

    pruned = Raced(objects, prune, links=links)
    again, starts = replay(tmp_path / "pruned", snapshots=pruned)
    assert again == whole
    assert pruned.picked == [29, 14] and starts[0] == 15  # picked again: the older one

    def purge(_: Snapshot) -> None:  # a forget purges every one: the log has it all
        other.purge(tenant)

    taker.take(tenant, _graph_at(settings, tenant, tmp_path / "at-40", 40))
    purged = Raced(objects, purge, links=links)
    again, starts = replay(tmp_path / "purged", snapshots=purged)
    assert again == whole
    assert purged.picked == [39] and starts[0] == 0 and other.list(tenant) == []


def _graph_at(settings: Settings, tenant: str, root: Path, until: int):  # type: ignore[no-untyped-def]
    stores = TenantStores(root)
    asyncio.run(replay_tenant(settings, tenant, root, until_offset=until, stores=stores))
    return stores.get(tenant)


def test_a_tenant_opened_in_memory_as_its_snapshot_is_purged_opens_from_the_newer_one(tmp_path: Path) -> None:
    tenant = "racemem"
    batch = records(tenant, events(tenant, 30))
    objects = LocalObjects(tmp_path / "objects")
    owner = TenantStores(tmp_path / "owner" / "tenants", memory=True)  # the process that moves on
    owner.snapshots = Snapshots(objects)
    feed(owner, batch[:20])
    graph = owner.get(tenant)
    assert graph is not None
    owner.snapshots.take(tenant, graph)

    def forget_and_move_on(snap: Snapshot) -> None:  # it takes a newer one and purges the rest
        feed(owner, batch[20:])
        newer = owner.snapshots.take(tenant, graph)
        assert owner.snapshots.purge(tenant, keep=newer.offset) == 1

    reader = TenantStores(tmp_path / "reader" / "tenants", memory=True)  # a process taking it over
    reader.snapshots = raced = Raced(objects, forget_and_move_on)
    opened = reader.get(tenant)
    assert opened is not None
    assert raced.picked == [batch[19].position.offset, batch[29].position.offset]
    assert export_nquads(opened) == export_nquads(graph) and opened.handled() == 30
    with pytest.raises(Vanished, match="lost its data"):
        raced.load(Snapshot(tenant, 0, 19, 0, 20, 0, "", "nquads"))  # the one deleted: not an empty store
    reader.close()
    owner.close()
