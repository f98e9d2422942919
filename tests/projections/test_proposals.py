"""Proposals in the projection: the planner and the rules on a real tenant store.

A pending proposal is a memory that is not active (in no context, recall or conflict set);
accepting it supersedes the memory it proposes to replace exactly as MemorySuperseded would;
rejecting leaves it inactive; a second answer, an answer to a non-proposal, and an acceptance
against a memory no longer active are refused with reasons; the incremental result equals a
from-scratch materialisation after every step. Who may decide: ``governance``, by role and source.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from engram.projections import governance
from engram.projections.batch import Overlay
from engram.projections.plan import FactSet, plan
from engram.projections.proposals import pending_against, proposal_facts
from engram.projections.read import get_memory
from engram.projections.tenant_graph import Status
from engram.projections.visibility import everything
from engram.schemas import history_dir
from engram.schemas import payloads as ev
from engram.schemas.events import Position
from engram.streams import codec
from fastavro.schema import parse_schema

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


# -- a proposal against several memories a person entered ------------------------------------


def against_both(tmp_path: Path) -> Tenant:
    """Sam's targets 3 and 3.5 (both kept) and an extracted target 4 proposed against both."""
    t = Tenant(tmp_path / "t")
    for memory_id, goal in (("roas-3", 3.0), ("roas-35", 3.5)):
        assert (
            t.apply("MemoryRemembered", target(memory_id, goal), actor=SAM, source="agent") is Status.APPLIED
        )
    extracted = target("roas-4", 4.0, proposes="roas-3", also_proposes=["roas-35"], confidence=0.8)
    agent = {"id": "extractor", "role": "agent", "on_behalf_of": "sam"}
    assert t.apply("MemoryRemembered", extracted, actor=agent, source="extraction") is Status.APPLIED
    assert t.graph.inferred() == from_scratch(t.graph)
    return t


def test_a_proposal_names_every_memory_it_would_replace_and_each_shows_it_pending(tmp_path: Path) -> None:
    t = against_both(tmp_path)
    got = get_memory(t.graph, "roas-4")
    assert got is not None and (got["active"], got["proposes"], got["proposes_all"]) == (
        False,
        "roas-3",
        ["roas-3", "roas-35"],
    )
    assert get_memory(t.graph, "roas-4", lambda m: m != "roas-3")["proposes_all"] == ["roas-35"]  # type: ignore[index]
    for old in ("roas-3", "roas-35"):
        assert t.has(old, "ActiveMemory") and pending_against(t.graph, old, everything) == ["roas-4"]
    standing = proposal_facts(t.graph, "roas-4", everything)["proposal"]
    assert (standing["proposes"], standing["proposes_all"]) == ("roas-3", ["roas-3", "roas-35"])


def test_accepting_supersedes_every_memory_it_would_replace(tmp_path: Path) -> None:
    t = against_both(tmp_path)
    assert decide(t, "roas-4", "accepted") is Status.APPLIED
    assert t.has("roas-4", "ActiveMemory")
    assert not t.has("roas-3", "ActiveMemory") and not t.has("roas-35", "ActiveMemory")
    assert t.values("roas-4", "supersedes") == {"urn:engram:memory:roas-3", "urn:engram:memory:roas-35"}
    new = get_memory(t.graph, "roas-4")
    assert new is not None and new["supersedes"] == ["roas-3", "roas-35"]
    for old_id in ("roas-3", "roas-35"):
        old = get_memory(t.graph, old_id)
        assert old is not None and old["superseded_by"] == "roas-4" and old["valid_to"] == new["valid_from"]


def test_accepting_is_all_or_none_refused_while_any_of_them_is_no_longer_active(tmp_path: Path) -> None:
    """The question Sam answers is "replace 3 and 3.5 with 4": once 3.5 is gone (superseded or
    forgotten) it is not the question that stands, so the acceptance is refused whole, naming what
    went, and nothing is superseded; turning it down still works."""
    t = against_both(tmp_path)
    t.apply("MemoryRemembered", target("roas-5", 5.0, replaces="roas-35"), actor=SAM, source="agent")
    assert decide(t, "roas-4", "accepted") is Status.REJECTED
    assert t.reason == "memory roas-35, which roas-4 proposes to replace, is no longer active"
    assert t.has("roas-3", "ActiveMemory") and get_memory(t.graph, "roas-3")["superseded_by"] is None  # type: ignore[index]
    t.apply(
        "MemoryForgotten",
        {"memory_id": "roas-3"},
        actor={"id": "dana", "role": "operator"},
        source="operator",
    )
    assert decide(t, "roas-4", "accepted") is Status.REJECTED
    assert t.reason == "memories roas-3, roas-35, which roas-4 proposes to replace, are no longer active"
    assert decide(t, "roas-4", "rejected") is Status.APPLIED


def test_who_may_decide_may_supersede_every_memory_it_would_replace(tmp_path: Path) -> None:
    """A proposal (as sent on Kafka) against Sam's target and a company memory an operator wrote:
    neither Sam (not the company memory's) nor the operator (not Sam's) may decide it alone."""
    t = Tenant(tmp_path / "t")
    dana = {"id": "dana", "role": "operator"}
    t.apply("MemoryRemembered", target("roas-3", 3.0), actor=SAM, source="agent")
    t.apply("MemoryRemembered", remembered("policy", label="ROAS policy"), actor=dana, source="operator")
    both = target("roas-4", 4.0, proposes="roas-3", also_proposes=["policy"], confidence=0.8)
    agent = {"id": "extractor", "role": "agent", "on_behalf_of": "sam"}
    assert t.apply("MemoryRemembered", both, actor=agent, source="extraction") is Status.APPLIED, t.reason

    def refusal(actor: dict[str, str]) -> str | None:
        ev = event(
            "ProposalDecided", {"memory_id": "roas-4", "decision": "rejected"}, actor=actor, source="agent"
        )
        try:
            governance.check(ev, Overlay(t.graph.store))
        except governance.InvalidEvent as exc:
            return str(exc)
        return None

    assert (
        refusal(SAM)
        == "only an operator or its author may decide a proposal to replace company memory policy"
    )
    assert (
        refusal(dana)
        == "only sam (or an agent on their behalf) may decide a proposal to replace memory roas-3"
    )
    ann = {"id": "ann", "role": "user"}  # may see the company memory, not Sam's: as if it did not exist
    seen = event("MemoryRemembered", remembered("x", proposes="policy", also_proposes=["roas-3"]), actor=ann)
    with pytest.raises(governance.Unseen, match="memory roas-3 not found"):
        governance.check(seen, Overlay(t.graph.store))


def test_also_proposes_needs_proposes_names_each_once_and_never_itself() -> None:
    for fields, why in (
        ({"also_proposes": ["m2"]}, "also_proposes needs proposes"),
        ({"proposes": "m2", "also_proposes": ["m2"]}, "names each memory it would replace once"),
        ({"proposes": "m2", "also_proposes": ["m3", "m3"]}, "names each memory it would replace once"),
        ({"proposes": "m2", "also_proposes": ["m1"]}, "cannot propose to replace itself"),
        ({"proposes": "m2", "also_proposes": ["no spaces"]}, "also_proposes must match"),
        ({"proposes": "m2", "also_proposes": [f"o{i}" for i in range(64)]}, "at most 64 memories"),
    ):
        with pytest.raises(governance.InvalidEvent, match=why):
            event("MemoryRemembered", remembered("m1", **fields))
    known = FactSet()
    known.apply(plan(event("MemoryRemembered", remembered("m2")), Position(0, 0), known))
    with pytest.raises(governance.InvalidEvent, match="unknown memory m9"):
        plan(
            event("MemoryRemembered", remembered("m1", proposes="m2", also_proposes=["m9"])),
            Position(0, 1),
            known,
        )


def test_a_proposal_written_before_also_proposes_existed_reads_and_decides_as_it_did(tmp_path: Path) -> None:
    """An event of an Envelope without ``also_proposes`` (on the log forever): decoded, it names its
    one memory, and the store it builds equals the one a current writer's event builds."""
    old_writer = next(
        s
        for s in (parse_schema(json.loads(p.read_text())) for p in sorted(history_dir().glob("*.avsc")))
        if "proposes" in _fields(s, "MemoryRemembered")
        and "also_proposes" not in _fields(s, "MemoryRemembered")
    )
    at = {"occurred_at": "2026-11-02T09:00:00Z"}
    agent = {"id": "extractor", "role": "agent", "on_behalf_of": "sam"}
    steps = [
        ("MemoryRemembered", target("roas-3", 3.0), SAM, "agent"),
        ("MemoryRemembered", target("roas-4", 4.0, proposes="roas-3", confidence=0.8), agent, "extraction"),
        ("ProposalDecided", {"memory_id": "roas-4", "decision": "accepted"}, SAM, "agent"),
    ]
    stores = []
    for name, writer in (("old", old_writer), ("new", codec.envelope_schema())):
        t = Tenant(tmp_path / name)
        for i, (etype, payload, actor, source) in enumerate(steps):
            sent = event(etype, payload, actor=actor, source=source, event_id=str(uuid.UUID(int=i + 1)), **at)
            read = codec.decode(codec.encode(sent, writer))
            if etype == "MemoryRemembered" and read.payload.memory_id == "roas-4":
                p = read.payload
                assert isinstance(p, ev.MemoryRemembered)
                assert (p.proposes, p.also_proposes, p.proposed) == ("roas-3", (), ("roas-3",))
                assert read == sent
            assert t.apply(read) is Status.APPLIED, t.reason
        assert get_memory(t.graph, "roas-4")["proposes_all"] == ["roas-3"]  # type: ignore[index]
        assert get_memory(t.graph, "roas-3")["superseded_by"] == "roas-4"  # type: ignore[index]
        assert t.graph.inferred() == from_scratch(t.graph)
        stores.append(set(t.graph.store))
    assert stores[0] == stores[1]


def _fields(envelope: dict, name: str) -> set[str]:
    union = next(f["type"] for f in envelope["fields"] if f["name"] == "payload")
    record = next(b for b in union if isinstance(b, dict) and b.get("name") == f"engram.events.{name}")
    return {f["name"] for f in record["fields"]}
