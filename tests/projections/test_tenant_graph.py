"""Projection of each event type into a real on-disk pyoxigraph store."""

from __future__ import annotations

from pathlib import Path

from engram.projections.read import export_nquads, get_memory, list_memory_ids
from engram.projections.tenant_graph import Status, TenantGraph
from engram.schemas.events import Position

from tests.factories import EXAMPLES, event, remembered
from tests.tenant import Tenant


def test_remembered_projects_every_field(tenant: Tenant) -> None:
    assert tenant.apply("MemoryRemembered", dict(EXAMPLES["MemoryRemembered"])) is Status.APPLIED
    m = get_memory(tenant.graph, "m1")
    assert m is not None
    assert m["memory_class"] == "PerformanceTargetMemory"
    assert (m["kind"], m["scope"], m["importance"], m["importance_name"]) == (
        "objective",
        "company",
        5,
        "Critical",
    )
    assert m["confidence"] == 0.9
    assert m["expires_at"] == "2027-01-01T00:00:00Z"
    assert m["properties"] == {"metric": "roas", "goal": 3.0, "strict": True, "window": 30}
    assert m["stakeholders"] == {"user_id": None, "team_ids": ["growth"]}
    assert m["actor"] == {"id": "dana", "role": "operator"} and m["source"] == "operator"
    assert m["recorded_at"] == "2025-12-01T00:00:00Z"
    assert m["active"] is True and len(m["lineage"]) == 1


def test_revised_three_states_absent_null_value(tenant: Tenant) -> None:
    tenant.apply("MemoryRemembered", dict(EXAMPLES["MemoryRemembered"]))
    assert tenant.apply("MemoryRevised", dict(EXAMPLES["MemoryRevised"])) is Status.APPLIED
    m = get_memory(tenant.graph, "m1")
    assert m is not None
    assert m["label"] == "new label"  # value: set
    assert m["importance"] == 4
    assert m["expires_at"] is None  # null: cleared
    assert m["content"] == "content of m1"  # absent: untouched
    assert m["properties"]["goal"] == 3.5
    assert "window" not in m["properties"]
    assert m["properties"]["metric"] == "roas"
    assert len(m["lineage"]) == 2


def test_supersede_restore_and_forget(tenant: Tenant) -> None:
    tenant.apply("MemoryRemembered", remembered("m1"))
    tenant.apply("MemoryRemembered", remembered("m2"))
    assert tenant.apply("MemorySuperseded", {"memory_id": "m1", "superseded_by": "m2"}) is Status.APPLIED
    assert get_memory(tenant.graph, "m1")["superseded_by"] == "m2"  # type: ignore[index]
    assert get_memory(tenant.graph, "m2")["supersedes"] == ["m1"]  # type: ignore[index]
    assert list_memory_ids(tenant.graph, active=True) == ["m2"]
    assert list_memory_ids(tenant.graph, active=False) == ["m1"]
    assert tenant.apply("MemoryRestored", {"memory_id": "m1"}) is Status.APPLIED
    assert sorted(list_memory_ids(tenant.graph, active=True)) == ["m1", "m2"]
    again = {"event_id": "00000000-0000-4000-8000-000000000001"}  # a new restore, not a retry
    assert tenant.apply("MemoryRestored", {"memory_id": "m1"}, **again) is Status.REJECTED
    assert "not superseded" in tenant.reason
    assert tenant.apply("MemoryForgotten", {"memory_id": "m2", "reason": "gdpr"}) is Status.APPLIED
    m2 = get_memory(tenant.graph, "m2")
    assert m2 is not None and m2["content"] == "[redacted]" and m2["forgotten"] and not m2["active"]
    assert m2["label"] == "(erased)" and len(m2["lineage"]) == 2  # node and lineage kept, label erased


def test_replaces_supersedes_in_the_same_event(tenant: Tenant) -> None:
    tenant.apply("MemoryRemembered", remembered("old"))
    assert tenant.apply("MemoryRemembered", remembered("new", replaces="old")) is Status.APPLIED
    assert get_memory(tenant.graph, "old")["superseded_by"] == "new"  # type: ignore[index]


def test_kpi_spend_clock_stakeholder_replace_their_values(tenant: Tenant) -> None:
    tenant.apply("KpiObserved", {"metric": "roas", "value": 2.7, "period": "2026-11"})
    tenant.apply("KpiObserved", {"metric": "roas", "value": 3.2, "period": "2026-12"})
    tenant.apply("SpendObserved", dict(EXAMPLES["SpendObserved"]))
    tenant.apply("ClockTicked", {"now": "2026-12-01T00:00:00Z"})
    tenant.apply("ClockTicked", {"now": "2026-12-02T00:00:00Z"})
    tenant.apply("StakeholderChanged", dict(EXAMPLES["StakeholderChanged"]))
    tenant.apply("StakeholderChanged", {"user_id": "sam", "team_ids": ["brand"], "role": "operator"})
    q = tenant.graph.store.query
    pre = "PREFIX e: <https://engram.dev/ns#> SELECT * WHERE { GRAPH ?g { "
    assert [r["v"].value for r in q(pre + "<urn:engram:kpi:roas:2026-12> e:value ?v } }")] == ["3.2"]
    assert [r["v"].value for r in q(pre + "<urn:engram:kpi:roas:2026-11> e:value ?v } }")] == ["2.7"]
    assert [r["v"].value for r in q(pre + "<urn:engram:spend:meta:USD:2026-11> e:amount ?v } }")] == ["34000"]
    assert [r["v"].value for r in q(pre + "<urn:engram:clock> e:now ?v } }")] == ["2026-12-02T00:00:00Z"]
    assert [r["v"].value for r in q(pre + "<urn:engram:user:sam> e:team ?v } }")] == ["brand"]
    assert [r["v"].value for r in q(pre + "<urn:engram:user:sam> e:role ?v } }")] == ["operator"]


def test_redelivery_is_skipped_by_the_checkpoint(tenant: Tenant, tmp_path: Path) -> None:
    tenant.apply("MemoryRemembered", remembered("m1"))
    ev = event("MemoryRevised", {"memory_id": "m1", "changes": {"label": "A"}})
    assert tenant.graph.apply(ev, Position(3, 1)).status is Status.APPLIED
    later = event("MemoryRevised", {"memory_id": "m1", "changes": {"label": "B"}})
    assert tenant.graph.apply(later, Position(3, 2)).status is Status.APPLIED
    before = export_nquads(tenant.graph)
    assert tenant.graph.apply(ev, Position(3, 1)).status is Status.SKIPPED  # redelivered: no effect
    assert export_nquads(tenant.graph) == before
    assert get_memory(tenant.graph, "m1")["label"] == "B"  # type: ignore[index]
    assert tenant.graph.handled() == 3
    assert tenant.graph.checkpoint() == Position(3, 2)


def test_checkpoint_survives_reopening(tmp_path: Path) -> None:
    g = TenantGraph(tmp_path / "graph")
    g.apply(event("MemoryRemembered", remembered("m1")), Position(0, 41))
    del g
    again = TenantGraph(tmp_path / "graph")
    assert again.checkpoint() == Position(0, 41)
    assert again.apply(event("MemoryRemembered", remembered("m1")), Position(0, 41)).status is Status.SKIPPED


def test_the_projection_facts_kept_in_memory_equal_the_stores(tmp_path: Path) -> None:
    """The checkpoint, the count and the rules' offset are read from the store once and kept with
    each write: they must stay what the store holds, through commits, a refusal and a reopen."""
    from engram.projections.terms import META, PROJECTION
    from pyoxigraph import Store

    g = TenantGraph(tmp_path / "graph")
    g.apply(event("MemoryRemembered", remembered("m1")), Position(0, 1))
    g.apply(event("MemoryRevised", {"memory_id": "nope", "changes": {"label": "A"}}), Position(0, 2))
    g.apply(event("KpiObserved", {"metric": "roas", "value": 2.5, "period": "2026-12"}), Position(0, 3))
    stored = {q.predicate.value: q.object for q in g.store.quads_for_pattern(PROJECTION, None, None, META)}
    assert {k.removeprefix("https://engram.dev/ns#"): o for k, o in stored.items()} == g._metas()
    assert len(stored) == len(g._metas()) == 6  # one value each: the old ones were removed
    assert g.checkpoint() == Position(0, 3) and g.handled() == 3
    g.rematerialize()
    kept = dict(g._metas())
    g.store = Store()  # a new store (an erasure's copy): nothing cached of the old one is kept
    assert g._meta_cache is None and g.checkpoint() is None
    del g
    assert TenantGraph(tmp_path / "graph")._metas() == kept


def test_a_series_replaced_in_place_flushes_its_tombstones(tmp_path: Path) -> None:
    """Each KPI update replaces values (and the checkpoint) in place; the deletions it leaves in
    RocksDB's memtable are stepped past by every scan until a flush, so once they reach
    ``TOMBSTONES_PER_FLUSH`` the projector's flush between batches flushes that store, whatever
    the memory budget (a KPI update stays flat instead of growing)."""
    import asyncio

    from engram.projections import tenant_graph
    from engram.projections.stores import TenantStores

    stores = TenantStores(tmp_path / "tenants")
    g = stores.get("acme", create=True)
    assert g is not None
    due = 0
    for i in range(1, 700):
        kpi = event("KpiObserved", {"metric": "roas", "value": 2 + i / 1000, "period": "2026-12"})
        assert g.apply(kpi, Position(0, i)).status is Status.APPLIED
        if g.tombstones_due():
            due += 1
            assert g.removed_unflushed >= tenant_graph.TOMBSTONES_PER_FLUSH
            assert asyncio.run(stores.flush_over_budget(0)) == 1  # no budget: the tombstones alone
            assert g.removed_unflushed == 0 and not g.tombstones_due()
    assert due >= 1
    stores.close()


def test_invalid_against_state_is_rejected_but_moves_the_position(tenant: Tenant) -> None:
    assert tenant.apply("MemoryRevised", {"memory_id": "ghost", "changes": {"label": "x"}}) is Status.REJECTED
    assert tenant.reason == "memory ghost not found"
    assert tenant.apply("MemorySuperseded", {"memory_id": "ghost", "superseded_by": "m9"}) is Status.REJECTED
    tenant.apply("MemoryRemembered", remembered("m1"))
    assert tenant.apply("MemoryRemembered", remembered("m1", label="other")) is Status.REJECTED
    assert "already exists" in tenant.reason
    assert tenant.graph.checkpoint() == Position(0, 3)
    assert tenant.graph.handled() == 4


def test_literals_with_quotes_and_newlines_are_stored_verbatim(tenant: Tenant) -> None:
    tricky = 'He said "}} ; DROP ALL ; INSERT DATA {" \n\t\\ and left'
    tenant.apply("MemoryRemembered", remembered("m1", content=tricky, label="<script>"))
    m = get_memory(tenant.graph, "m1")
    assert m is not None and m["content"] == tricky and m["label"] == "<script>"


def test_list_filters(tenant: Tenant) -> None:
    tenant.apply(
        "MemoryRemembered", remembered("a", kind="preference", scope="user", stakeholders={"user_id": "sam"})
    )
    tenant.apply(
        "MemoryRemembered",
        remembered(
            "b",
            kind="objective",
            memory_class="PerformanceTargetMemory",
            properties={"metric": "roas", "goal": 3},
        ),
    )
    tenant.apply("MemoryRemembered", remembered("c", kind="objective"))
    tenant.apply("MemorySuperseded", {"memory_id": "c", "superseded_by": "b"})
    assert list_memory_ids(tenant.graph, kind="preference") == ["a"]
    assert sorted(list_memory_ids(tenant.graph, kind="objective")) == ["b", "c"]
    assert sorted(list_memory_ids(tenant.graph, scope="company")) == ["b", "c"]
    assert list_memory_ids(tenant.graph, memory_class="PerformanceTargetMemory") == ["b"]
    assert list_memory_ids(tenant.graph, memory_class=":PerformanceTargetMemory") == ["b"]
    assert list_memory_ids(tenant.graph, kind="objective", active=True) == ["b"]
    assert list_memory_ids(tenant.graph, kind="fact") == []
