"""The incremental materialisation equals a from-scratch one after every step (hypothesis)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from unittest import mock

import pytest
from engram.projections.knowledge import DEFAULT_ONTOLOGY_DIR, DEFAULT_RULES_DIR, load_knowledge
from engram.projections.read import export_nquads
from engram.projections.rules import engine as rule_engine
from engram.projections.tenant_graph import Step, TenantGraph
from engram.schemas.checks import InvalidEvent
from engram.schemas.events import Event, Position
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyoxigraph import NamedNode

from tests.factories import event
from tests.tenant import from_scratch

CHECK = NamedNode("urn:engram:graph:check")
IDS = ["m1", "m2", "m3", "m4", "m5", "m6"]
TIMES = ["2026-12-01T00:00:00Z", "2026-12-02T00:00:00Z", "2026-12-03T00:00:00Z"]
# periods before, around and after the clock's TIMES, of several kinds (a week that straddles
# the month's start; one that starts after it), and the legacy instant
PERIODS = st.sampled_from(["2026-11", "2026-12", "2027-01", "2026-W49", "2026-W48", "2026-Q4", "2026-12-02",
                           "unspecified"])  # fmt: skip


def knowledge_with_cap(tmp: Path, cap: int) -> object:
    """The real ontology and rules, with a live-context cap small enough to be reached."""
    ont = tmp / "ontology"
    shutil.copytree(DEFAULT_ONTOLOGY_DIR, ont)
    core = ont / "core.ttl"
    core.write_text(core.read_text().replace(":liveContextCap 20", f":liveContextCap {cap}"))
    return load_knowledge(ont, DEFAULT_RULES_DIR)


def built(etype: str, payload: dict) -> Event | None:
    """The event, or None for the one event the generators make that the domain refuses: a memory
    superseded by itself. Only that one is skipped (and checked to be refused): any other failure
    to build an event is the factory's or the schema's bug, and fails the test instead of turning
    every example into a skipped one."""
    if etype == "MemorySuperseded" and payload["memory_id"] == payload["superseded_by"]:
        with pytest.raises(InvalidEvent, match="cannot supersede itself"):
            event(etype, payload)
        return None
    return event(etype, payload)


CLASSES = st.sampled_from(
    [
        ("Memory", {}),
        ("PerformanceTargetMemory", {"metric": "roas", "goal": 3.0}),
        ("PerformanceTargetMemory", {"metric": "roas", "goal": 2}),
        ("PerformanceTargetMemory", {"metric": "cpa", "goal": 20.0}),
        ("BudgetConstraintMemory", {"platform": "meta", "amount": 40000.0, "currency": "USD"}),
        ("BudgetConstraintMemory", {"platform": "google", "amount": 1000, "currency": "USD"}),
        ("BudgetConstraintMemory", {"platform": "meta", "amount": 900, "currency": "USD", "period": "week"}),
        ("BudgetConstraintMemory", {"platform": "meta", "amount": 900, "currency": "EUR", "period": "day"}),
        ("BrandVoiceMemory", {}),
        ("HiringCriteriaMemory", {"role": "designer"}),
        ("TechnicalHiringCriteriaMemory", {"role": "engineer", "skill": "python"}),
    ]
)
SCOPES = st.sampled_from(
    [
        ("company", {}),
        ("user", {"user_id": "u1"}),
        ("user", {"user_id": "u2"}),
        ("team", {"team_ids": ["t1"]}),
    ]
)


@st.composite
def remember(draw: st.DrawFn) -> tuple[str, dict]:
    cls, props = draw(CLASSES)
    scope, holders = draw(SCOPES)
    payload = {
        "memory_id": draw(st.sampled_from(IDS)),
        "label": draw(st.sampled_from(["Tone", "tone", "Budget", "Goal"])),
        "content": "c",
        "kind": draw(st.sampled_from(["fact", "objective", "preference"])),
        "scope": scope,
        "stakeholders": holders,
        "importance": draw(st.integers(1, 5)),
        "memory_class": cls,
        "properties": props,
    }
    if draw(st.booleans()):
        payload["expires_at"] = draw(st.sampled_from(TIMES))
    if draw(st.integers(0, 3)) == 0:  # a proposal, pending until a ProposalDecided (OPS) settles it
        payload.update(proposal(draw, IDS, payload["memory_id"]))
    return "MemoryRemembered", payload


def proposal(draw: st.DrawFn, ids: list[str], itself: str) -> dict:
    """``proposes`` one of ``ids``, and half the time ``also_proposes`` one or two more: accepted,
    it supersedes them all at once (refused whole if any of them is no longer active)."""
    others = draw(
        st.lists(st.sampled_from([i for i in ids if i != itself]), min_size=1, max_size=3, unique=True)
    )
    return {"proposes": others[0], **({"also_proposes": others[1:]} if others[1:] else {})}


def lifecycle(ids: list[str]) -> list[st.SearchStrategy[tuple[str, dict]]]:
    """A memory of ``ids`` superseded by another, restored, forgotten; a proposal accepted or
    rejected (refused unless it is one, pending, and for accept its memory still active)."""
    return [
        st.builds(
            lambda m, d: ("ProposalDecided", {"memory_id": m, "decision": d}),
            st.sampled_from(ids),
            st.sampled_from(["accepted", "rejected"]),
        ),
        st.builds(
            lambda a, b: ("MemorySuperseded", {"memory_id": a, "superseded_by": b}),
            st.sampled_from(ids),
            st.sampled_from(ids),
        ),
        st.builds(lambda m: ("MemoryRestored", {"memory_id": m}), st.sampled_from(ids)),
        st.builds(lambda m: ("MemoryForgotten", {"memory_id": m}), st.sampled_from(ids)),
    ]


# Agent work the rules judge (rules/plans.dlog, rules/associations.dlog): decisions citing memories
# with a planned spend or a target change, and associations between memories and decisions, some
# refused (an unknown memory, a taken id), so the plan and decision rules move with every
# supersession, forget, spend, KPI and clock tick beside them.
PLANNED_PERIODS = st.sampled_from(["2026-11", "2026-12", "2027-01", "2026-W49", "2026-Q4", "2026-12-02"])
AGENT_OPS = [
    st.builds(
        lambda d, cited, p, a, c, per, kpi: (
            "DecisionRecorded",
            {
                "decision_id": d,
                "decision": f"decision {d}",
                "relied_on": cited,
                "spend": {"platform": p, "amount": a, "currency": c, "period": per},
                **({"target_change": kpi} if kpi else {}),
            },
        ),
        st.sampled_from(["d1", "d2", "d3"]),
        st.lists(st.sampled_from(IDS), max_size=2, unique=True),
        st.sampled_from(["meta", "google"]),
        st.sampled_from([0.0, 800.0, 6000.0, 8000.0]),
        st.sampled_from(["USD", "EUR"]),
        PLANNED_PERIODS,
        st.one_of(
            st.none(),
            st.fixed_dictionaries(
                {"metric": st.sampled_from(["roas", "cpa"]), "value": st.sampled_from([1.0, 2.9, 3.0, 30.0])}
            ),
        ),
    ),
    st.builds(
        lambda i, f, t, r: (
            "MemoriesAssociated",
            {"association_id": i, "from_ref": f, "to_ref": t, "relation": r},
        ),
        st.sampled_from(["a1", "a2", "a3", "a4"]),
        st.sampled_from(IDS),
        st.sampled_from([*IDS, "decision:d1", "decision:d2"]),
        st.sampled_from(["supports", "contradicts", "depends_on"]),
    ).filter(lambda op: op[1]["from_ref"] != op[1]["to_ref"]),
    st.builds(
        lambda i: ("AssociationRemoved", {"association_id": i}), st.sampled_from(["a1", "a2", "a3", "a4"])
    ),
]

OPS = st.one_of(
    remember(),
    *AGENT_OPS,
    st.builds(
        lambda m, ch: ("MemoryRevised", {"memory_id": m, "changes": ch}),
        st.sampled_from(IDS),
        st.one_of(
            st.fixed_dictionaries({"importance": st.integers(1, 5)}),
            st.fixed_dictionaries({"label": st.sampled_from(["Tone", "Goal", "Other"])}),
            st.fixed_dictionaries({"expires_at": st.one_of(st.none(), st.sampled_from(TIMES))}),
        ),
    ),
    st.builds(
        lambda m, g: ("MemoryRevised", {"memory_id": m, "property_changes": {"goal": g}}),
        st.sampled_from(IDS),
        st.sampled_from([1.5, 3.0, 5]),
    ),
    *lifecycle(IDS),
    st.builds(
        lambda k, x, p: ("KpiObserved", {"metric": k, "value": x, "period": p}),
        st.sampled_from(["roas", "cpa"]),
        st.sampled_from([1.0, 2.0, 2.7, 3.0, 3.2, 25.0]),
        PERIODS,
    ),
    st.builds(
        lambda p, a, c, per: ("SpendObserved", {"platform": p, "amount": a, "currency": c, "period": per}),
        st.sampled_from(["meta", "google"]),
        st.sampled_from([0.0, 500.0, 850.0, 34000.0, 41000.0]),
        st.sampled_from(["USD", "USD", "EUR"]),
        PERIODS,
    ),
    st.builds(lambda t: ("ClockTicked", {"now": t}), st.sampled_from(TIMES)),
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(remember(), min_size=2, max_size=6, unique_by=lambda op: op[1]["memory_id"]),
    st.lists(OPS, min_size=1, max_size=20),
)
def test_incremental_equals_full_rematerialisation_after_every_step(
    setup: list[tuple[str, dict]], ops: list[tuple[str, dict]]
) -> None:
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
        graph = TenantGraph(Path(tmp) / "graph", knowledge_with_cap(Path(tmp), cap=2))
        for offset, (etype, payload) in enumerate(setup + ops):
            if (ev := built(etype, payload)) is None:
                continue
            graph.apply(ev, Position(0, offset, 1_764_547_200_000 + offset * 1000))
            assert graph.inferred() == from_scratch(graph), f"after step {offset}: {etype} {payload}"
        del graph


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(remember(), min_size=2, max_size=6, unique_by=lambda op: op[1]["memory_id"]),
    st.lists(OPS, min_size=1, max_size=24),
    st.lists(st.integers(1, 8), min_size=1, max_size=24),
    st.sampled_from([2, rule_engine.SEED_CHUNK]),
)
def test_incremental_equals_full_after_every_batch_of_random_size(
    setup: list[tuple[str, dict]], ops: list[tuple[str, dict]], sizes: list[int], chunk: int
) -> None:
    """A batch is planned event by event against the uncommitted delta, committed as one net delta,
    then one rule update seeded by all of it: after each batch the inferred facts equal a from-scratch
    materialisation, and at the end the store equals the same events applied one at a time. The
    engine's queries take at most ``chunk`` seeds each (2: a batch's seeds are always split)."""
    with (
        tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp,
        mock.patch.object(rule_engine, "SEED_CHUNK", chunk),
    ):
        knowledge = knowledge_with_cap(Path(tmp), cap=2)
        batched = TenantGraph(Path(tmp) / "batched", knowledge)
        single = TenantGraph(Path(tmp) / "single", knowledge)
        steps = []
        for offset, (etype, payload) in enumerate(setup + ops):
            if (ev := built(etype, payload)) is None:
                continue
            steps.append(Step(Position(0, offset, 1_764_547_200_000 + offset * 1000), ev))
        cuts = iter(sizes * len(steps))
        start, outcomes = 0, []
        while start < len(steps):
            batch = steps[start : start + next(cuts)]
            planned = batched.plan(batch)
            batched.commit_planned(planned)
            outcomes += planned.outcomes
            assert batched.inferred() == from_scratch(batched), f"after the batch ending at {batch[-1]}"
            start += len(batch)
        assert outcomes == [single.apply(s.event, s.position) for s in steps if s.event is not None]
        assert export_nquads(batched) == export_nquads(single)
        del batched, single


# Proposals against several memories (MemoryRemembered's also_proposes): a person's memories
# first, so that a proposal names memories that exist, then proposals against one to three of
# them, their decisions (an acceptance supersedes them all at once, or is refused whole when one
# is no longer active) and the lifecycle and live data around them.
KEPT = ["h1", "h2", "h3", "h4"]
PROPOSERS = ["p1", "p2", "p3"]


@st.composite
def proposing(draw: st.DrawFn) -> list[tuple[str, dict]]:
    kept = draw(st.lists(st.sampled_from(KEPT), min_size=2, max_size=4, unique=True))
    steps = []
    for m in kept:
        cls, props = draw(CLASSES)
        steps.append(
            ("MemoryRemembered", {**_company(m), "memory_class": cls, "properties": props, "importance": 5})
        )
    for m in PROPOSERS:  # each against one to three of them
        olds = draw(st.lists(st.sampled_from(kept), min_size=1, max_size=3, unique=True))
        cls, props = draw(CLASSES)
        steps.append(
            (
                "MemoryRemembered",
                {
                    **_company(m),
                    "importance": 4,
                    "memory_class": cls,
                    "properties": props,
                    **_against(m, olds),
                },
            )
        )
    decided = st.builds(
        lambda m, d: ("ProposalDecided", {"memory_id": m, "decision": d}),
        st.sampled_from(PROPOSERS),
        st.sampled_from(["accepted", "accepted", "rejected"]),
    )
    ops = st.one_of(  # answers weighed above the lifecycle that makes them stale
        decided,
        decided,
        *lifecycle([*kept, *PROPOSERS]),
        st.builds(
            lambda k, x: ("KpiObserved", {"metric": k, "value": x, "period": "2026-12"}),
            st.sampled_from(["roas", "cpa"]),
            st.sampled_from([1.0, 3.0, 25.0]),
        ),
        st.builds(lambda t: ("ClockTicked", {"now": t}), st.sampled_from(TIMES)),
    )
    return steps + draw(st.lists(ops, min_size=1, max_size=12))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(proposing(), st.lists(st.integers(1, 6), min_size=1, max_size=20))
def test_proposals_against_several_memories_incremental_equals_full_and_batched_equals_single(
    steps: list[tuple[str, dict]], sizes: list[int]
) -> None:
    """Accepting a proposal supersedes each memory it names in one event: after every batch the
    inferred facts equal a from-scratch materialisation, and the store equals the same events
    applied one at a time (live = replay)."""
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
        knowledge = knowledge_with_cap(Path(tmp), cap=2)
        batched = TenantGraph(Path(tmp) / "batched", knowledge)
        single = TenantGraph(Path(tmp) / "single", knowledge)
        events = [
            Step(Position(0, offset, 1_764_547_200_000 + offset * 1000), ev)
            for offset, (etype, payload) in enumerate(steps)
            if (ev := built(etype, payload)) is not None
        ]
        cuts = iter(sizes * len(events))
        start, outcomes = 0, []
        while start < len(events):
            batch = events[start : start + next(cuts)]
            planned = batched.plan(batch)
            batched.commit_planned(planned)
            outcomes += planned.outcomes
            assert batched.inferred() == from_scratch(batched), f"after the batch ending at {batch[-1]}"
            start += len(batch)
        assert outcomes == [single.apply(s.event, s.position) for s in events if s.event is not None]
        assert single.inferred() == from_scratch(single)
        assert export_nquads(batched) == export_nquads(single)
        del batched, single


RANKED = [f"r{i}" for i in range(10)]
REMEMBER_RANKED = st.builds(
    lambda m, i, olds: ("MemoryRemembered", {**_company(m), "importance": i, **_against(m, olds)}),
    st.sampled_from(RANKED),
    st.integers(3, 5),
    st.one_of(st.just([]), st.lists(st.sampled_from(RANKED), min_size=1, max_size=3, unique=True)),
)


def _against(memory_id: str, olds: list[str]) -> dict:
    """A proposal against ``olds`` (pending until OPS decides it), or no proposal if there are none."""
    olds = [o for o in olds if o != memory_id]
    return {"proposes": olds[0], "also_proposes": olds[1:]} if olds else {}


RANK_OPS = st.one_of(
    REMEMBER_RANKED,
    st.builds(
        lambda m, i: ("MemoryRevised", {"memory_id": m, "changes": {"importance": i}}),
        st.sampled_from(RANKED),
        st.integers(3, 5),
    ),
    *lifecycle(RANKED),
    st.builds(lambda t: ("ClockTicked", {"now": t}), st.sampled_from(TIMES)),
)


def _company(memory_id: str) -> dict:
    return {"memory_id": memory_id, "label": memory_id, "content": "c", "kind": "fact", "scope": "company"}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(REMEMBER_RANKED, min_size=3, max_size=8, unique_by=lambda op: op[1]["memory_id"]),
    st.lists(RANK_OPS, min_size=1, max_size=30),
    st.lists(st.integers(1, 6), min_size=1, max_size=30),
    st.integers(0, 2),
    st.sampled_from([2, 4, rule_engine.SEED_CHUNK]),
)
def test_live_rank_kept_incrementally_equals_ranked_from_scratch(
    setup: list[tuple[str, dict]], ops: list[tuple[str, dict]], sizes: list[int], ties: int, chunk: int
) -> None:
    """The live-context rank (RANK … LIMIT) under churn of its top: new candidates above and below
    it, members revised, superseded, forgotten and restored, memories recorded in the same second
    (the id breaks the tie); after every batch it equals a ranking from scratch, also when the
    changed items are ranked in chunks of 2 or 4 and the chunks' firsts ranked again."""
    with (
        tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp,
        mock.patch.object(rule_engine, "SEED_CHUNK", chunk),
    ):
        graph = TenantGraph(Path(tmp) / "graph", knowledge_with_cap(Path(tmp), cap=3))
        steps = []
        for offset, (etype, payload) in enumerate(setup + ops):
            if (ev := built(etype, payload)) is None:
                continue
            steps.append(Step(Position(0, offset, 1_764_547_200_000 + offset // (ties + 1) * 1000), ev))
        cuts = iter(sizes * len(steps))
        start = 0
        while start < len(steps):
            batch = steps[start : start + next(cuts)]
            graph.commit_planned(graph.plan(batch))
            assert graph.inferred() == from_scratch(graph), f"after the batch ending at {batch[-1]}"
            start += len(batch)
        del graph
