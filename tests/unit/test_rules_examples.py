"""Every rule on hand-made cases, including the design's worked examples."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from pyoxigraph import Literal, NamedNode, Triple

from projections.explain import derived_for_memory
from projections.knowledge import DEFAULT_ONTOLOGY_DIR, DEFAULT_RULES_DIR, Knowledge, load_knowledge
from projections.read import get_memory, list_memory_ids
from projections.tenant_graph import Status, TenantGraph
from projections.terms import memory_iri
from schemas import vocabulary as v
from schemas.events import Position
from tests.factories import event, remembered
from tests.unit.test_rules_incremental import from_scratch

E = v.ENGRAM


class Tenant:
    """A real on-disk tenant store fed events at increasing offsets and times."""

    def __init__(self, path: Path, knowledge: Knowledge | None = None) -> None:
        self.graph = TenantGraph(path, knowledge)
        self.offset = -1

    def send(self, event_type: str, payload: dict[str, Any]) -> Status:
        self.offset += 1
        outcome = self.graph.apply(
            event(event_type, payload), Position(0, self.offset, 1_764_547_200_000 + self.offset)
        )
        self.reason = outcome.reason
        return outcome.status

    def values(self, memory_id: str, predicate: str) -> set[str]:
        return {
            q.object.value
            for q in self.graph.store.quads_for_pattern(memory_iri(memory_id), NamedNode(E + predicate), None)
        }

    def classes(self, memory_id: str) -> set[str]:
        return {c.removeprefix(E) for c in self.values(memory_id, "").union(self._types(memory_id))}

    def _types(self, memory_id: str) -> set[str]:
        return {
            q.object.value
            for q in self.graph.store.quads_for_pattern(memory_iri(memory_id), NamedNode(v.RDF_TYPE), None)
        }

    def has(self, memory_id: str, cls: str) -> bool:
        return E + cls in self._types(memory_id)

    def explanation(self, memory_id: str, predicate: str) -> str:
        return next(
            d["explanation"] for d in derived_for_memory(self.graph, memory_id) if d["predicate"] == predicate
        )


@pytest.fixture
def t(tmp_path: Path) -> Tenant:
    return Tenant(tmp_path / "graph")


def target(memory_id: str, metric: str, goal: float, **extra: Any) -> dict[str, Any]:
    return remembered(memory_id, kind="objective", importance=5, memory_class="PerformanceTargetMemory",
                      properties={"metric": metric, "goal": goal}, **extra)  # fmt: skip


def cap(memory_id: str, platform: str = "meta", amount: float = 40_000.0, **extra: Any) -> dict[str, Any]:
    props = {"platform": platform, "amount": amount, "currency": "USD", "period": "month"}
    return remembered(memory_id, kind="objective", importance=5, memory_class="BudgetConstraintMemory",
                      properties=props, **extra)  # fmt: skip


def kpi(metric: str, value: float) -> dict[str, Any]:
    return {"metric": metric, "value": value, "period": "2026-12"}


def spend(amount: float, platform: str = "meta") -> dict[str, Any]:
    return {"platform": platform, "amount": amount, "currency": "USD", "period": "2026-12"}


def test_roas_target_below_then_met(t: Tenant) -> None:
    t.send("MemoryRemembered", target("roas", "roas", 3.0))
    assert t.values("roas", "targetStatus") == set()  # no KPI yet: no status
    t.send("KpiObserved", kpi("roas", 2.7))
    assert t.values("roas", "targetStatus") == {"below"}
    assert (
        t.explanation("roas", "targetStatus") == "below: roas is 2.7, under the goal of 3 (higher is better)"
    )
    t.send("KpiObserved", kpi("roas", 3.2))
    assert t.values("roas", "targetStatus") == {"met"}
    t.send("MemoryRevised", {"memory_id": "roas", "property_changes": {"goal": 3.5}})
    assert t.values("roas", "targetStatus") == {"below"}


def test_lower_is_better_metrics(t: Tenant) -> None:
    t.send("MemoryRemembered", target("cpa", "cpa", 20.0))
    t.send("KpiObserved", kpi("cpa", 25.0))
    assert t.values("cpa", "targetStatus") == {"below"}
    t.send("KpiObserved", kpi("cpa", 18.0))
    assert t.values("cpa", "targetStatus") == {"met"}


def test_budget_near_limit_then_over(t: Tenant) -> None:
    t.send("MemoryRemembered", cap("meta-cap"))
    t.send("SpendObserved", spend(34_000.0))
    assert t.values("meta-cap", "budgetStatus") == {"near_limit"}
    assert t.values("meta-cap", "budgetPercent") == {"85"}
    assert (
        t.explanation("meta-cap", "budgetStatus")
        == "near_limit: spend 34,000 of cap 40,000 = 85% (threshold 85%)"
    )
    t.send("SpendObserved", spend(41_000.0))
    assert t.values("meta-cap", "budgetStatus") == {"over_budget"}
    assert t.explanation("meta-cap", "budgetStatus") == "over_budget: spend 41,000 of cap 40,000 = 102.5%"
    t.send("SpendObserved", spend(10_000.0))
    assert t.values("meta-cap", "budgetStatus") == {"within_budget"}
    t.send("SpendObserved", spend(5_000.0, platform="google"))
    assert t.values("meta-cap", "budgetPercent") == {"25"}  # another platform's spend changes nothing


def copy_ontology(tmp_path: Path) -> Path:
    ont = tmp_path / "ontology"
    shutil.copytree(DEFAULT_ONTOLOGY_DIR, ont)
    return ont


def test_near_limit_threshold_is_data_not_code(tmp_path: Path) -> None:
    ont = copy_ontology(tmp_path)
    core = ont / "core.ttl"
    core.write_text(core.read_text().replace(":nearLimitThreshold 85", ":nearLimitThreshold 90"))
    t = Tenant(tmp_path / "graph", load_knowledge(ont, DEFAULT_RULES_DIR))
    t.send("MemoryRemembered", cap("meta-cap"))
    t.send("SpendObserved", spend(34_000.0))
    assert t.values("meta-cap", "budgetStatus") == {"within_budget"}
    t.send("SpendObserved", spend(36_000.0))
    assert t.values("meta-cap", "budgetStatus") == {"near_limit"}


def test_a_memory_leaves_the_live_bundle_when_the_clock_passes_its_expiry(t: Tenant) -> None:
    t.send("ClockTicked", {"now": "2026-12-01T00:00:00Z"})
    t.send("MemoryRemembered", remembered("promo", importance=5, expires_at="2026-12-10T00:00:00Z"))
    t.send("MemoryRemembered", remembered("forever", importance=4))
    assert t.has("promo", "LiveContext") and t.has("forever", "LiveContext")
    assert not t.has("promo", "Expired")
    t.send("ClockTicked", {"now": "2026-12-10T00:00:00Z"})
    assert t.has("promo", "Expired")
    assert not t.has("promo", "LiveCandidate") and not t.has("promo", "LiveContext")
    assert t.has("promo", "ActiveMemory")  # expired is not superseded: it is only out of the bundle
    assert t.has("forever", "LiveContext")
    t.send("MemoryRevised", {"memory_id": "promo", "changes": {"expires_at": None}})
    assert t.has("promo", "LiveContext")


def test_live_bundle_membership_rules(t: Tenant) -> None:
    t.send("MemoryRemembered", remembered("low", importance=3))
    t.send(
        "MemoryRemembered", remembered("user", importance=5, scope="user", stakeholders={"user_id": "sam"})
    )
    t.send("MemoryRemembered", remembered("high", importance=4))
    assert not t.has("low", "LiveCandidate") and not t.has("user", "LiveCandidate")
    assert t.has("high", "LiveContext")


def test_live_bundle_is_capped_by_importance_then_recency(tmp_path: Path) -> None:
    ont = copy_ontology(tmp_path)
    core = ont / "core.ttl"
    core.write_text(core.read_text().replace(":liveContextCap 20", ":liveContextCap 2"))
    t = Tenant(tmp_path / "graph", load_knowledge(ont, DEFAULT_RULES_DIR))
    t.send("MemoryRemembered", remembered("old4", importance=4))
    t.send("MemoryRemembered", remembered("new4", importance=4))
    t.send("MemoryRemembered", remembered("crit", importance=5))
    bundle = {m for m in ("old4", "new4", "crit") if t.has(m, "LiveContext")}
    assert bundle == {"crit", "new4"}  # Critical first, then the more recent High
    assert t.values("old4", "liveRank") == {"3"}
    t.send("MemorySuperseded", {"memory_id": "crit", "superseded_by": "new4"})
    assert {m for m in ("old4", "new4", "crit") if t.has(m, "LiveContext")} == {"new4", "old4"}


def test_active_supersedes_forget_restore(t: Tenant) -> None:
    t.send("MemoryRemembered", remembered("a"))
    t.send("MemoryRemembered", remembered("b"))
    assert t.has("a", "ActiveMemory") and t.has("b", "ActiveMemory")
    t.send("MemorySuperseded", {"memory_id": "a", "superseded_by": "b"})
    assert not t.has("a", "ActiveMemory")
    assert t.graph.store.quads_for_pattern(memory_iri("b"), NamedNode(E + "supersedes"), memory_iri("a"))
    assert Triple(memory_iri("b"), NamedNode(E + "supersedes"), memory_iri("a")) in t.graph.inferred()
    t.send("MemoryRestored", {"memory_id": "a"})
    assert t.has("a", "ActiveMemory")
    assert Triple(memory_iri("b"), NamedNode(E + "supersedes"), memory_iri("a")) not in t.graph.inferred()
    t.send("MemoryForgotten", {"memory_id": "b"})
    assert not t.has("b", "ActiveMemory")


def test_subclass_membership_is_transitive(t: Tenant) -> None:
    props = {"role": "engineer", "skill": "python"}
    t.send(
        "MemoryRemembered", remembered("hire", memory_class="TechnicalHiringCriteriaMemory", properties=props)
    )
    for cls in ("TechnicalHiringCriteriaMemory", "HiringCriteriaMemory", "RecruitingMemory", "Memory"):
        assert t.has("hire", cls), cls
    assert list_memory_ids(t.graph, memory_class="RecruitingMemory") == ["hire"]
    sub = Triple(NamedNode(E + "TechnicalHiringCriteriaMemory"), NamedNode("http://www.w3.org/2000/01/rdf-schema#subClassOf"),
                 NamedNode(E + "Memory"))  # fmt: skip
    assert sub in t.graph.inferred()


def test_structural_conflicts(t: Tenant) -> None:
    t.send("MemoryRemembered", target("t1", "roas", 3.0))
    t.send("MemoryRemembered", target("t2", "roas", 4.0))
    t.send("MemoryRemembered", target("t3", "cpa", 4.0))
    t.send("MemoryRemembered", target("u1", "roas", 4.0, scope="user", stakeholders={"user_id": "sam"}))
    assert t.values("t1", "conflictsWith") == {"urn:engram:memory:t2"}
    assert t.values("t2", "conflictsWith") == {"urn:engram:memory:t1"}
    assert t.values("t3", "conflictsWith") == set() and t.values("u1", "conflictsWith") == set()
    t.send("MemorySuperseded", {"memory_id": "t1", "superseded_by": "t2"})
    assert t.values("t2", "conflictsWith") == set()
    t.send("MemoryRemembered", cap("c1"))
    t.send("MemoryRemembered", cap("c2", amount=50_000.0))
    assert t.values("c1", "conflictsWith") == {"urn:engram:memory:c2"}
    t.send("MemoryRemembered", remembered("v1", label="Brand voice", memory_class="BrandVoiceMemory"))
    t.send("MemoryRemembered", remembered("v2", label="brand VOICE", memory_class="BrandVoiceMemory"))
    t.send("MemoryRemembered", remembered("v3", label="brand voice"))  # same label, other class
    assert t.values("v1", "conflictsWith") == {"urn:engram:memory:v2"}
    t.send(
        "MemoryRemembered",
        remembered("team1", label="x", scope="team", stakeholders={"team_ids": ["a", "b"]}),
    )
    t.send("MemoryRemembered", remembered("team2", label="X", scope="team", stakeholders={"team_ids": ["b"]}))
    t.send("MemoryRemembered", remembered("team3", label="x", scope="team", stakeholders={"team_ids": ["c"]}))
    assert t.values("team1", "conflictsWith") == {"urn:engram:memory:team2"}


def test_shapes_reject_invalid_memories_with_the_violation(t: Tenant) -> None:
    assert t.send("MemoryRemembered", target("t", "roas", 3.0)) is Status.APPLIED
    bad_goal = remembered(
        "bad", memory_class="PerformanceTargetMemory", properties={"metric": "roas", "goal": "high"}
    )
    assert t.send("MemoryRemembered", bad_goal) is Status.REJECTED
    assert ":goal must be double or integer" in t.reason
    assert (
        t.send("MemoryRemembered", remembered("nocap", memory_class="BudgetConstraintMemory"))
        is Status.REJECTED
    )
    assert ":amount is required" in t.reason and ":platform is required" in t.reason
    assert t.send("MemoryRemembered", remembered("ghost", memory_class="GhostMemory")) is Status.REJECTED
    assert "unknown class :GhostMemory" in t.reason
    assert t.send("MemoryRevised", {"memory_id": "t", "property_changes": {"goal": None}}) is Status.REJECTED
    assert ":goal is required" in t.reason
    assert get_memory(t.graph, "t")["properties"]["goal"] == 3.0  # type: ignore[index]


SUPPORT = """
@prefix : <https://engram.dev/ns#> .
@prefix rdfs: <http://www.w3.org/2000/01/rdf-schema#> .
@prefix sh: <http://www.w3.org/ns/shacl#> .
@prefix xsd: <http://www.w3.org/2001/XMLSchema#> .
:SupportMemory rdfs:subClassOf :Memory .
:EscalationPolicyMemory rdfs:subClassOf :SupportMemory .
:EscalationPolicyShape a sh:NodeShape ; sh:targetClass :EscalationPolicyMemory ;
    sh:property [ sh:path :severity ; sh:minCount 1 ; sh:datatype xsd:integer ;
                  sh:minInclusive 1 ; sh:maxInclusive 3 ] .
"""


def test_a_new_class_in_a_turtle_file_needs_no_code_change(tmp_path: Path) -> None:
    ont = copy_ontology(tmp_path)
    (ont / "support.ttl").write_text(SUPPORT)
    t = Tenant(tmp_path / "graph", load_knowledge(ont, DEFAULT_RULES_DIR))
    policy = {"memory_class": "EscalationPolicyMemory", "importance": 5, "label": "Escalate"}
    assert (
        t.send("MemoryRemembered", remembered("p0", **policy, properties={"severity": 9})) is Status.REJECTED
    )
    assert ":severity must be <= 3" in t.reason
    assert (
        t.send("MemoryRemembered", remembered("p1", **policy, properties={"severity": 2})) is Status.APPLIED
    )
    assert (
        t.send("MemoryRemembered", remembered("p2", **policy, properties={"severity": 1})) is Status.APPLIED
    )
    assert t.has("p1", "SupportMemory") and t.has("p1", "Memory") and t.has("p1", "LiveContext")
    assert sorted(list_memory_ids(t.graph, memory_class="SupportMemory")) == ["p1", "p2"]
    assert t.values("p1", "conflictsWith") == {"urn:engram:memory:p2"}  # same class and label
    assert t.send("MemorySuperseded", {"memory_id": "p1", "superseded_by": "p2"}) is Status.APPLIED
    assert list_memory_ids(t.graph, memory_class="SupportMemory", active=True) == ["p2"]
    assert t.values("p2", "conflictsWith") == set()


def test_a_changed_ontology_rematerialises_existing_stores(tmp_path: Path) -> None:
    t = Tenant(tmp_path / "graph")
    t.send("MemoryRemembered", cap("meta-cap"))
    t.send("SpendObserved", spend(34_000.0))
    assert t.values("meta-cap", "budgetStatus") == {"near_limit"}
    del t
    ont = copy_ontology(tmp_path)
    core = ont / "core.ttl"
    core.write_text(core.read_text().replace(":nearLimitThreshold 85", ":nearLimitThreshold 95"))
    again = TenantGraph(tmp_path / "graph", load_knowledge(ont, DEFAULT_RULES_DIR))
    found = {
        q.object.value
        for q in again.store.quads_for_pattern(memory_iri("meta-cap"), NamedNode(E + "budgetStatus"), None)
    }
    assert found == {"within_budget"}
    assert Literal(95) in {
        q.object for q in again.store.quads_for_pattern(None, NamedNode(E + "nearLimitThreshold"), None)
    }


def test_a_failed_rule_update_is_repaired_by_re_materialising(
    t: Tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    from projections.rules.engine import RuleEngine

    t.send("MemoryRemembered", remembered("a", importance=5))
    real = RuleEngine.update
    calls = {"n": 0}

    def fail_once(self: RuleEngine, *args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("disk hiccup")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(RuleEngine, "update", fail_once)
    assert t.send("MemoryForgotten", {"memory_id": "a"}) is Status.APPLIED  # repaired by re-materialising
    assert not t.has("a", "ActiveMemory") and not t.has("a", "LiveContext")
    t.send("MemoryRemembered", remembered("b", importance=5))
    assert t.graph.inferred() == from_scratch(t.graph)
