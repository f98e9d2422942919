"""Agent work in a tenant's graph: sessions, episodes, tool calls, decisions and associations as
the projection applies them, the rules that judge them, the plan check on the demo tenant, who may
record what, and a batched replay equal to the events applied one by one."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from engram.projections import governance
from engram.projections.agents import UnknownName, check_plan, decisions_relying_on, episodes_in
from engram.projections.read import export_nquads
from engram.projections.tenant_graph import Status, Step, TenantGraph
from engram.projections.terms import INFERRED, agent_iri, e, memory_iri
from engram.projections.visibility import Principal, everything
from engram.schemas import payloads as ev
from engram.schemas.checks import InvalidEvent
from engram.schemas.events import Position, event_from_json
from pyoxigraph import Literal

from engram.console.stack import demo_envelopes
from tests.factories import event
from tests.tenant import Tenant, from_scratch

SAM_AGENT = {"id": "ads-agent", "role": "agent", "on_behalf_of": "sam"}
ANN = {"id": "ann", "role": "user"}
DIGEST = "sha256:" + "0f" * 32


@pytest.fixture
def demo(tmp_path: Path) -> Tenant:
    """The demo tenant: Meta cap 40,000 USD a month, Meta spend 34,000 for 2026-11, ROAS target 3.5."""
    t = Tenant(tmp_path / "acme")
    for envelope in demo_envelopes():  # its onboarding's writes, then engram/demo/acme.jsonl
        assert t.apply(event_from_json(envelope)) is Status.APPLIED, t.reason
    return t


def spend(amount: float, period: str = "2026-11", platform: str = "meta") -> ev.PlannedSpend:
    return ev.PlannedSpend(platform=platform, amount=amount, currency="USD", period=period)


def test_a_spend_over_the_cap_is_a_breach_explained_by_the_rule(demo: Tenant) -> None:
    (found,) = check_plan(demo.graph, spend(8000), None, everything)
    assert (found.status, found.memory_id, found.rule) == ("breach", "meta-cap", "plans.dlog:20")
    assert found.explanation == "breaches meta-cap: spend 34,000 + 8,000 = 42,000 of cap 40,000 USD = 105%"
    assert found.values == {
        "spent": 34000,
        "planned": 8000,
        "total": 42000,
        "cap": 40000,
        "currency": "USD",
        "pct": 105,
    }


def test_a_smaller_spend_is_near_the_limit_and_nothing_is_written(demo: Tenant) -> None:
    before = export_nquads(demo.graph)
    (found,) = check_plan(demo.graph, spend(1000), None, everything)
    assert found.status == "near_limit"
    assert found.explanation == (
        "near the limit of meta-cap: spend 34,000 + 1,000 = 35,000 of cap 40,000 USD = 87.5% (threshold 85%)"
    )
    assert check_plan(demo.graph, spend(6000), None, everything)[0].values["pct"] == 100  # the edge: not over
    assert export_nquads(demo.graph) == before  # a check is a scratch copy: the tenant is untouched


def test_within_budget_is_nothing(demo: Tenant) -> None:
    """No December spend is observed yet: 0 + 8,000 of 40,000 = 20%, nothing to report; another
    currency's or platform's spend has no cap."""
    assert check_plan(demo.graph, spend(8000, "2026-12"), None, everything) == []
    assert (
        check_plan(
            demo.graph,
            ev.PlannedSpend(platform="meta", amount=8000, currency="EUR", period="2026-11"),
            None,
            everything,
        )
        == []
    )


def test_a_superseded_or_invisible_constraint_is_not_checked(demo: Tenant) -> None:
    assert check_plan(demo.graph, spend(8000), None, lambda m: m != "meta-cap") == []
    assert demo.apply("MemoryForgotten", {"memory_id": "meta-cap"}) is Status.APPLIED
    assert check_plan(demo.graph, spend(8000), None, everything) == []


def test_a_target_change_is_checked_against_the_active_target_only(demo: Tenant) -> None:
    (found,) = check_plan(demo.graph, None, ev.PlannedKpi(metric="roas", value=3.2), everything)
    assert found.memory_id == "roas-target-q1"  # roas-target (goal 3.0) is superseded
    assert (
        found.explanation
        == "breaches roas-target-q1: roas would be 3.2, under the goal of 3.5 (higher is better)"
    )
    assert check_plan(demo.graph, None, ev.PlannedKpi(metric="roas", value=3.6), everything) == []


def test_unknown_platforms_and_metrics_are_refused_not_answered_nothing(demo: Tenant) -> None:
    with pytest.raises(UnknownName, match="unknown platform 'myspace'"):
        check_plan(demo.graph, spend(1, platform="myspace"), None, everything)
    with pytest.raises(UnknownName, match="unknown metric 'roass'"):
        check_plan(demo.graph, None, ev.PlannedKpi(metric="roass", value=1), everything)


def test_a_session_narrative_in_log_order(demo: Tenant) -> None:
    steps: list[tuple[str, dict[str, Any]]] = [
        ("SessionStarted", {"session_id": "s1", "goal": "December plan"}),
        ("EpisodeRecorded", {"episode_id": "e1", "session_id": "s1", "summary": "Sam wants more reach"}),
        (
            "ToolCalled",
            {
                "call_id": "c1",
                "session_id": "s1",
                "episode_id": "e1",
                "tool": "check_plan",
                "arguments_digest": DIGEST,
                "outcome": "ok",
            },
        ),
        (
            "DecisionRecorded",
            {
                "decision_id": "d1",
                "session_id": "s1",
                "episode_id": "e1",
                "decision": "Add 8k on Meta",
                "relied_on": ["meta-cap"],
                "live_data": ["spend:meta:USD:2026-11"],
                "spend": {"platform": "meta", "amount": 8000, "currency": "USD", "period": "2026-11"},
            },
        ),
        ("EpisodeRecorded", {"episode_id": "e2", "session_id": "s1", "summary": "told Sam it breaches"}),
        ("SessionEnded", {"session_id": "s1", "outcome": "no change"}),
    ]
    for etype, payload in steps:
        assert demo.apply(etype, payload, actor=SAM_AGENT, source="agent") is Status.APPLIED, demo.reason
    story = episodes_in(demo.graph, "s1", everything)
    assert [(i["type"], i["id"]) for i in story["items"]] == [
        ("episode", "e1"),
        ("tool_call", "c1"),
        ("decision", "d1"),
        ("episode", "e2"),
    ]
    assert (story["goal"], story["outcome"], story["acting_for"]) == ("December plan", "no change", "sam")
    decision = story["items"][2]
    assert decision["breaches"] == ["meta-cap"] and decision["relied_on"] == ["meta-cap"]
    assert decision["statuses"] == [
        {
            "status": "breached_constraint",
            "explanation": "breached_constraint: the action it decided on breaches meta-cap",
        }
    ]
    # an ended session takes nothing more; a tool call names an episode of its own session only
    more = {"call_id": "c2", "session_id": "s1", "tool": "x", "arguments_digest": DIGEST, "outcome": "ok"}
    assert demo.apply("ToolCalled", more, actor=SAM_AGENT) is Status.REJECTED
    assert demo.reason is not None and "session s1 has ended" in demo.reason


def test_which_decisions_relied_on_a_constraint_and_a_stale_basis(demo: Tenant) -> None:
    assert (
        demo.apply(
            "DecisionRecorded",
            {"decision_id": "d1", "decision": "hold", "relied_on": ["meta-cap"]},
            actor=SAM_AGENT,
        )
        is Status.APPLIED
    )
    assert (
        demo.apply("DecisionRecorded", {"decision_id": "d2", "decision": "tone down copy"}, actor=SAM_AGENT)
        is Status.APPLIED
    )
    assert (
        demo.apply(
            "DecisionRecorded",
            {"decision_id": "d3", "decision": "ann's", "relied_on": ["meta-cap"]},
            actor=ANN,
        )
        is Status.APPLIED
    )
    # an association "supports" to a decision is reliance too
    link = {"association_id": "a1", "from_ref": "meta-cap", "to_ref": "decision:d2", "relation": "supports"}
    assert demo.apply("MemoriesAssociated", link, actor=SAM_AGENT) is Status.APPLIED, demo.reason
    sam = Principal(user="sam", role="agent", subject="ads-agent")
    assert decisions_relying_on(demo.graph, "meta-cap", sam, everything) == ["d1", "d2"]  # not ann's d3
    op = Principal(user="dana", role="operator")
    assert decisions_relying_on(demo.graph, "meta-cap", op, everything) == ["d1", "d2", "d3"]
    assert demo.apply("MemoryForgotten", {"memory_id": "meta-cap"}) is Status.APPLIED
    stale = demo.graph.store.quads_for_pattern(
        agent_iri("decision", "d1"), e("decisionStatus"), None, INFERRED
    )
    assert [q.object for q in stale] == [Literal("stale_basis")]


def test_associations_between_memories_are_typed_edges_the_rules_derive(demo: Tenant) -> None:
    link = {
        "association_id": "a1",
        "from_ref": "brand-voice",
        "to_ref": "meta-cap",
        "relation": "contradicts",
    }
    assert demo.apply("MemoriesAssociated", link) is Status.APPLIED
    edge = (memory_iri("brand-voice"), e("contradicts"), memory_iri("meta-cap"))
    assert list(demo.graph.store.quads_for_pattern(*edge, INFERRED))
    assert demo.apply("MemoriesAssociated", {**link, "to_ref": "nope"}) is Status.REJECTED  # taken id
    assert (
        demo.apply("MemoriesAssociated", {**link, "association_id": "a2", "to_ref": "nope"})
        is Status.REJECTED
    )
    assert demo.reason == "memory nope not found"
    assert demo.graph.inferred() == from_scratch(demo.graph)


def test_a_removed_association_takes_its_edge_and_the_reliance_with_it(demo: Tenant) -> None:
    assert demo.apply("DecisionRecorded", {"decision_id": "d1", "decision": "hold"}, actor=SAM_AGENT) is (
        Status.APPLIED
    )
    links = [
        {"association_id": "a1", "from_ref": "brand-voice", "to_ref": "meta-cap", "relation": "contradicts"},
        {"association_id": "a2", "from_ref": "meta-cap", "to_ref": "decision:d1", "relation": "supports"},
    ]
    for link in links:
        assert demo.apply("MemoriesAssociated", link, actor=SAM_AGENT) is Status.APPLIED, demo.reason
    edge = (memory_iri("brand-voice"), e("contradicts"), memory_iri("meta-cap"))
    sam = Principal(user="sam", role="agent", subject="ads-agent")
    assert list(demo.graph.store.quads_for_pattern(*edge, INFERRED))
    assert decisions_relying_on(demo.graph, "meta-cap", sam, everything) == ["d1"]
    with pytest.raises(governance.Unseen, match="association a1 not found"):  # sam's, not ann's
        governance.check(event("AssociationRemoved", {"association_id": "a1"}, actor=ANN), demo.graph)
    for association_id in ("a1", "a2"):
        removed = {"association_id": association_id, "reason": "linked by mistake"}
        assert demo.apply("AssociationRemoved", removed, actor=SAM_AGENT) is Status.APPLIED, demo.reason
    assert not list(demo.graph.store.quads_for_pattern(*edge, INFERRED))
    assert decisions_relying_on(demo.graph, "meta-cap", sam, everything) == []
    assert not list(demo.graph.store.quads_for_pattern(agent_iri("association", "a1"), None, None, None))
    assert demo.graph.inferred() == from_scratch(demo.graph)
    again = {"event_id": "00000000-0000-4000-8000-0000000000a1"}  # a new event, not a retry
    assert demo.apply("AssociationRemoved", {"association_id": "a1"}, actor=SAM_AGENT, **again) is (
        Status.REJECTED
    )
    assert demo.reason == "association a1 not found"


def test_governance_an_agent_records_for_its_user_and_sees_no_one_elses_session(demo: Tenant) -> None:
    assert demo.apply("SessionStarted", {"session_id": "s1"}, actor=SAM_AGENT) is Status.APPLIED
    state = demo.graph
    for etype, payload in [
        ("EpisodeRecorded", {"episode_id": "e9", "session_id": "s1", "summary": "x"}),
        ("SessionEnded", {"session_id": "s1"}),
        ("DecisionRecorded", {"decision_id": "d9", "session_id": "s1", "decision": "x"}),
    ]:
        with pytest.raises(governance.Unseen, match="session s1 not found"):
            governance.check(event(etype, payload, actor=ANN), state)
        governance.check(event(etype, payload, actor={"id": "dana", "role": "operator"}), state)
    with pytest.raises(governance.Unseen, match="memory sam-reports not found"):  # sam's own memory
        governance.check(
            event(
                "DecisionRecorded",
                {"decision_id": "d9", "decision": "x", "relied_on": ["sam-reports"]},
                actor=ANN,
            ),
            state,
        )
    link = {"association_id": "a9", "from_ref": "sam-reports", "to_ref": "meta-cap", "relation": "supports"}
    with pytest.raises(governance.Unseen, match="memory sam-reports not found"):
        governance.check(event("MemoriesAssociated", link, actor=ANN), state)
    governance.check(event("MemoriesAssociated", link, actor=SAM_AGENT), state)
    for role in ("pipeline", "auditor"):
        assert governance.role_refusal(
            event("SessionStarted", {"session_id": "s2"}, actor={"id": "x", "role": role})
        )


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (
            {
                "decision_id": "d",
                "decision": "x",
                "spend": {"platform": "meta", "amount": float("nan"), "currency": "USD", "period": "2026-11"},
            },
            "spend.amount: numbers must be finite",
        ),
        (
            {
                "decision_id": "d",
                "decision": "x",
                "spend": {"platform": "meta", "amount": 1, "currency": "USD", "period": "unspecified"},
            },
            "spend.period must name a calendar period",
        ),
        ({"decision_id": "d", "decision": "x", "live_data": ["spend:meta:usd:2026-11"]}, "live_data names"),
        ({"decision_id": "d", "decision": "x", "relied_on": ["a"] * 65}, "at most 64 memories"),
        ({"decision_id": "d", "decision": " "}, "decision must be a non-empty string"),
        ({"decision_id": "d", "decision": "x", "episode_id": "e1"}, "names its session_id too"),
    ],
)
def test_hostile_decisions_are_refused_with_a_reason(payload: dict[str, Any], reason: str) -> None:
    with pytest.raises(InvalidEvent, match=reason):
        event("DecisionRecorded", payload)


def test_replayed_in_random_batches_equals_live(tmp_path: Path) -> None:
    """The demo and a session's worth of agent work (some refused), applied one by one (live) and in
    batches of random sizes (a replay): the same outcomes and the same N-Quads."""
    lines = [event_from_json(envelope) for envelope in demo_envelopes()]
    agent = [
        ("SessionStarted", {"session_id": "s1"}),
        ("EpisodeRecorded", {"episode_id": "e1", "session_id": "s1", "summary": "x"}),
        (
            "DecisionRecorded",
            {
                "decision_id": "d1",
                "session_id": "s1",
                "decision": "spend",
                "relied_on": ["meta-cap"],
                "spend": {"platform": "meta", "amount": 5000, "currency": "USD", "period": "2026-11"},
            },
        ),
        ("DecisionRecorded", {"decision_id": "d1", "decision": "taken id"}),
        (
            "MemoriesAssociated",
            {
                "association_id": "a1",
                "from_ref": "brand-voice",
                "to_ref": "decision:d1",
                "relation": "supports",
            },
        ),
        ("SpendObserved", {"platform": "meta", "amount": 36000.0, "currency": "USD", "period": "2026-11"}),
        ("SessionEnded", {"session_id": "s1"}),
        (
            "ToolCalled",
            {"call_id": "c1", "session_id": "s1", "tool": "t", "arguments_digest": DIGEST, "outcome": "ok"},
        ),
    ]
    events = lines + [
        event(t, p, actor=SAM_AGENT if t != "SpendObserved" else {"id": "etl", "role": "pipeline"})
        for t, p in agent
    ]
    steps = [Step(Position(0, i, 1_764_547_200_000 + i), x) for i, x in enumerate(events)]
    live = TenantGraph(tmp_path / "live")
    outcomes = [live.apply(s.event, s.position).status for s in steps if s.event is not None]
    assert outcomes.count(Status.REJECTED) == 2  # the taken decision id, the call in an ended session
    rng = random.Random(24)
    replay, start = TenantGraph(tmp_path / "replay"), 0
    while start < len(steps):
        n = rng.randint(1, 5)
        replay.commit_planned(replay.plan(steps[start : start + n]))
        start += n
    assert export_nquads(replay) == export_nquads(live)
    d1 = agent_iri("decision", "d1")
    statuses = {q.object.value for q in live.store.quads_for_pattern(d1, e("decisionStatus"), None, INFERRED)}
    assert statuses == {"breached_constraint"}  # 36,000 + 5,000 of 40,000 once the spend moved


def test_the_documented_sparql_answers_which_decisions_relied_on_the_cap(demo: Tenant) -> None:
    """The SPARQL example in docs/design.md §7, read from the page, evaluated as the SPARQL route does."""
    from engram.projections.sparql import answer

    page = (Path(__file__).parents[2] / "docs" / "design.md").read_text()
    query = page.split("```sparql\n", 1)[1].split("```", 1)[0]
    assert (
        demo.apply(
            "DecisionRecorded",
            {
                "decision_id": "d1",
                "decision": "hold",
                "relied_on": ["meta-cap"],
                "spend": {"platform": "meta", "amount": 8000, "currency": "USD", "period": "2026-11"},
            },
            actor=SAM_AGENT,
        )
        is Status.APPLIED
    )
    assert (
        demo.apply("DecisionRecorded", {"decision_id": "d2", "decision": "other"}, actor=SAM_AGENT)
        is Status.APPLIED
    )
    rows = json.loads(answer(demo.graph.store, query, "application/sparql-results+json", max_rows=10).body)
    got = [{k: b[k]["value"] for k in b} for b in rows["results"]["bindings"]]
    assert got == [{"decision": "d1", "what": "hold", "by": "ads-agent", "status": "breached_constraint"}]


def test_the_agent_types_shapes_are_enforced(tmp_path: Path) -> None:
    """An agent event's node is checked against the shapes of its types (and :AgentWork's): with
    the ToolCall shape narrowed to one tool, another tool's call is refused with the shape's reason."""
    import shutil

    from engram.projections.knowledge import DEFAULT_ONTOLOGY_DIR, DEFAULT_RULES_DIR, load_knowledge

    ont = tmp_path / "ontology"
    shutil.copytree(DEFAULT_ONTOLOGY_DIR, ont)
    shapes = ont / "shapes.ttl"
    shapes.write_text(
        shapes.read_text().replace("sh:path :tool ;", 'sh:path :tool ; sh:pattern "^recall$" ;')
    )
    t = Tenant(tmp_path / "t", load_knowledge(ont, DEFAULT_RULES_DIR))
    assert t.apply("SessionStarted", {"session_id": "s1"}, actor=SAM_AGENT) is Status.APPLIED
    call = {
        "call_id": "c1",
        "session_id": "s1",
        "tool": "check_plan",
        "arguments_digest": DIGEST,
        "outcome": "ok",
    }
    assert t.apply("ToolCalled", call, actor=SAM_AGENT) is Status.REJECTED
    assert t.reason is not None and t.reason.startswith("shape violations: :ToolCall: :tool")
    assert t.apply("ToolCalled", {**call, "tool": "recall"}, actor=SAM_AGENT) is Status.APPLIED
