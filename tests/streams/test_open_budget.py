"""The open tenants' memory budget (``ENGRAM_OPEN_STORES_MB``): past it, the least recently used
tenants are closed, on disk as a tenant opens and between batches, in memory between batches
after a snapshot; what is closed reopens whole, and the budget never closes the tenant in use."""

from __future__ import annotations

import asyncio
from pathlib import Path

from engram.projections.read import export_nquads
from engram.projections.stores import TenantStores
from engram.projections.tenant_graph import MEMORY_QUAD_BYTES, QUAD_MEMTABLE_BYTES, STORE_OPEN_BYTES
from engram.projections.text_index import WRITER_HEAP_BYTES
from engram.projections.vector_index import HNSW_FIXED_BYTES

from tests.factories import remembered
from tests.projections.test_indexes import Tenant
from tests.streams.test_memory_stores import feed, memory_stores, records
from tests.streams.test_snapshots import events


def test_a_disk_tenant_opened_past_the_budget_closes_the_least_recently_used(tmp_path: Path) -> None:
    # room for two open stores and their few unflushed writes, not three
    stores = TenantStores(tmp_path, max_open_bytes=2 * STORE_OPEN_BYTES + (2 << 20))
    exports = {}
    for name in ("bud1", "bud2", "bud3", "bud4"):
        feed(stores, records(name, events(name, 12)))
        exports[name] = export_nquads(stores.get(name))
        assert stores.open_bytes() <= stores.max_open_bytes
    assert list(stores._open) == ["bud3", "bud4"]
    assert stores.open_bytes() == sum(stores.resident_bytes(t) for t in ("bud3", "bud4"))
    assert stores.resident_bytes("bud1") == 0  # closed
    reopened = stores.get("bud1")
    assert reopened is not None and export_nquads(reopened) == exports["bud1"]
    assert reopened.handled() == 12
    assert list(stores._open) == ["bud4", "bud1"]  # bud3 made room for it
    stores.close()


def test_a_tenant_that_grows_past_the_budget_has_the_others_closed_between_batches(tmp_path: Path) -> None:
    stores = TenantStores(tmp_path, max_open_bytes=3 * STORE_OPEN_BYTES + (1 << 20))
    for name in ("gr1", "gr2", "gr3"):
        feed(stores, records(name, events(name, 3)))
    assert len(stores._open) == 3 and asyncio.run(stores.trim()) == 0
    graph = stores.get("gr3")
    assert graph is not None
    before = graph.resident_bytes()
    feed(stores, records("gr3", events("gr3", 60), start=3)[3:])  # its memtables grow
    grown = graph.resident_bytes()
    assert grown > before and grown == STORE_OPEN_BYTES + graph.unflushed * QUAD_MEMTABLE_BYTES
    assert stores.open_bytes() > stores.max_open_bytes
    assert asyncio.run(stores.trim()) >= 1 and "gr1" not in stores._open and "gr3" in stores._open
    assert stores.open_bytes() <= stores.max_open_bytes or list(stores._open) == ["gr3"]
    graph.flush()  # what was unflushed is on disk: the estimate drops to the store's fixed part
    assert graph.resident_bytes() == STORE_OPEN_BYTES
    stores.close()


def test_memory_tenants_past_the_budget_are_snapshotted_then_closed(tmp_path: Path) -> None:
    stores = memory_stores(tmp_path)
    for name in ("mb1", "mb2", "mb3"):
        feed(stores, records(name, events(name, 12)))
    sizes = {name: stores.resident_bytes(name) for name in ("mb1", "mb2", "mb3")}
    graph = stores.get("mb1")
    assert graph is not None and sizes["mb1"] == len(graph.store) * MEMORY_QUAD_BYTES
    before = export_nquads(graph)
    stores.get("mb2")
    stores.get("mb3")
    stores.max_open_bytes = sizes["mb2"] + sizes["mb3"]  # room for all but the least recently used
    assert asyncio.run(stores.trim()) == 1 and list(stores._open) == ["mb2", "mb3"]
    assert [s.handled for s in stores.snapshots.list("mb1")] == [12]
    assert export_nquads(stores.get("mb1")) == before
    stores.close()


def test_an_unsaved_tenant_with_nowhere_to_save_it_stays_open_over_the_budget(tmp_path: Path) -> None:
    stores = TenantStores(tmp_path, memory=True, max_open_bytes=1)
    for name in ("vb1", "vb2", "vb3"):
        feed(stores, records(name, events(name, 3)))
    assert asyncio.run(stores.trim()) == 0 and len(stores._open) == 3


def test_an_open_tenants_indexes_count_in_its_estimate(tmp_path: Path) -> None:
    """The indexes' part: hnswlib's fixed locks and its capacity, the text overlay, an open writer's
    heap (gone once the idle writer is closed), the facts cached for ranking."""
    t = Tenant(tmp_path)
    graph_only = t.stores.resident_bytes("t")  # nothing yet: no graph
    assert graph_only == 0
    t.apply("MemoryRemembered", remembered("cap", label="Meta cap", content="Max 40k a month on meta"))
    ix = t.indexes()
    graph = t.stores.get("t")
    assert graph is not None
    vectors = HNSW_FIXED_BYTES + ix.vectors.index.max_elements * (4 * ix.vectors.dim + 4 * 33 + 16)
    assert ix.vectors.resident_bytes() == vectors + 120 * ix.vectors.count()
    with_writer = ix.resident_bytes()
    assert ix.text._writer is not None and with_writer >= vectors + WRITER_HEAP_BYTES
    assert t.stores.resident_bytes("t") == graph.resident_bytes() + with_writer
    assert ix.text.release_writer()
    assert ix.resident_bytes() == with_writer - WRITER_HEAP_BYTES
    t.stores.close()
