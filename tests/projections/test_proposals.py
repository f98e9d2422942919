"""Proposals in the projection: the planner and the rules on a real tenant store.

A pending proposal is a memory that is not active (in no context, recall or conflict set);
accepting it supersedes the memory it proposes to replace exactly as MemorySuperseded would;
rejecting leaves it inactive; a second answer, an answer to a non-proposal, and an acceptance
against a memory no longer active are refused with reasons; the incremental result equals a
from-scratch materialisation after every step. Who may decide: ``governance``, by role and source.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from engram.projections import governance
from engram.projections.batch import Overlay
from engram.projections.plan import FactSet, plan
from engram.projections.proposals import pending_against, proposal_facts
from engram.projections.read import get_memory
from engram.projections.tenant_graph import Status
from engram.projections.visibility import everything
from engram.schemas.events import Position

from tests.factories import event, remembered
from tests.tenant import Tenant, from_scratch

SAM = {"id": "sam", "role": "user"}


def target(memory_id: str, goal: float, **extra: object) -> dict[str, object]:
    return remembered(
        memory_id,
        label="ROAS target",
        kind="objective",
        importance=5,
        scope="user",
        stakeholders={"user_id": "sam"},
        memory_class="PerformanceTargetMemory",
        properties={"metric": "roas", "goal": goal},
        **extra,
    )


def proposed(tmp_path: Path) -> Tenant:
    """Sam's target 3 and an extracted target 4 proposed against it."""
    t = Tenant(tmp_path / "t")
    assert t.apply("MemoryRemembered", target("roas-3", 3.0), actor=SAM, source="agent") is Status.APPLIED
    extracted = target("roas-4", 4.0, proposes="roas-3", confidence=0.8)
    agent = {"id": "extractor", "role": "agent", "on_behalf_of": "sam"}
    assert t.apply("MemoryRemembered", extracted, actor=agent, source="extraction") is Status.APPLIED
    return t


def decide(t: Tenant, memory_id: str, decision: str, **extra: object) -> Status:
    payload = {"memory_id": memory_id, "decision": decision, **extra}
    status = t.apply("ProposalDecided", payload, actor=SAM, source="agent")
    assert t.graph.inferred() == from_scratch(t.graph)
    return status


def test_a_pending_proposal_is_not_active_and_in_no_conflict(tmp_path: Path) -> None:
    t = proposed(tmp_path)
    assert t.has("roas-3", "ActiveMemory") and not t.has("roas-4", "ActiveMemory")
    assert t.values("roas-3", "conflictsWith") == set() == t.values("roas-4", "conflictsWith")
    assert t.values("roas-4", "targetStatus") == set()  # a rule over active memories ignores it
    assert t.graph.inferred() == from_scratch(t.graph)
    got = get_memory(t.graph, "roas-4")
    assert got is not None and (got["active"], got["proposes"], got["proposal_status"]) == (
        False,
        "roas-3",
        "pending",
    )
    assert pending_against(t.graph, "roas-3", everything) == ["roas-4"]
    assert pending_against(t.graph, "roas-3", lambda m: m != "roas-4") == []  # hidden: not named


def test_accepting_supersedes_the_old_memory_as_a_supersession_would(tmp_path: Path) -> None:
    t = proposed(tmp_path)
    assert decide(t, "roas-4", "accepted", reason="raised") is Status.APPLIED
    assert t.has("roas-4", "ActiveMemory") and not t.has("roas-3", "ActiveMemory")
    assert t.values("roas-4", "supersedes") == {"urn:engram:memory:roas-3"}
    old, new = get_memory(t.graph, "roas-3"), get_memory(t.graph, "roas-4")
    assert old is not None and new is not None
    assert old["superseded_by"] == "roas-4" and old["valid_to"] == new["valid_from"]
    facts = proposal_facts(t.graph, "roas-4", everything)["proposal"]
    assert (facts["status"], facts["decided_by"], facts["decided_for"], facts["reason"]) == (
        "accepted",
        "sam",
        "sam",
        "raised",
    )
    assert decide(t, "roas-4", "rejected") is Status.REJECTED
    assert t.reason == "proposal roas-4 is already accepted"


def test_rejecting_leaves_it_inactive_and_the_old_memory_active(tmp_path: Path) -> None:
    t = proposed(tmp_path)
    assert decide(t, "roas-4", "rejected") is Status.APPLIED
    assert t.has("roas-3", "ActiveMemory") and not t.has("roas-4", "ActiveMemory")
    assert t.values("roas-4", "proposalStatus") == {"rejected"}
    assert pending_against(t.graph, "roas-3", everything) == []
    assert decide(t, "roas-4", "accepted") is Status.REJECTED
    assert t.reason == "proposal roas-4 is already rejected"


def test_a_non_proposal_and_a_stale_acceptance_are_refused(tmp_path: Path) -> None:
    t = proposed(tmp_path)
    assert decide(t, "roas-3", "accepted") is Status.REJECTED
    assert t.reason == "memory roas-3 is not a proposal"
    t.apply("MemoryRemembered", target("roas-5", 5.0, replaces="roas-3"), actor=SAM, source="agent")
    assert decide(t, "roas-4", "accepted") is Status.REJECTED
    assert t.reason == "memory roas-3, which roas-4 proposes to replace, is no longer active"
    assert decide(t, "roas-4", "rejected") is Status.APPLIED  # it may still be turned down


def test_who_may_decide_is_who_may_supersede_the_old_memory_never_the_extraction(tmp_path: Path) -> None:
    t = proposed(tmp_path)

    def refusal(actor: dict[str, str], source: str = "agent") -> str | None:
        ev = event(
            "ProposalDecided", {"memory_id": "roas-4", "decision": "accepted"}, actor=actor, source=source
        )
        try:
            governance.check(ev, Overlay(t.graph.store))
        except governance.InvalidEvent as exc:
            return str(exc)
        return None

    for_sam = {"id": "helper", "role": "agent", "on_behalf_of": "sam"}
    assert refusal(SAM) is None and refusal(for_sam) is None
    assert refusal(SAM, "extraction") == "ProposalDecided never comes from source extraction"
    assert refusal({"id": "ann", "role": "user"}) == "memory roas-4 not found"
    assert refusal({"id": "dana", "role": "operator"}) == (
        "only sam (or an agent on their behalf) may decide a proposal to replace memory roas-3"
    )
    assert refusal({"id": "etl", "role": "pipeline"}) == (
        "a pipeline may only emit KpiObserved, SpendObserved, ClockTicked, ConversationTurn"
        " and TurnsExtracted"
    )


def test_a_proposal_needs_a_memory_to_replace_and_not_itself() -> None:
    with pytest.raises(governance.InvalidEvent, match="cannot propose to replace itself"):
        event("MemoryRemembered", remembered("m1", proposes="m1"))
    with pytest.raises(governance.InvalidEvent, match="not both proposes and replaces"):
        event("MemoryRemembered", remembered("m2", proposes="m1", replaces="m1"))
    with pytest.raises(governance.InvalidEvent, match="unknown memory m9"):
        plan(event("MemoryRemembered", remembered("m1", proposes="m9")), Position(0, 0), FactSet())
