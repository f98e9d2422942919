"""Valid time of memories: validity intervals in the graph, closed by supersession (held_at)."""

from __future__ import annotations

from datetime import UTC, datetime

from engram.projections.visibility import held_at

from tests.factories import remembered
from tests.tenant import Tenant


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def test_supersession_closes_validity_at_the_new_ones_valid_from(tenant: Tenant) -> None:
    tenant.apply("MemoryRemembered", remembered("a"), occurred_at="2026-01-01T00:00:00Z")
    tenant.apply("MemoryRemembered", remembered("b", replaces="a"), occurred_at="2026-03-01T00:00:00Z")
    assert tenant.values("a", "validTo") == {"2026-03-01T00:00:00Z"}
    assert tenant.values("b", "validTo") == set()
    g = tenant.graph
    assert not held_at(g, "a", at("2025-12-31T23:59:59"))
    assert held_at(g, "a", at("2026-01-01T00:00:00")) and held_at(g, "a", at("2026-02-28T23:59:59"))
    assert not held_at(g, "a", at("2026-03-01T00:00:00"))
    assert held_at(g, "b", at("2026-03-01T00:00:00")) and not held_at(g, "b", at("2026-02-28T23:59:59"))
    assert not held_at(g, "nobody", at("2026-03-01T00:00:00"))


def test_an_explicit_supersede_a_restore_expiry_and_forgetting(tenant: Tenant) -> None:
    tenant.apply("MemoryRemembered", remembered("a", expires_at="2026-06-01T00:00:00Z"),
                 occurred_at="2026-01-01T00:00:00Z")  # fmt: skip
    tenant.apply("MemoryRemembered", remembered("b"), occurred_at="2026-02-01T00:00:00Z")
    tenant.apply(
        "MemorySuperseded", {"memory_id": "a", "superseded_by": "b"}, occurred_at="2026-04-01T00:00:00Z"
    )
    assert tenant.values("a", "validTo") == {"2026-02-01T00:00:00Z"}  # b's valid_from, not the event's time
    tenant.apply("MemoryRestored", {"memory_id": "a"})
    assert tenant.values("a", "validTo") == set()
    assert held_at(tenant.graph, "a", at("2026-05-31T23:59:59"))
    assert not held_at(tenant.graph, "a", at("2026-06-01T00:00:00"))  # expired then
    tenant.apply("MemoryForgotten", {"memory_id": "b"})
    assert not held_at(tenant.graph, "b", at("2026-03-01T00:00:00"))  # erased: it held for nobody
