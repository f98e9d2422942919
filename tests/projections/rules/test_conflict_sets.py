"""Conflicts as conflict-set membership (#27 item 1): facts linear in the members, pairs read."""

from __future__ import annotations

from pathlib import Path

from engram.projections.conflict_sets import CONFLICTS_WITH, IN_SET
from engram.projections.explain import derived_for_memory
from engram.projections.knowledge import load_knowledge
from engram.projections.resolve import conflict_sets, in_conflict
from engram.projections.terms import INFERRED
from engram.projections.visibility import everything, inferred_by_name

from tests.factories import remembered
from tests.tenant import Tenant, from_scratch

SAID = "Caroline said"


def turns(tenant: Tenant, k: int, *, same_label: bool) -> None:
    for i in range(k):
        label = SAID if same_label else f"{SAID}, turn {i}"
        tenant.apply("MemoryRemembered", remembered(f"turn-{i}", label=label))


def inferred_count(tenant: Tenant) -> int:
    return sum(1 for _ in tenant.graph.store.quads_for_pattern(None, None, None, INFERRED))


def test_k_memories_sharing_a_label_make_k_more_facts_not_k_squared(tmp_path: Path) -> None:
    counts = {}
    for k in (5, 40):
        same, unique = Tenant(tmp_path / f"same{k}"), Tenant(tmp_path / f"unique{k}")
        turns(same, k, same_label=True)
        turns(unique, k, same_label=False)
        counts[k] = inferred_count(same) - inferred_count(unique)
        # one membership each (a unique-label memory is alone in its set: k of those too), no pairs
        assert not list(same.graph.store.quads_for_pattern(None, CONFLICTS_WITH, None, None))
        assert sum(1 for _ in same.graph.store.quads_for_pattern(None, IN_SET, None, INFERRED)) == k
        assert same.values("turn-0", "conflictsWith") == {f"urn:engram:memory:turn-{i}" for i in range(1, k)}
        assert unique.values("turn-0", "conflictsWith") == set()
        assert same.graph.inferred() == from_scratch(same.graph)
    assert counts == {5: 0, 40: 0}  # the same facts as unique labels: linear in k


def test_supersede_and_forget_update_the_pairs_readers_see(tenant: Tenant) -> None:
    for i in range(3):
        tenant.apply("MemoryRemembered", remembered(f"v{i}", label="Brand voice"))
    assert tenant.values("v0", "conflictsWith") == {"urn:engram:memory:v1", "urn:engram:memory:v2"}
    assert conflict_sets(tenant.graph, everything) == [["v0", "v1", "v2"]]
    assert [
        d["value"] for d in derived_for_memory(tenant.graph, "v0") if d["predicate"] == "conflictsWith"
    ] == [
        "v1",
        "v2",
    ]
    tenant.apply("MemorySuperseded", {"memory_id": "v0", "superseded_by": "v1"})
    assert tenant.values("v0", "conflictsWith") == set()  # no longer active: in no set
    assert tenant.values("v1", "conflictsWith") == {"urn:engram:memory:v2"}
    assert conflict_sets(tenant.graph, everything) == [["v1", "v2"]]
    assert tenant.graph.inferred() == from_scratch(tenant.graph)
    tenant.apply("MemoryForgotten", {"memory_id": "v2", "reason": "gdpr"})
    assert tenant.values("v1", "conflictsWith") == set()
    assert conflict_sets(tenant.graph, everything) == []
    assert not in_conflict(tenant.graph, "v1", everything)
    assert "conflictsWith" not in inferred_by_name(tenant.graph, "v1")
    assert tenant.graph.inferred() == from_scratch(tenant.graph)
    tenant.apply("MemoryRestored", {"memory_id": "v0"})
    assert tenant.values("v1", "conflictsWith") == {"urn:engram:memory:v0"}
    assert tenant.graph.inferred() == from_scratch(tenant.graph)


def test_a_reader_sees_only_the_pairs_of_memories_it_may_see(tenant: Tenant) -> None:
    for i in range(3):
        tenant.apply("MemoryRemembered", remembered(f"v{i}", label="Brand voice"))
    hides_v2 = lambda memory_id: memory_id != "v2"  # noqa: E731
    assert conflict_sets(tenant.graph, hides_v2) == [["v0", "v1"]]
    shown = [d["value"] for d in derived_for_memory(tenant.graph, "v0", hides_v2)]
    assert shown.count("v1") == 1 and "v2" not in shown
    assert conflict_sets(tenant.graph, lambda memory_id: memory_id == "v0") == []
    assert not in_conflict(tenant.graph, "v0", lambda memory_id: memory_id == "v0")
    assert in_conflict(tenant.graph, "v0", hides_v2)


def test_a_pair_is_explained_as_before_naming_the_set(tenant: Tenant) -> None:
    tenant.apply("MemoryRemembered", remembered("v1", label="Brand voice", memory_class="BrandVoiceMemory"))
    tenant.apply("MemoryRemembered", remembered("v2", label="brand VOICE", memory_class="BrandVoiceMemory"))
    (pair,) = [d for d in derived_for_memory(tenant.graph, "v1") if d["predicate"] == "conflictsWith"]
    key = "https://engram.dev/ns#BrandVoiceMemory label=brand voice"
    assert pair["explanation"] == f"conflicts with v2: both active, same {key}, same company scope (company)"
    assert [(i["subject"], i["predicate"], i["object"]) for i in pair["inputs"]] == [
        (m, "inConflictSet", f"company company {key}") for m in ("v1", "v2")
    ]


def test_conflicts_with_stays_a_reserved_property_name() -> None:
    assert load_knowledge().reserved("conflictsWith")
