"""A program's slice for some predicates: the rules they need, transitively (through NOT and
classes too), and nothing else; and the conflict keys it derives equal the whole program's."""

from __future__ import annotations

import uuid

import pytest
from engram.projections.conflicts import keys_of
from engram.projections.knowledge import load_knowledge
from engram.projections.plan import no_facts, plan
from engram.projections.rules.program import slice_for
from engram.projections.rules.syntax import parse_rules
from engram.projections.terms import ASSERTED, GRAPHS, INFERRED, ONTOLOGY, e, memory_iri
from engram.schemas import vocabulary as v
from engram.schemas.events import Event, Position, event_from_json
from pyoxigraph import Store

RULES = """
PREFIX : <https://engram.dev/ns#>
[?x, :wanted, ?y] :- [?x, :base, ?y], NOT [?x, a, :Excluded] .
[?x, a, :Excluded] :- [?x, :flag, "yes"] .
[?x, a, :Other] :- [?x, :unrelated, ?y] .
[?x, :elsewhere, ?y] :- [?x, :unrelated, ?y] .
"""


def test_a_slice_holds_what_the_wanted_predicates_read_through_not_and_classes() -> None:
    program = parse_rules(RULES)
    part = slice_for(program, frozenset({v.ENGRAM + "wanted"}))
    assert [r.text.split(":-")[0].strip() for r in part.program.rules] == [
        "[?x, :wanted, ?y]",
        "[?x, a, :Excluded]",
    ]
    assert part.reads == frozenset({v.ENGRAM + "base", v.RDF_TYPE, v.ENGRAM + "flag"})


def test_a_rule_reading_any_predicate_makes_the_slice_the_whole_program() -> None:
    program = parse_rules(RULES + "[?x, :wanted, ?y] :- [?x, ?p, ?y] .\n")
    part = slice_for(program, frozenset({v.ENGRAM + "wanted"}))
    assert part.program is program and part.reads is None


def remembered(memory_class: str, scope: str, **payload: object) -> Event:
    body = {"label": f"Label {uuid.uuid4().hex[:4]}", "content": "c", "kind": "fact", "importance": 3}
    holders = {"user_id": "sam" if scope == "user" else None, "team_ids": ["ops"] if scope == "team" else []}
    body |= {"scope": scope, "stakeholders": holders, "memory_class": memory_class, **payload}
    envelope = {"type": "MemoryRemembered", "tenant": "acme", "source": "agent", "payload": body}
    return event_from_json({**envelope, "actor": {"id": "a", "role": "agent"}, "event_id": str(uuid.uuid4())})


CLASSES = [
    ("Memory", {}),
    ("BudgetConstraintMemory", {"properties": {"platform": "meta", "amount": 1.0, "currency": "USD"}}),
    ("PerformanceTargetMemory", {"properties": {"metric": "roas", "target": 3.5}}),
]


@pytest.mark.parametrize("scope", ["company", "team", "user"])
@pytest.mark.parametrize(("memory_class", "extra"), CLASSES, ids=[c for c, _ in CLASSES])
def test_the_keys_from_the_slice_are_the_whole_programs(memory_class: str, extra: dict, scope: str) -> None:
    knowledge = load_knowledge()
    event = remembered(memory_class, scope, **extra)
    whole = Store()  # the keys as keys_of derived them before the slice: every rule, every fact
    whole.extend(knowledge.ontology.quads(ONTOLOGY))
    whole.extend(q for q in plan(event, Position(0, 0), no_facts()).adds if q.graph_name == ASSERTED)
    knowledge.engine.materialize(whole, GRAPHS)
    m = memory_iri(event.payload.memory_id)
    expected = tuple(
        {q.object.value for q in whole.quads_for_pattern(m, e(name), None, INFERRED)}
        for name in ("conflictKey", "stakeholderKey")
    )
    assert expected[0] and expected[1]  # the rules do derive both: the comparison is not of empties
    assert keys_of(knowledge, event) == expected
