"""The open disk stores' memtables under one budget: the largest flushed first, down to half of it."""

from __future__ import annotations

import asyncio
from pathlib import Path

from engram.projections.stores import QUAD_MEMTABLE_BYTES, TenantStores
from engram.projections.tenant_graph import Status
from engram.schemas.events import Position

from tests.factories import event, remembered

APPENDED_MS = 1_764_547_200_000


def written(stores: TenantStores, events: dict[str, int]) -> dict[str, int]:
    """``events[t]`` new memories into tenant ``t``'s store; each store's unflushed quads."""
    for tenant, n in events.items():
        graph = stores.get(tenant, create=True)
        assert graph is not None
        graph.flush()  # what opening the store wrote (the ontology, the rules' facts) is not counted
        for i in range(n):
            e = event("MemoryRemembered", remembered(f"m{i}"), tenant=tenant)
            assert graph.apply(e, Position(0, i, APPENDED_MS)).status is Status.APPLIED
    return {t: g.unflushed for t in events if (g := stores.get(t)) is not None}


def ssts(stores: TenantStores, tenant: str) -> set[str]:
    """The store's table files: a flush writes new ones (which a compaction may merge at once)."""
    return {p.name for p in stores.store_path(tenant).glob("*.sst")}


def test_the_largest_stores_are_flushed_down_to_half_the_budget(tmp_path: Path) -> None:
    stores = TenantStores(tmp_path)
    try:
        quads = written(stores, {"small": 1, "mid": 2, "big": 6})
        assert 0 < quads["small"] < quads["mid"] < quads["big"]  # a quad per fact, the rules' too
        total = stores.memtable_bytes()
        assert total == sum(quads.values()) * QUAD_MEMTABLE_BYTES
        files = {t: ssts(stores, t) for t in quads}

        assert asyncio.run(stores.flush_over_budget(total)) == 0  # within the budget: nothing
        assert asyncio.run(stores.flush_over_budget(0)) == 0  # 0: never
        assert stores.memtable_bytes() == total

        # over it: the biggest alone brings the rest under half the budget
        assert asyncio.run(stores.flush_over_budget(total - 1)) == 1
        assert stores.get("big").unflushed == 0  # type: ignore[union-attr]
        assert ssts(stores, "big") - files["big"]  # really flushed: its memtables are files now
        assert {t: stores.get(t).unflushed for t in ("small", "mid")} == {  # type: ignore[union-attr]
            "small": quads["small"],
            "mid": quads["mid"],
        }
        assert ssts(stores, "small") == files["small"]

        # a budget below every store: each is flushed
        assert asyncio.run(stores.flush_over_budget(1)) == 2
        assert stores.memtable_bytes() == 0
    finally:
        stores.close()


def test_stores_in_memory_have_no_memtables(tmp_path: Path) -> None:
    stores = TenantStores(tmp_path, memory=True)
    try:
        assert written(stores, {"mem": 3})["mem"] > 0
        assert stores.memtable_bytes() == 0
        assert asyncio.run(stores.flush_over_budget(1)) == 0
    finally:
        stores.close()
