"""Every rule on hand-made cases, including the design's worked examples."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from engram.projections.context import statuses as context_statuses
from engram.projections.knowledge import DEFAULT_ONTOLOGY_DIR, DEFAULT_RULES_DIR, load_knowledge
from engram.projections.read import get_memory, list_memory_ids, memory_statuses
from engram.projections.tenant_graph import Status, TenantGraph
from engram.projections.terms import memory_iri
from engram.projections.visibility import inferred_by_name, memory_facts
from engram.schemas import vocabulary as v
from pyoxigraph import Literal, NamedNode, Triple

from tests.factories import remembered
from tests.tenant import Tenant, from_scratch

E = v.ENGRAM


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


def test_roas_target_below_then_met(tenant: Tenant) -> None:
    tenant.apply("MemoryRemembered", target("roas", "roas", 3.0))
    assert tenant.values("roas", "targetStatus") == set()  # no KPI yet: no status
    tenant.apply("KpiObserved", kpi("roas", 2.7))
    assert tenant.values("roas", "targetStatus") == {"below"}
    assert (
        tenant.explanation("roas", "targetStatus")
        == "below: roas is 2.7, under the goal of 3 (higher is better)"
    )
    tenant.apply("KpiObserved", kpi("roas", 3.2))
    assert tenant.values("roas", "targetStatus") == {"met"}
    tenant.apply("MemoryRevised", {"memory_id": "roas", "property_changes": {"goal": 3.5}})
    assert tenant.values("roas", "targetStatus") == {"below"}


def test_lower_is_better_metrics(tenant: Tenant) -> None:
    tenant.apply("MemoryRemembered", target("cpa", "cpa", 20.0))
    tenant.apply("KpiObserved", kpi("cpa", 25.0))
    assert tenant.values("cpa", "targetStatus") == {"below"}
    tenant.apply("KpiObserved", kpi("cpa", 18.0))
    assert tenant.values("cpa", "targetStatus") == {"met"}


def test_budget_near_limit_then_over(tenant: Tenant) -> None:
    tenant.apply("MemoryRemembered", cap("meta-cap"))
    tenant.apply("SpendObserved", spend(34_000.0))
    assert tenant.values("meta-cap", "budgetStatus") == {"near_limit"}
    assert tenant.values("meta-cap", "budgetPercent") == {"85"}
    assert (
        tenant.explanation("meta-cap", "budgetStatus")
        == "near_limit: spend 34,000 of cap 40,000 = 85% (threshold 85%)"
    )
    tenant.apply("SpendObserved", spend(41_000.0))
    assert tenant.values("meta-cap", "budgetStatus") == {"over_budget"}
    assert (
        tenant.explanation("meta-cap", "budgetStatus") == "over_budget: spend 41,000 of cap 40,000 = 102.5%"
    )
    tenant.apply("SpendObserved", spend(10_000.0))
    assert tenant.values("meta-cap", "budgetStatus") == {"within_budget"}
    tenant.apply("SpendObserved", spend(5_000.0, platform="google"))
    assert tenant.values("meta-cap", "budgetPercent") == {"25"}  # another platform's spend changes nothing


def copy_ontology(tmp_path: Path) -> Path:
    ont = tmp_path / "ontology"
    shutil.copytree(DEFAULT_ONTOLOGY_DIR, ont)
    return ont


def test_near_limit_threshold_is_data_not_code(tmp_path: Path) -> None:
    ont = copy_ontology(tmp_path)
    core = ont / "core.ttl"
    core.write_text(core.read_text().replace(":nearLimitThreshold 85", ":nearLimitThreshold 90"))
    tenant = Tenant(tmp_path / "graph", load_knowledge(ont, DEFAULT_RULES_DIR))
    tenant.apply("MemoryRemembered", cap("meta-cap"))
    tenant.apply("SpendObserved", spend(34_000.0))
    assert tenant.values("meta-cap", "budgetStatus") == {"within_budget"}
    tenant.apply("SpendObserved", spend(36_000.0))
    assert tenant.values("meta-cap", "budgetStatus") == {"near_limit"}


def test_a_memory_leaves_the_live_bundle_when_the_clock_passes_its_expiry(tenant: Tenant) -> None:
    tenant.apply("ClockTicked", {"now": "2026-12-01T00:00:00Z"})
    tenant.apply("MemoryRemembered", remembered("promo", importance=5, expires_at="2026-12-10T00:00:00Z"))
    tenant.apply("MemoryRemembered", remembered("forever", importance=4))
    assert tenant.has("promo", "LiveContext") and tenant.has("forever", "LiveContext")
    assert not tenant.has("promo", "Expired")
    tenant.apply("ClockTicked", {"now": "2026-12-10T00:00:00Z"})
    assert tenant.has("promo", "Expired")
    assert not tenant.has("promo", "LiveCandidate") and not tenant.has("promo", "LiveContext")
    assert tenant.has("promo", "ActiveMemory")  # expired is not superseded: it is only out of the bundle
    assert tenant.has("forever", "LiveContext")
    tenant.apply("MemoryRevised", {"memory_id": "promo", "changes": {"expires_at": None}})
    assert tenant.has("promo", "LiveContext")


def test_live_bundle_membership_rules(tenant: Tenant) -> None:
    tenant.apply("MemoryRemembered", remembered("low", importance=3))
    tenant.apply(
        "MemoryRemembered", remembered("user", importance=5, scope="user", stakeholders={"user_id": "sam"})
    )
    tenant.apply("MemoryRemembered", remembered("high", importance=4))
    assert not tenant.has("low", "LiveCandidate") and not tenant.has("user", "LiveCandidate")
    assert tenant.has("high", "LiveContext")


def test_live_bundle_is_capped_by_importance_then_recency(tmp_path: Path) -> None:
    ont = copy_ontology(tmp_path)
    core = ont / "core.ttl"
    core.write_text(core.read_text().replace(":liveContextCap 20", ":liveContextCap 2"))
    tenant = Tenant(tmp_path / "graph", load_knowledge(ont, DEFAULT_RULES_DIR))
    tenant.apply("MemoryRemembered", remembered("old4", importance=4))
    tenant.apply("MemoryRemembered", remembered("new4", importance=4))
    tenant.apply("MemoryRemembered", remembered("crit", importance=5))
    bundle = {m for m in ("old4", "new4", "crit") if tenant.has(m, "LiveContext")}
    assert bundle == {"crit", "new4"}  # Critical first, then the more recent High
    assert [tenant.values(m, "liveRank") for m in ("crit", "new4", "old4")] == [{"1"}, {"2"}, set()]
    tenant.apply("MemorySuperseded", {"memory_id": "crit", "superseded_by": "new4"})
    assert {m for m in ("old4", "new4", "crit") if tenant.has(m, "LiveContext")} == {"new4", "old4"}
    assert [tenant.values(m, "liveRank") for m in ("crit", "new4", "old4")] == [set(), {"1"}, {"2"}]


def test_active_supersedes_forget_restore(tenant: Tenant) -> None:
    tenant.apply("MemoryRemembered", remembered("a"))
    tenant.apply("MemoryRemembered", remembered("b"))
    assert tenant.has("a", "ActiveMemory") and tenant.has("b", "ActiveMemory")
    tenant.apply("MemorySuperseded", {"memory_id": "a", "superseded_by": "b"})
    assert not tenant.has("a", "ActiveMemory")
    assert tenant.graph.store.quads_for_pattern(memory_iri("b"), NamedNode(E + "supersedes"), memory_iri("a"))
    assert Triple(memory_iri("b"), NamedNode(E + "supersedes"), memory_iri("a")) in tenant.graph.inferred()
    tenant.apply("MemoryRestored", {"memory_id": "a"})
    assert tenant.has("a", "ActiveMemory")
    assert (
        Triple(memory_iri("b"), NamedNode(E + "supersedes"), memory_iri("a")) not in tenant.graph.inferred()
    )
    tenant.apply("MemoryForgotten", {"memory_id": "b"})
    assert not tenant.has("b", "ActiveMemory")


def test_subclass_membership_is_transitive(tenant: Tenant) -> None:
    props = {"role": "engineer", "skill": "python"}
    tenant.apply(
        "MemoryRemembered", remembered("hire", memory_class="TechnicalHiringCriteriaMemory", properties=props)
    )
    for cls in ("TechnicalHiringCriteriaMemory", "HiringCriteriaMemory", "RecruitingMemory", "Memory"):
        assert tenant.has("hire", cls), cls
    assert list_memory_ids(tenant.graph, memory_class="RecruitingMemory") == ["hire"]
    sub = Triple(NamedNode(E + "TechnicalHiringCriteriaMemory"), NamedNode("http://www.w3.org/2000/01/rdf-schema#subClassOf"),
                 NamedNode(E + "Memory"))  # fmt: skip
    assert sub in tenant.graph.inferred()


def test_structural_conflicts(tenant: Tenant) -> None:
    tenant.apply("MemoryRemembered", target("t1", "roas", 3.0))
    tenant.apply("MemoryRemembered", target("t2", "roas", 4.0))
    tenant.apply("MemoryRemembered", target("t3", "cpa", 4.0))
    tenant.apply("MemoryRemembered", target("u1", "roas", 4.0, scope="user", stakeholders={"user_id": "sam"}))
    assert tenant.values("t1", "conflictsWith") == {"urn:engram:memory:t2"}
    assert tenant.values("t2", "conflictsWith") == {"urn:engram:memory:t1"}
    assert tenant.values("t3", "conflictsWith") == set() and tenant.values("u1", "conflictsWith") == set()
    tenant.apply("MemorySuperseded", {"memory_id": "t1", "superseded_by": "t2"})
    assert tenant.values("t2", "conflictsWith") == set()
    tenant.apply("MemoryRemembered", cap("c1"))
    tenant.apply("MemoryRemembered", cap("c2", amount=50_000.0))
    assert tenant.values("c1", "conflictsWith") == {"urn:engram:memory:c2"}
    tenant.apply("MemoryRemembered", remembered("v1", label="Brand voice", memory_class="BrandVoiceMemory"))
    tenant.apply("MemoryRemembered", remembered("v2", label="brand VOICE", memory_class="BrandVoiceMemory"))
    tenant.apply("MemoryRemembered", remembered("v3", label="brand voice"))  # same label, other class
    assert tenant.values("v1", "conflictsWith") == {"urn:engram:memory:v2"}
    tenant.apply(
        "MemoryRemembered",
        remembered("team1", label="x", scope="team", stakeholders={"team_ids": ["a", "b"]}),
    )
    tenant.apply(
        "MemoryRemembered", remembered("team2", label="X", scope="team", stakeholders={"team_ids": ["b"]})
    )
    tenant.apply(
        "MemoryRemembered", remembered("team3", label="x", scope="team", stakeholders={"team_ids": ["c"]})
    )
    assert tenant.values("team1", "conflictsWith") == {"urn:engram:memory:team2"}


def test_shapes_reject_invalid_memories_with_the_violation(tenant: Tenant) -> None:
    assert tenant.apply("MemoryRemembered", target("t", "roas", 3.0)) is Status.APPLIED
    bad_goal = remembered(
        "bad", memory_class="PerformanceTargetMemory", properties={"metric": "roas", "goal": "high"}
    )
    assert tenant.apply("MemoryRemembered", bad_goal) is Status.REJECTED
    assert ":goal must be double or integer" in tenant.reason
    assert (
        tenant.apply("MemoryRemembered", remembered("nocap", memory_class="BudgetConstraintMemory"))
        is Status.REJECTED
    )
    assert ":amount is required" in tenant.reason and ":platform is required" in tenant.reason
    assert (
        tenant.apply("MemoryRemembered", remembered("ghost", memory_class="GhostMemory")) is Status.REJECTED
    )
    assert "unknown class :GhostMemory" in tenant.reason
    assert (
        tenant.apply("MemoryRevised", {"memory_id": "t", "property_changes": {"goal": None}})
        is Status.REJECTED
    )
    assert ":goal is required" in tenant.reason
    assert get_memory(tenant.graph, "t")["properties"]["goal"] == 3.0  # type: ignore[index]


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
    tenant = Tenant(tmp_path / "graph", load_knowledge(ont, DEFAULT_RULES_DIR))
    policy = {"memory_class": "EscalationPolicyMemory", "importance": 5, "label": "Escalate"}
    assert (
        tenant.apply("MemoryRemembered", remembered("p0", **policy, properties={"severity": 9}))
        is Status.REJECTED
    )
    assert ":severity must be <= 3" in tenant.reason
    assert (
        tenant.apply("MemoryRemembered", remembered("p1", **policy, properties={"severity": 2}))
        is Status.APPLIED
    )
    assert (
        tenant.apply("MemoryRemembered", remembered("p2", **policy, properties={"severity": 1}))
        is Status.APPLIED
    )
    assert (
        tenant.has("p1", "SupportMemory") and tenant.has("p1", "Memory") and tenant.has("p1", "LiveContext")
    )
    assert sorted(list_memory_ids(tenant.graph, memory_class="SupportMemory")) == ["p1", "p2"]
    assert tenant.values("p1", "conflictsWith") == {"urn:engram:memory:p2"}  # same class and label
    assert tenant.apply("MemorySuperseded", {"memory_id": "p1", "superseded_by": "p2"}) is Status.APPLIED
    assert list_memory_ids(tenant.graph, memory_class="SupportMemory", active=True) == ["p2"]
    assert tenant.values("p2", "conflictsWith") == set()


def test_a_changed_ontology_rematerialises_existing_stores(tmp_path: Path) -> None:
    tenant = Tenant(tmp_path / "graph")
    tenant.apply("MemoryRemembered", cap("meta-cap"))
    tenant.apply("SpendObserved", spend(34_000.0))
    assert tenant.values("meta-cap", "budgetStatus") == {"near_limit"}
    del tenant
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
    tenant: Tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    from engram.projections.rules.engine import RuleEngine

    tenant.apply("MemoryRemembered", remembered("a", importance=5))
    real = RuleEngine.update
    calls = {"n": 0}

    def fail_once(self: RuleEngine, *args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("disk hiccup")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(RuleEngine, "update", fail_once)
    assert (
        tenant.apply("MemoryForgotten", {"memory_id": "a"}) is Status.APPLIED
    )  # repaired by re-materialising
    assert not tenant.has("a", "ActiveMemory") and not tenant.has("a", "LiveContext")
    tenant.apply("MemoryRemembered", remembered("b", importance=5))
    assert tenant.graph.inferred() == from_scratch(tenant.graph)


GAP_RULE = """
PREFIX : <https://engram.dev/ns#>
#@explain "gap: {metric} is {value}, {gap} from the goal of {goal}"
[?m, :targetGap, ?gap] :- [?m, a, :PerformanceTargetMemory], [?m, a, :ActiveMemory],
    [?m, :metric, ?metric], [?m, :goal, ?goal], [?k, a, :Kpi], [?k, :metric, ?metric], [?k, :value, ?value],
    BIND(?goal - ?value AS ?gap) .
"""
GAP_STATUS = """
@prefix : <https://engram.dev/ns#> .
@prefix xsd: <http://www.w3.org/2001/XMLSchema#> .
:targetGap a :DerivedStatus ; rdfs:range xsd:double ;
    :statusGroup "target" ; :statusField "gap" ; :statusOrder 4 .
"""


def test_a_new_derived_status_is_a_rule_and_a_declaration_no_code(tmp_path: Path) -> None:
    """The read model and the context bundle show a status declared in Turtle (``:DerivedStatus``)."""
    ont, rules = copy_ontology(tmp_path), tmp_path / "rules"
    shutil.copytree(DEFAULT_RULES_DIR, rules)
    (rules / "gap.dlog").write_text(GAP_RULE)
    (ont / "gap.ttl").write_text("@prefix rdfs: <http://www.w3.org/2000/01/rdf-schema#> .\n" + GAP_STATUS)
    tenant = Tenant(tmp_path / "graph", load_knowledge(ont, rules), step_ms=1)
    tenant.apply("MemoryRemembered", target("roas", "roas", 3.0))
    tenant.apply("KpiObserved", kpi("roas", 2.5))
    assert memory_statuses(tenant.graph, "roas") == {"liveRank": 1, "targetGap": 0.5, "targetStatus": "below"}
    facts = memory_facts(tenant.graph, "roas")
    assert facts is not None
    derived = {name: list(found) for name, found in inferred_by_name(tenant.graph, "roas").items()}
    assert context_statuses(tenant.graph, facts, derived) == {
        "target": {"status": "below", "metric": "roas", "goal": 3, "gap": 0.5}
    }
    assert tenant.explanation("roas", "targetGap") == "gap: roas is 2.5, 0.5 from the goal of 3"
