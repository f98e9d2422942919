"""The compiled core (engram._core) against the Python engine on the same random streams: after
every batch both have inferred the same facts, the core's live state equals the core from scratch
and the Python engine from scratch, and every fact is explained alike (retractions, supersedes,
forgets, proposals, clock ticks, KPI revisions and late periods all come from the generators)."""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from engram.projections.knowledge import DEFAULT_ONTOLOGY_DIR, DEFAULT_RULES_DIR, Knowledge, load_knowledge
from engram.projections.rules.core import CoreEngine, Unsupported, engine_for, program_data
from engram.projections.rules.engine import RuleEngine
from engram.projections.rules.syntax import parse_rules
from engram.projections.tenant_graph import TenantGraph
from engram.projections.terms import GRAPHS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyoxigraph import Store

from tests.projections.rules.test_differential import batches, explained
from tests.projections.rules.test_engine import EX, INF, REACH, change, full, seeded, write
from tests.projections.rules.test_engine import GRAPHS as ENGINE_GRAPHS
from tests.projections.rules.test_engine import OPS as REACH_OPS
from tests.projections.rules.test_incremental import OPS, knowledge_with_cap, remember
from tests.tenant import Tenant, from_scratch


def engines(tmp: Path) -> tuple[Knowledge, Knowledge]:
    knowledge = knowledge_with_cap(tmp, cap=2)
    assert isinstance(knowledge, Knowledge)
    program = knowledge.engine.program
    return (
        dataclasses.replace(knowledge, engine=CoreEngine(program)),
        dataclasses.replace(knowledge, engine=RuleEngine(program)),
    )


def test_the_shipped_program_runs_on_the_core() -> None:
    """Not a vacuous comparison: every shipped rule is the core's (none falls back), the
    subclass closure is its one recursive unit, and RANK and NOT are among its rules."""
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
        core, _ = engines(Path(tmp))
    assert isinstance(core.engine, CoreEngine)
    units = core.engine.compiled.units()
    assert sum(len(rules) for rules, _ in units) == len(core.engine.program.rules)
    recursive = [rules for rules, is_recursive in units if is_recursive]
    assert len(recursive) == 1 and "subclass" in core.engine.program.rules[recursive[0][0]].source
    data = json.loads(program_data(core.engine.program))
    kinds = {next(iter(lit)) for rule in data["rules"] for lit in rule["body"]}
    assert {"atom", "not", "filter", "bind", "rank"} <= kinds


@settings(
    max_examples=int(os.environ.get("ENGRAM_CORE_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    st.lists(remember(), min_size=2, max_size=6, unique_by=lambda op: op[1]["memory_id"]),
    st.lists(OPS, min_size=1, max_size=24),
    st.lists(st.integers(1, 6), min_size=1, max_size=24),
    st.lists(st.booleans(), min_size=1, max_size=8),
)
def test_core_equals_python_engine_after_every_batch(
    setup: list[tuple[str, dict]], ops: list[tuple[str, dict]], sizes: list[int], reopens: list[bool]
) -> None:
    """``reopens``: before which batches the core's kept state is dropped, as a reopen (or an
    eviction) leaves it: its next update builds it again from the store, the batch in it."""
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
        core_knowledge, python_knowledge = engines(Path(tmp))
        core = TenantGraph(Path(tmp) / "core", core_knowledge)
        python = TenantGraph(Path(tmp) / "python", python_knowledge)
        for i, batch in enumerate(batches(setup, ops, sizes)):
            if reopens[i % len(reopens)]:
                core.reasoner = core_knowledge.engine.reasoner()
            core.commit_planned(core.plan(batch))
            python.commit_planned(python.plan(batch))
            where = f"after the batch ending at {batch[-1]}"
            inferred = core.inferred()
            assert inferred == python.inferred(), where
            if core.reasoner.state is not None:  # none yet: dropped, and no update since
                assert {t for t in _state_facts(core)} == inferred, where
            assert inferred == from_scratch(core) == from_scratch(python), where
            for fact in sorted(inferred, key=str):
                assert explained(core_knowledge.engine.explain(core.store, GRAPHS, fact)) == explained(
                    python_knowledge.engine.explain(python.store, GRAPHS, fact)
                ), f"{where}: {fact}"
        del core, python


def _state_facts(graph: TenantGraph) -> set:
    """The inferred facts the core's kept state holds (not only what it wrote to the store)."""
    from engram.projections.rules.core import _triple

    return {_triple(f) for f in graph.reasoner.state.inferred()}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(REACH_OPS)
def test_core_equals_python_engine_on_recursion_negation_aggregates_and_rank(
    ops: list[tuple[bool, int, int, str]],
) -> None:
    """A program of every construct (tests/projections/rules/test_engine.py's, plus a COUNT(*)):
    a recursive closure, NOT of it, NOT EXISTS, an AGGREGATE feeding a RANK whose limit changes,
    a RANK head asserted and retracted; after every change the core's inferred facts are the
    Python engine's, and its own from scratch."""
    program = parse_rules(
        REACH + "[:all, :edges, ?n] :- AGGREGATE([?x, :edge, ?y] ON BIND COUNT(*) AS ?n) .\n"
    )
    core, python = CoreEngine(program), RuleEngine(program)
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
        stores = {"core": seeded(Store(f"{tmp}/core")), "python": seeded(Store(f"{tmp}/python"))}
        reasoners = {"core": core.reasoner(), "python": python.reasoner()}
        for name, store in stores.items():
            reasoners[name].materialize(store, ENGINE_GRAPHS)
        for add, a, b, kind in ops:
            added, removed = change(stores["core"], add, a, b, kind)
            for name, store in stores.items():
                write(store, added, removed)
                reasoners[name].update(store, ENGINE_GRAPHS, added, removed)
            where = f"after {kind} {'+' if add else '-'}{a}->{b}"
            mine = {q.triple for q in stores["core"].quads_for_pattern(None, None, None, INF)}
            theirs = {q.triple for q in stores["python"].quads_for_pattern(None, None, None, INF)}
            assert mine == theirs, where
            assert mine == full(core, stores["core"]), where  # type: ignore[arg-type]
        assert any(
            q.predicate.value == EX + "edges" for q in stores["core"].quads_for_pattern(None, None, None, INF)
        )
        del stores, reasoners, store  # every RocksDB handle closed before the directory goes


def test_an_aggregate_over_nothing_without_groups_is_one_row() -> None:
    """COUNT(*) with no GROUP BY over no solution is 0, as SPARQL's (a row, not none)."""
    program = parse_rules(
        "PREFIX : <https://engram.dev/ns#>\n"
        "[:all, :n, ?n] :- AGGREGATE([?x, :p, ?y] ON BIND COUNT(*) AS ?n) .\n"
    )
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
        store = Store(tmp)
        CoreEngine(program).materialize(store, ENGINE_GRAPHS)
        assert [q.object.value for q in store.quads_for_pattern(None, None, None, INF)] == ["0"]


def test_the_engine_the_settings_name_runs_the_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    """``Settings.rule_engine`` is handed to ``load_knowledge`` by the server and the commands, and
    is what runs; the environment is only the default of a caller without settings."""
    monkeypatch.setenv("ENGRAM_RULE_ENGINE", "reference")
    dirs = (DEFAULT_ONTOLOGY_DIR, DEFAULT_RULES_DIR)
    assert isinstance(load_knowledge(*dirs, "core").engine, CoreEngine)
    assert isinstance(load_knowledge(*dirs, "reference").engine, RuleEngine)


def test_an_expression_the_core_does_not_evaluate_is_refused_by_name() -> None:
    program = parse_rules(
        "PREFIX : <https://engram.dev/ns#>\n"
        '[?m, :tagged, "x"] :- [?m, :label, ?l], FILTER(REGEX(?l, "^a")) .\n',
        "regex.dlog",
    )
    with pytest.raises(Unsupported, match=r"regex\.dlog:2: .*REGEX|regex"):
        CoreEngine(program)
    assert isinstance(engine_for(program), RuleEngine)
    assert isinstance(engine_for(program, "reference"), RuleEngine)


def test_a_graph_reasons_on_any_thread_and_a_reopened_store_is_derived_again(tmp_path: Path) -> None:
    """The core's state is built on one thread and updated on another (a graph may be rebuilt off
    the event loop), and a graph whose state is gone (a reopen) derives it again from the store."""
    knowledge, _ = engines(tmp_path)
    tenant = Tenant(tmp_path / "graph", knowledge)
    target = {"metric": "roas", "goal": 3.0}
    tenant.apply("MemoryRemembered", _memory("t1", "PerformanceTargetMemory", target))
    with ThreadPoolExecutor(1) as pool:
        assert (
            pool.submit(tenant.apply, "KpiObserved", {"metric": "roas", "value": 2.0}).result().value
            == "applied"
        )
    assert tenant.values("t1", "targetStatus") == {"below"}
    tenant.graph.reasoner = knowledge.engine.reasoner()  # as `reopen` leaves it
    assert tenant.apply("KpiObserved", {"metric": "roas", "value": 3.5}).value == "applied"
    assert tenant.values("t1", "targetStatus") == {"met"}
    assert tenant.graph.inferred() == from_scratch(tenant.graph)


def _memory(memory_id: str, cls: str, props: dict) -> dict:
    return {
        "memory_id": memory_id,
        "label": memory_id,
        "content": "c",
        "kind": "objective",
        "scope": "company",
        "stakeholders": {},
        "importance": 5,
        "memory_class": cls,
        "properties": props,
    }
