"""The memories list from the graph's listing equals the SPARQL query it replaced, after random runs
of events (remember, revise, supersede, restore, forget, the clock), with the listing built once and
kept current by the commits, and after writes it does not follow (a re-materialisation, a reopen)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from engram.projections.knowledge import load_knowledge
from engram.projections.read import PREFIXES, list_memory_ids
from engram.projections.tenant_graph import TenantGraph
from engram.projections.terms import ASSERTED, INFERRED, memory_iri
from engram.projections.visibility import Principal, may_see
from engram.schemas import vocabulary as v
from engram.schemas.events import Position
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyoxigraph import Literal, NamedNode, Store, Variable

from tests.factories import event, remembered

KNOWLEDGE = load_knowledge()
IDS = [f"m{i}" for i in range(6)]
KINDS = ["fact", "preference", "objective"]
CLASSES = ["Memory", "BudgetConstraintMemory", "ActiveMemory", "PerformanceTargetMemory"]
PRINCIPALS = [
    None,
    Principal("op", frozenset(), role="operator"),
    Principal("sam", frozenset({"growth"})),
    Principal("kim", frozenset({"brand"})),
]
# a few recording times, so that ties (ordered by id) and out-of-order times both happen
TIMES = [1_700_000_000_000, 1_700_000_000_500, 1_700_000_001_000, 1_700_000_000_250]


def reference_ids(graph: TenantGraph, **filters: Any) -> list[str]:
    """The memories route's query before the listing: every filter in SPARQL, sorted by the store."""
    kind, scope, memory_class, active, min_importance, seen_by = (
        filters.get(k) for k in ("kind", "scope", "memory_class", "active", "min_importance", "seen_by")
    )
    patterns = ["?m e:memoryId ?id ; e:recordedAt ?at ."]
    sight = seen_by is not None and not seen_by.sees_everything
    if sight:
        patterns.append("?m e:scope ?vscope . OPTIONAL { ?m e:stakeholderUser ?vuser }")
    subs: dict[Variable, Any] = {}
    if kind is not None:
        patterns.append("?m e:kind ?kind .")
        subs[Variable("kind")] = Literal(kind)
    if scope is not None:
        patterns.append("?m e:scope ?scope .")
        subs[Variable("scope")] = Literal(scope)
    if min_importance is not None:
        patterns.append("?m e:importance ?importance . FILTER(?importance >= ?least)")
        subs[Variable("least")] = Literal(min_importance)
    if memory_class is not None:
        patterns.append("?m a ?cls .")
        subs[Variable("cls")] = NamedNode(v.class_iri(memory_class))
    if active is True:
        patterns.append("?m a e:ActiveMemory .")
    elif active is False:
        patterns.append("FILTER NOT EXISTS { ?m a e:ActiveMemory }")
    projected = " ".join(["?id", *(f"?{var.value}" for var in subs), *(["?vscope ?vuser"] if sight else [])])
    query = f"SELECT {projected} WHERE {{ {' '.join(patterns)} }} ORDER BY DESC(?at) ?id"
    rows = graph.store.query(query, prefixes=PREFIXES, substitutions=subs, default_graph=[ASSERTED, INFERRED])
    out = []
    for row in rows:  # type: ignore[union-attr]
        if sight:
            assert seen_by is not None
            memory_id = row["id"].value
            teams = frozenset(
                q.object.value
                for q in graph.store.quads_for_pattern(
                    memory_iri(memory_id), v_e("stakeholderTeam"), None, ASSERTED
                )
            )
            scope_held, user = row["vscope"].value, row["vuser"]
            teams = teams if scope_held == v.Scope.TEAM else frozenset()
            if not may_see(seen_by, scope_held, user.value if user is not None else None, teams):
                continue
        out.append(row["id"].value)
    return out


def v_e(name: str) -> NamedNode:
    return NamedNode(v.ENGRAM + name)


holders = st.sampled_from(
    [
        {"scope": "company"},
        {"scope": "team", "stakeholders": {"user_id": None, "team_ids": ["growth"]}},
        {"scope": "team", "stakeholders": {"user_id": None, "team_ids": ["growth", "brand"]}},
        {"scope": "user", "stakeholders": {"user_id": "sam", "team_ids": []}},
        {"scope": "user", "stakeholders": {"user_id": "kim", "team_ids": []}},
    ]
)
memory_ids = st.sampled_from(IDS)
importances = st.integers(min_value=1, max_value=5)
steps = st.lists(
    st.one_of(
        st.tuples(
            st.just("remember"), memory_ids, st.sampled_from(KINDS), holders, st.booleans(), importances
        ),
        st.tuples(st.just("revise"), memory_ids, st.sampled_from(KINDS)),
        st.tuples(st.just("revise_importance"), memory_ids, importances),
        st.tuples(st.just("supersede"), memory_ids, memory_ids).filter(lambda s: s[1] != s[2]),
        st.tuples(st.just("restore"), memory_ids),
        st.tuples(st.just("forget"), memory_ids),
        st.tuples(st.just("clock"), st.sampled_from(["2026-01-01T00:00:00Z", "2028-01-01T00:00:00Z"])),
        st.tuples(st.just("list")),
        st.tuples(st.just("rematerialise")),
    ),
    max_size=25,
)


def as_event(step: tuple[Any, ...]) -> tuple[str, dict[str, Any]] | None:
    match step:
        case ("remember", mid, kind, held, expiring, importance):
            fields: dict[str, Any] = {"kind": kind, "importance": importance, **held}
            if kind == "objective":
                fields["memory_class"] = "PerformanceTargetMemory"
                fields["properties"] = {"metric": "roas", "goal": 3.0}
            if expiring:
                fields["expires_at"] = "2027-01-01T00:00:00Z"
            return "MemoryRemembered", remembered(mid, **fields)
        case ("revise", mid, kind):
            return "MemoryRevised", {"memory_id": mid, "changes": {"kind": kind}}
        case ("revise_importance", mid, importance):
            return "MemoryRevised", {"memory_id": mid, "changes": {"importance": importance}}
        case ("supersede", old, new):
            return "MemorySuperseded", {"memory_id": old, "superseded_by": new}
        case ("restore", mid):
            return "MemoryRestored", {"memory_id": mid}
        case ("forget", mid):
            return "MemoryForgotten", {"memory_id": mid, "reason": "asked"}
        case ("clock", now):
            return "ClockTicked", {"now": now}
    return None


def assert_lists_equal(graph: TenantGraph) -> None:
    for who in PRINCIPALS:
        assert list_memory_ids(graph, seen_by=who) == reference_ids(graph, seen_by=who)
        for kind in KINDS:
            assert list_memory_ids(graph, kind=kind, seen_by=who) == reference_ids(
                graph, kind=kind, seen_by=who
            )
        for scope in ("company", "team", "user"):
            assert list_memory_ids(graph, scope=scope, seen_by=who) == reference_ids(
                graph, scope=scope, seen_by=who
            )
        for cls in CLASSES:
            assert list_memory_ids(graph, memory_class=cls, seen_by=who) == reference_ids(
                graph, memory_class=cls, seen_by=who
            )
        for least in range(1, 6):
            got = list_memory_ids(graph, min_importance=least, seen_by=who)
            assert got == reference_ids(graph, min_importance=least, seen_by=who)
        for active in (True, False):
            got = list_memory_ids(graph, active=active, kind="fact", seen_by=who)
            assert got == reference_ids(graph, active=active, kind="fact", seen_by=who)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps, st.lists(st.sampled_from(TIMES), min_size=25, max_size=25))
def test_the_listing_kept_by_commits_equals_the_query_after_every_step(
    run: list[tuple[Any, ...]], times: list[int]
) -> None:
    graph = TenantGraph(Path(tempfile.mkdtemp()) / "graph", KNOWLEDGE, memory=Store())
    graph.listing()  # built on the empty store: from here on, the commits keep it
    for offset, step in enumerate(run):
        if step[0] == "list":
            assert_lists_equal(graph)
        elif step[0] == "rematerialise":
            graph.rematerialize()
        elif (found := as_event(step)) is not None:
            graph.apply(event(found[0], found[1], tenant="t"), Position(0, offset, times[offset]))
    assert_lists_equal(graph)


def test_a_reopened_store_lists_as_before(tmp_path: Path) -> None:
    graph = TenantGraph(tmp_path / "graph", KNOWLEDGE)
    for offset, (mid, held) in enumerate(
        [
            ("a", {"scope": "company"}),
            ("b", {"scope": "user", "stakeholders": {"user_id": "sam", "team_ids": []}}),
        ]
    ):
        graph.apply(
            event("MemoryRemembered", remembered(mid, **held), tenant="t"), Position(0, offset, TIMES[offset])
        )
    before = list_memory_ids(graph), list_memory_ids(graph, seen_by=PRINCIPALS[3])
    assert before == (["b", "a"], ["a"])
    graph.reopen(lambda: None)
    assert (list_memory_ids(graph), list_memory_ids(graph, seen_by=PRINCIPALS[3])) == before
    graph.flush()
    del graph
    import gc

    gc.collect()
    again = TenantGraph(tmp_path / "graph", KNOWLEDGE)
    assert (list_memory_ids(again), list_memory_ids(again, seen_by=PRINCIPALS[3])) == before
