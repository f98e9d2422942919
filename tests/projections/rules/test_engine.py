"""The engine on its own: parsing, stratification errors, and incremental = full on a recursive
program with negation and aggregation over random edge insertions and deletions."""

from __future__ import annotations

import re
import tempfile

import pytest
from engram.projections.rules.engine import Graphs, RuleEngine
from engram.projections.rules.stratify import StratificationError, stratify
from engram.projections.rules.syntax import RuleSyntaxError, parse_rules
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyoxigraph import Literal, NamedNode, Quad, Store, Triple

EX = "https://example.org/#"
BASE, INF, REM, CHECK = (NamedNode(f"urn:g:{n}") for n in ("base", "inf", "rem", "check"))
GRAPHS = Graphs(base=(BASE,), inferred=INF, removed=REM)

REACH = f"""
PREFIX : <{EX}>
[?x, :reach, ?y] :- [?x, :edge, ?y] .
[?x, :reach, ?z] :- [?x, :reach, ?y], [?y, :edge, ?z] .
[?x, :cut, ?y] :- [?x, :node, true], [?y, :node, true], NOT [?x, :reach, ?y], FILTER(?x != ?y) .
[?x, :outdeg, ?n] :- AGGREGATE([?x, :edge, ?y] ON ?x BIND COUNT(?y) AS ?n) .
[?x, :hub, true] :- [?x, :outdeg, ?n], FILTER(?n >= 2) .
[?x, :lonely, true] :- [?x, :node, true], NOT EXISTS ?y IN ([?x, :edge, ?y]) .
[?x, :top, ?r] :- RANK([?x, :outdeg, ?n], [?x, :node, true], [:cfg, :k, ?k]
    ON ?x BY DESC(?n) AS ?r LIMIT ?k) .
[?x, :leader, true] :- [?x, :top, 1] .
"""


def node(i: int) -> NamedNode:
    return NamedNode(f"{EX}n{i}")


def edge(a: int, b: int) -> Triple:
    return Triple(node(a), NamedNode(EX + "edge"), node(b))


def full(engine: RuleEngine, store: Store) -> set[Triple]:
    engine.materialize(store, Graphs(base=(BASE,), inferred=CHECK, removed=REM))
    out = {q.triple for q in store.quads_for_pattern(None, None, None, CHECK)}
    store.remove_graph(CHECK)
    return out


KINDS = ["edge"] * 4 + ["top", "k"]  # mostly edges
CFG, K = NamedNode(EX + "cfg"), NamedNode(EX + "k")
OPS = st.lists(
    st.tuples(st.booleans(), st.integers(0, 4), st.integers(0, 4), st.sampled_from(KINDS)),
    min_size=1,
    max_size=30,
)


def seeded(store: Store) -> Store:
    """Five nodes and the RANK's limit, 2: what REACH's random changes start from."""
    store.extend(Quad(node(i), NamedNode(EX + "node"), Literal(True), BASE) for i in range(5))
    store.add(Quad(CFG, K, Literal(2), BASE))
    return store


def change(store: Store, add: bool, a: int, b: int, kind: str) -> tuple[list[Triple], list[Triple]]:
    """The base facts one random change adds and removes, net against ``store`` (not yet written):
    an edge, a fact like the RANK's heads, or the limit set to ``b``."""
    added: list[Triple] = []
    removed: list[Triple] = []
    if kind == "k":
        removed = [q.triple for q in store.quads_for_pattern(CFG, K, None, BASE)]
        added = [Triple(CFG, K, Literal(b))]
    else:
        fact = edge(a, b) if kind == "edge" else Triple(node(a), NamedNode(EX + "top"), Literal(b % 3 + 1))
        (added if add else removed).append(fact)
    removed = [f for f in removed if Quad(*f, BASE) in store and f not in added]
    added = [f for f in added if Quad(*f, BASE) not in store]
    return added, removed


def write(store: Store, added: list[Triple], removed: list[Triple]) -> None:
    store.extend(Quad(*f, BASE) for f in added)
    for f in removed:
        store.remove(Quad(*f, BASE))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPS)
def test_recursive_program_incremental_equals_full(ops: list[tuple[bool, int, int, str]]) -> None:
    """Edges added and removed; now and then a fact like the RANK's heads asserted or retracted, or
    its limit changed to another number (0 to 4)."""
    engine = RuleEngine(parse_rules(REACH))
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
        store = seeded(Store(tmp))
        engine.materialize(store, GRAPHS)
        for add, a, b, kind in ops:
            added, removed = change(store, add, a, b, kind)
            write(store, added, removed)
            engine.update(store, GRAPHS, added, removed)
            inferred = {q.triple for q in store.quads_for_pattern(None, None, None, INF)}
            assert inferred == full(engine, store), f"after {kind} {'+' if add else '-'}{a}->{b}"
        del store


def test_a_rank_head_asserted_then_retracted_is_derived_again() -> None:
    """Inferred facts never repeat asserted ones, so an asserted [n0 :top 1] hides the derived one;
    retracted (nothing the rank reads changed), the rank derives it again."""
    engine = RuleEngine(parse_rules(REACH))
    top = Triple(node(0), NamedNode(EX + "top"), Literal(1))
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
        store = Store(tmp)
        store.extend(Quad(node(i), NamedNode(EX + "node"), Literal(True), BASE) for i in range(3))
        store.add(Quad(NamedNode(EX + "cfg"), NamedNode(EX + "k"), Literal(2), BASE))
        store.extend(Quad(*edge(0, i), BASE) for i in (1, 2))
        engine.materialize(store, GRAPHS)
        assert Quad(*top, INF) in store
        for change in ("assert", "retract"):
            (store.add if change == "assert" else store.remove)(Quad(*top, BASE))
            engine.update(
                store, GRAPHS, [top] if change == "assert" else [], [top] if change == "retract" else []
            )
            inferred = {q.triple for q in store.quads_for_pattern(None, None, None, INF)}
            assert inferred == full(engine, store), f"after the {change}"
            assert (Quad(*top, INF) in store) == (change == "retract")
        del store


def test_an_alternative_derivation_survives_a_deletion() -> None:
    engine = RuleEngine(parse_rules(REACH))
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
        store = Store(tmp)
        for a, b in [(0, 1), (1, 2), (0, 2)]:
            store.add(Quad(*edge(a, b), BASE))
        engine.materialize(store, GRAPHS)
        store.remove(Quad(*edge(0, 1), BASE))
        stats = engine.update(store, GRAPHS, [], [edge(0, 1)])
        reach = Triple(node(0), NamedNode(EX + "reach"), node(2))
        assert Quad(*reach, INF) in store  # overdeleted through 0->1->2, rederived from edge 0->2
        assert stats.rederived >= 1
        store.remove(Quad(*edge(0, 2), BASE))
        store.add(Quad(*edge(0, 1), BASE))
        engine.update(store, GRAPHS, [edge(0, 1)], [edge(0, 2)])
        assert Quad(*reach, INF) in store  # now derived through 0->1->2
        del store


def test_negative_cycle_is_refused_with_the_cycle_named() -> None:
    program = parse_rules(
        f"""PREFIX : <{EX}>
        [?x, :a, ?y] :- [?x, :b, ?y], NOT [?x, :c, ?y] .
        [?x, :c, ?y] :- [?x, :a, ?y] .""",
        "cycle.dlog",
    )
    with pytest.raises(
        StratificationError, match=r"cycle.dlog:2 .*:a.* -> cycle.dlog:3 .*:c.* -> cycle.dlog:2"
    ):
        stratify(program.rules)


def test_aggregate_cycle_is_refused() -> None:
    program = parse_rules(
        f"PREFIX : <{EX}>\n[?x, :n, ?c] :- AGGREGATE([?x, :n, ?y] ON ?x BIND COUNT(?y) AS ?c) ."
    )
    with pytest.raises(StratificationError, match="recurse through NOT/AGGREGATE"):
        stratify(program.rules)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[?x, :a, ?y] :- [?x, :b, ?z] .", "head variables ?y are not bound"),
        ("[?x, :a, ?x] :- [?x, :b, ?z], FILTER(?w > 1) .", "?w used in an expression but never bound"),
        ("[?x, :a, ?x] :- [?x, :b, ?z]", "expected '.'"),
        ("[?x, :a, ?x] :- [?x, nope:b, ?z] .", "unknown prefix 'nope'"),
        (
            "[?x, :a, ?c] :- [?x, :b, ?z], AGGREGATE([?x, :n, ?y] ON ?x BIND COUNT(?y) AS ?c) .",
            "only add FILTER",
        ),
        ('["lit", :a, ?x] :- [?x, :b, ?z] .', "literal cannot be a subject"),
        (
            "[?x, :r, ?p] :- [?x, :b, ?z], RANK([?x, :n, ?y], [:c, :k, ?k] ON ?x BY ?y AS ?p LIMIT ?k) .",
            "RANK must be the whole body",
        ),
        (
            "[?x, :r, ?p] :- RANK([?x, :n, ?y] ON ?x BY DESC(?y) AS ?p LIMIT ?k) .",
            "?k must be bound by the RANK's atoms",
        ),
        ("[?x, :r, ?p] :- RANK([?x, :n, ?y], [:c, :k, ?k] ON ?x AS ?p LIMIT ?k) .", "expected BY"),
        ("[?x, :r, ?y] :- RANK([?x, :n, ?y], [:c, :k, ?k] ON ?x BY ?y AS ?y LIMIT ?k) .", "needs a variable"),
        (
            "[?x, :ok, ?z] :- [?x, :q, ?z], [?x, :p, ?y], BIND(?y + 1 AS ?z) .",
            "BIND target ?z is already bound",
        ),
    ],
)
def test_syntax_errors_name_file_line_and_problem(text: str, message: str) -> None:
    with pytest.raises(RuleSyntaxError, match=re.escape(message)) as info:
        parse_rules(f"PREFIX : <{EX}>\n{text}", "bad.dlog")
    assert str(info.value).startswith("bad.dlog:")


def test_a_rank_rule_names_its_item_and_owns_its_heads() -> None:
    body = "RANK([?x, :n, ?y], [:c, :k, ?k] ON ?x BY DESC(?y) AS ?p LIMIT ?k)"
    with pytest.raises(RuleSyntaxError, match=re.escape("heads hold ?x and may hold ?p, nothing else")):
        parse_rules(f"PREFIX : <{EX}>\n[:all, :r, ?p] :- {body} .")
    with pytest.raises(RuleSyntaxError, match=re.escape("heads hold ?x and may hold ?p, nothing else")):
        parse_rules(f"PREFIX : <{EX}>\n[?x, :r, ?y] :- {body} .")
    with pytest.raises(RuleSyntaxError, match=re.escape("the LIMIT ?k depends on the item ?x")):
        parse_rules(
            f"PREFIX : <{EX}>\n[?x, :r, ?p] :- RANK([?x, :n, ?y], [?x, :k, ?k] ON ?x BY ?y AS ?p LIMIT ?k) ."
        )
    with pytest.raises(RuleSyntaxError, match=re.escape("the LIMIT ?k depends on the item ?x")):
        parse_rules(
            f"PREFIX : <{EX}>\n[?x, :r, ?p] :- RANK([?x, :s, ?s], [?s, :k, ?k] ON ?x BY ?s AS ?p LIMIT ?k) ."
        )
    with pytest.raises(RuleSyntaxError, match="heads must be its own"):
        RuleEngine(parse_rules(f"PREFIX : <{EX}>\n[?x, :r, ?p] :- {body} .\n[?x, :r, ?y] :- [?x, :m, ?y] ."))


def test_a_bind_head_follows_a_change_of_datatype() -> None:
    """4 (integer) replaced by 4.0 (double): the halved value is a different term, not a stale one."""
    engine = RuleEngine(
        parse_rules(f"PREFIX : <{EX}>\n[?x, :half, ?h] :- [?x, :v, ?v], BIND(?v / 2 AS ?h) .")
    )
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
        store = Store(tmp)
        old = Triple(node(0), NamedNode(EX + "v"), Literal(4))
        new = Triple(node(0), NamedNode(EX + "v"), Literal(4.0))
        store.add(Quad(*old, BASE))
        engine.materialize(store, GRAPHS)
        store.remove(Quad(*old, BASE))
        store.add(Quad(*new, BASE))
        engine.update(store, GRAPHS, [new], [old])
        assert {q.triple for q in store.quads_for_pattern(None, None, None, INF)} == full(engine, store)
        del store


def test_blank_nodes_in_changed_facts_are_handled_unseeded() -> None:
    from pyoxigraph import BlankNode

    engine = RuleEngine(parse_rules(REACH))
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
        store = Store(tmp)
        b = BlankNode()
        first, second = Triple(node(0), NamedNode(EX + "edge"), b), Triple(b, NamedNode(EX + "edge"), node(1))
        for fact in (first, second):
            store.add(Quad(*fact, BASE))
            engine.update(store, GRAPHS, [fact], [])
            assert {q.triple for q in store.quads_for_pattern(None, None, None, INF)} == full(engine, store)
        store.remove(Quad(*first, BASE))
        engine.update(store, GRAPHS, [], [first])
        assert {q.triple for q in store.quads_for_pattern(None, None, None, INF)} == full(engine, store)
        del store
