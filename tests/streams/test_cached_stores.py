"""Tenants on disk as caches of their snapshots (a group sharing one object store,
``Settings.tenants_move``): a copy here is used only when it holds the newest snapshot's events,
replaced by that snapshot when another process has moved the tenant past it, held (its commits
wait) for what no snapshot holds yet, and deleted when its partition leaves."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from engram.projections.read import export_nquads
from engram.projections.stores import TenantStores
from engram.projections.tenant_graph import StoreOpening
from engram.streams import codec
from engram.streams.keystore import KeyStore
from engram.streams.objects import LocalObjects
from engram.streams.snapshots import Snapshots

from engram.settings import load_settings
from tests.factories import event, remembered
from tests.streams.test_memory_stores import feed, records
from tests.streams.test_snapshots import events

TENANT = "moved"


def cached(root: Path, objects: Path) -> TenantStores:
    stores = TenantStores(root / "tenants", cached=True)
    stores.snapshots = Snapshots(LocalObjects(objects))
    return stores


def test_a_copy_is_used_when_current_and_replaced_when_another_process_moved_past_it(tmp_path: Path) -> None:
    batch = records(TENANT, events(TENANT, 30))
    objects = tmp_path / "objects"
    a = cached(tmp_path / "a", objects)
    feed(a, batch[:10])
    graph = a.get(TENANT)
    assert graph is not None and graph.cached and graph.saved is None and graph.unsaved()
    assert a.durable_below() == {batch[0].position.partition: 0}  # its commits are held
    a.close()  # unsaved: snapshotted as it closes
    del graph  # (a store's handle, and its lock, go with its last reference)

    b = cached(tmp_path / "b", objects)  # another process, given the tenant's partition
    assert b.exists(TENANT) and not (tmp_path / "b" / "tenants" / TENANT).exists()
    moved = b.get(TENANT)
    assert moved is not None and moved.checkpoint() == batch[9].position and not moved.unsaved()
    feed(b, batch[10:20])
    b.close()  # snapshotted at the 20th event
    del moved

    a = cached(tmp_path / "a", objects)  # a's copy holds 10 events, the newest snapshot 20
    back = a.get(TENANT)
    assert back is not None and back.checkpoint() == batch[19].position and not back.unsaved()
    reference = TenantStores(tmp_path / "reference")
    feed(reference, batch[:20])
    assert export_nquads(back) == export_nquads(reference.get(TENANT))

    feed(a, batch[20:25])
    a.snapshots = None
    a.close()  # closed without a snapshot (as a kill would leave it): ahead of the newest
    del back
    a = cached(tmp_path / "a", objects)
    ahead = a.get(TENANT)
    assert ahead is not None and ahead.checkpoint() == batch[24].position  # kept, not restored
    assert ahead.saved == batch[19].position and ahead.unsaved()  # the 5 after the snapshot are held
    feed(reference, batch[20:25])
    assert export_nquads(ahead) == export_nquads(reference.get(TENANT))
    reference.close()

    # its partition leaves: snapshotted (unsaved), closed, and its directory deleted
    del ahead
    assert asyncio.run(a.drop(lambda tenant: False)) == 1
    assert not (tmp_path / "a" / "tenants" / TENANT).exists()
    newest = a.snapshots.newest(TENANT) if a.snapshots is not None else None
    assert newest is not None and newest.offset == batch[24].position.offset
    a.close()


def test_a_copy_left_from_before_is_deleted_when_the_partition_is_not_ours(tmp_path: Path) -> None:
    batch = records(TENANT, events(TENANT, 6))
    a = cached(tmp_path / "a", tmp_path / "objects")
    feed(a, batch)
    a.snapshots = None
    a.close()  # as a kill -9 leaves it: a copy on disk, no snapshot
    a = cached(tmp_path / "a", tmp_path / "objects")
    assert asyncio.run(a.drop(lambda tenant: False)) == 0  # not open, but on disk
    assert not (tmp_path / "a" / "tenants" / TENANT).exists() and a.tenants() == []


def test_tenants_move_when_the_object_store_can_be_shared(tmp_path: Path) -> None:
    data = tmp_path / "data"
    assert not load_settings(data_dir=data, s3_endpoint=None).tenants_move  # a lone process
    assert not load_settings(data_dir=data, archive_dir=data / "archive", s3_endpoint=None).tenants_move
    assert load_settings(data_dir=data, archive_dir=tmp_path / "objects", s3_endpoint=None).tenants_move
    assert load_settings(data_dir=data, s3_endpoint="http://s3:80").tenants_move
    assert load_settings(data_dir=data, store="memory", s3_endpoint=None).tenants_move


def test_an_erasure_of_a_cached_tenant_keeps_one_snapshot_and_no_words(tmp_path: Path) -> None:
    stores = cached(tmp_path / "a", tmp_path / "objects")
    stores.snapshots = Snapshots(LocalObjects(tmp_path / "objects"), every=2)
    stores.keys = KeyStore(tmp_path / "keys")
    # words of their own: "secret words 1" can be found in a compressed table file that holds
    # "secret words 0" and "secret words 2" and never the other
    words = ["alphaword", "bravoword", "charlieword", "deltaword", "echoword"]
    values = [
        codec.encode(event("MemoryRemembered", remembered(f"m{i}", content=f"secret {w}"), tenant=TENANT))
        for i, w in enumerate(words)
    ]
    values.append(codec.encode(event("MemoryForgotten", {"memory_id": "m1"}, tenant=TENANT)))
    feed(stores, records(TENANT, values), size=100)
    snaps = stores.snapshots.list(TENANT)
    assert [s.offset for s in snaps] == [5]  # taken after the rewrite; the older ones, with the words, purged
    files = [p for p in (tmp_path / "objects").rglob("*") if p.is_file()]
    assert files and not any(b"bravoword" in p.read_bytes() for p in files)
    assert any(b"alphaword" in p.read_bytes() for p in files)  # (the scan can find what is kept)
    graph = stores.get(TENANT)
    assert graph is not None and not graph.unsaved() and "bravoword" not in export_nquads(graph)
    del graph
    stores.close()
    moved = cached(tmp_path / "b", tmp_path / "objects").get(TENANT)  # another process restores it
    assert (
        moved is not None and "bravoword" not in export_nquads(moved) and "alphaword" in export_nquads(moved)
    )


@pytest.mark.parametrize("cache", [False, True])
def test_a_store_opened_off_the_loop_is_refused_meanwhile_then_shared(tmp_path: Path, cache: bool) -> None:
    """The projector opens (or makes) a store in a thread (``get_async``): the loop goes on, a read
    of that tenant meanwhile is told it is being opened (a 503 over HTTP), and after it is the one
    open graph."""
    stores = TenantStores(tmp_path / "tenants", cached=cache)
    ticks = 0

    async def ticking() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0)
            ticks += 1

    async def go() -> None:
        ticker = asyncio.ensure_future(ticking())
        opening = asyncio.ensure_future(stores.get_async("fresh", create=True))
        await asyncio.sleep(0)  # the open has begun, in its thread
        with pytest.raises(StoreOpening):
            stores.get("fresh")
        graph = await opening
        ticker.cancel()
        assert ticks > 0 and graph is not None and stores.get("fresh") is graph and graph.cached is cache
        assert await stores.get_async("fresh") is graph and await stores.get_async("absent") is None

    asyncio.run(go())
    stores.close()
