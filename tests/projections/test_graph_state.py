"""The graph-state contract: what ``plan`` may read (``GraphState``) answers the same from the
tenant's on-disk store and from the in-memory ``FactSet`` the edge's pre-check plans a tenant's
first event against, and both reach the same decision for every event."""

from __future__ import annotations

import random
import tempfile
from pathlib import Path

from engram.projections.knowledge import load_knowledge
from engram.projections.plan import FactSet, GraphState, no_facts
from engram.projections.tenant_graph import Status, TenantGraph
from engram.projections.terms import ASSERTED, VECTORS
from engram.projections.validation import PLAN_ERRORS, checked_plan
from engram.schemas.events import Position, event_from_json
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyoxigraph import NamedNode

from tests.factories import EXAMPLES, event, random_stream

KNOWLEDGE = load_knowledge()


def answers(state: GraphState, subjects: set[NamedNode]) -> dict[NamedNode, tuple]:
    """Everything ``plan`` can ask of ``state`` about ``subjects``, order aside."""
    out = {}
    for s in subjects:
        facts = sorted(map(str, state.facts(s)))
        objects = {str(p): sorted(map(str, state.objects(s, p))) for p, _ in state.facts(s)}
        out[s] = (facts, objects, sorted(map(str, state.vectors(s))))
    return out


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32), st.integers(5, 40))
def test_the_store_and_a_fact_set_answer_and_decide_alike(seed: int, n: int) -> None:
    lines, _ = random_stream(random.Random(seed), "acme", n)
    facts = FactSet()
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
        store = TenantGraph(Path(tmp) / "graph", KNOWLEDGE)
        subjects: set[NamedNode] = set()
        for offset, line in enumerate(lines):
            ev = event_from_json(line)
            pos = Position(0, offset, 1_764_547_200_000 + offset)
            try:
                delta = checked_plan(KNOWLEDGE, ev, pos, facts)
            except PLAN_ERRORS:
                delta = None
            outcome = store.apply(ev, pos)
            assert (outcome.status is Status.APPLIED) == (delta is not None), (line, outcome.reason)
            if delta is not None:
                facts.apply(delta)
                subjects |= {
                    q.subject for q in (*delta.adds, *delta.removes) if q.graph_name in (ASSERTED, VECTORS)
                }
            assert answers(facts, subjects) == answers(store, subjects)


def test_no_facts_is_the_state_of_a_new_store(tmp_path: Path) -> None:
    """The pre-check of a tenant's first event (against ``no_facts()``) decides as the store will."""
    for etype, payload in EXAMPLES.items():
        ev = event(etype, payload)
        try:
            checked_plan(KNOWLEDGE, ev, Position(0, 0), no_facts())
            expected = Status.APPLIED
        except PLAN_ERRORS:
            expected = Status.REJECTED
        store = TenantGraph(tmp_path / etype, KNOWLEDGE)
        assert store.apply(ev, Position(0, 0)).status is expected, etype
