"""Cost of one KPI update (event + incremental rule maintenance) as a tenant grows, side by side
with re-materialising every inferred fact from scratch, in one run.

Each tenant holds N memories: a fixed core the KPI touches (10 performance targets over 5
metrics, 5 budget caps, 200 company-scoped memories competing for the live context) and N-215
others (user- and team-scoped preferences, facts, brand voice, hiring criteria) that it does not.
Asserted facts are bulk-loaded through the same projection code the worker uses, materialised
once, then KPI updates are applied one by one through ``TenantGraph.apply``: the whole event
(plan, commit, rules) and, apart, the rules' share of it. Every size runs once per rule engine
of ``--engines`` (the compiled core, the Python reference) side by side; for the core, the bytes
its working set holds (the facts the rules read, interned, and the derivation counts).
Prints one JSON object.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from engram.projections.knowledge import load_knowledge
from engram.projections.plan import no_facts, plan
from engram.projections.rules.core import CoreReasoner, engine_for
from engram.projections.tenant_graph import TenantGraph
from engram.projections.terms import ASSERTED, GRAPHS
from engram.schemas.events import Position, event_from_json

from engram import _core

ACTOR = {"id": "bench", "role": "pipeline"}
METRICS = ["roas", "cpa", "ctr", "cac", "cpc"]


def remember(i: int, rng: random.Random) -> dict[str, Any]:
    if i < 10:
        payload = {
            "memory_class": "PerformanceTargetMemory",
            "kind": "objective",
            "scope": "company",
            "importance": 5,
            "properties": {"metric": METRICS[i % 5], "goal": 2.0 + i % 3},
        }
    elif i < 15:
        payload = {
            "memory_class": "BudgetConstraintMemory",
            "kind": "objective",
            "scope": "company",
            "importance": 5,
            "properties": {"platform": f"p{i}", "amount": 40_000.0, "currency": "USD", "period": "month"},
        }
    elif i < 215:
        payload = {
            "memory_class": "BrandVoiceMemory",
            "kind": "preference",
            "scope": "company",
            "importance": rng.randint(3, 5),
        }
    else:
        cls = rng.choice(["Memory", "Memory", "BrandVoiceMemory", "HiringCriteriaMemory"])
        scope = rng.choice(["user", "team"])
        payload = {
            "memory_class": cls,
            "kind": rng.choice(["fact", "preference", "context"]),
            "scope": scope,
            "importance": rng.randint(1, 5),
            "stakeholders": {"user_id": f"u{i % 97}"} if scope == "user" else {"team_ids": [f"t{i % 13}"]},
            "properties": {"role": "engineer"} if cls == "HiringCriteriaMemory" else {},
        }
    payload.update(memory_id=f"m{i}", label=f"memory {i}", content=f"content of memory {i}")
    return {
        "type": "MemoryRemembered",
        "tenant": "bench",
        "source": "pipeline",
        "actor": ACTOR,
        "payload": payload,
    }


def build(path: Path, n: int, engine: str) -> tuple[TenantGraph, int | None]:
    """The graph, and for the core the bytes its state holds (its allocator's count around the
    state's build from the store: the facts the rules read, interned, and what they derive)."""
    rng = random.Random(n)
    knowledge = load_knowledge()
    knowledge = dataclasses.replace(knowledge, engine=engine_for(knowledge.engine.program, engine))
    graph = TenantGraph(path, knowledge)
    quads = []
    for i in range(n):
        ev = event_from_json(remember(i, rng))
        quads += plan(ev, Position(0, i, 1_764_547_200_000 + i), no_facts()).adds
    graph.store.bulk_extend(quads)
    graph.commit(plan(event_from_json(kpi_event(3.0)), Position(0, n, 1), graph), Position(0, n))
    if not isinstance(graph.reasoner, CoreReasoner):
        return graph, None
    graph.reasoner = CoreReasoner(graph.knowledge.engine)  # type: ignore[arg-type]
    before = _core.allocated()
    graph.reasoner.update(graph.store, GRAPHS, [], [])  # built from the store, as after a reopen
    return graph, _core.allocated() - before


def kpi_event(value: float) -> dict[str, Any]:
    return {
        "type": "KpiObserved",
        "tenant": "bench",
        "source": "pipeline",
        "actor": ACTOR,
        "payload": {"metric": "roas", "value": value, "period": "2026-12"},
    }


def measure(n: int, updates: int, full_runs: int, engine: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        graph, held = build(Path(tmp) / "graph", n, engine)
        load_s = time.perf_counter() - t0
        full = []
        for _ in range(full_runs):
            t0 = time.perf_counter()
            inferred = graph.rematerialize()
            full.append(time.perf_counter() - t0)
        per_event, rules = [], []
        offset = n
        for i in range(updates):
            offset += 1
            # a value of its own each time: an event's id comes from its content, and the same KPI
            # twice is the same event, skipped (earlier runs of this bench timed mostly those)
            ev = event_from_json(kpi_event((2.5 if i % 2 else 3.5) + i / 10_000))
            reasoner = graph.reasoner
            update = reasoner.update

            def timed(*args: Any, update: Any = update) -> Any:
                t0 = time.perf_counter()
                try:
                    return update(*args)
                finally:
                    rules.append(time.perf_counter() - t0)

            reasoner.update = timed  # type: ignore[method-assign]
            t0 = time.perf_counter()
            outcome = graph.apply(ev, Position(0, offset, 1))
            per_event.append(time.perf_counter() - t0)
            assert outcome.status.value == "applied", outcome
            reasoner.update = update  # type: ignore[method-assign]
        working_set = graph.reasoner.stats() if isinstance(graph.reasoner, CoreReasoner) else None
        if working_set is not None:
            working_set["bytes_allocated"] = held
        asserted = sum(1 for _ in graph.store.quads_for_pattern(None, None, None, ASSERTED))
        statuses = {q.object.value for q in graph.inferred() if q.predicate.value.endswith("targetStatus")}
        del graph
    med = statistics.median(per_event)
    return {
        "engine": engine,
        "memories": n,
        "asserted_facts": asserted,
        "inferred_facts": inferred,
        "load_seconds": round(load_s, 2),
        "kpi_update_ms_median": round(med * 1000, 3),
        "kpi_update_ms_p95": round(sorted(per_event)[int(0.95 * (len(per_event) - 1))] * 1000, 3),
        "rules_ms_median": round(statistics.median(rules) * 1000, 3),
        "rules_ms_p95": round(sorted(rules)[int(0.95 * (len(rules) - 1))] * 1000, 3),
        "working_set": working_set,
        "working_set_bytes_per_memory": round(working_set["bytes_allocated"] / n) if working_set else None,
        "full_rematerialisation_ms": round(statistics.median(full) * 1000, 1),
        "full_over_incremental": round(statistics.median(full) / med, 1),
        "target_statuses_seen": sorted(statuses),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--updates", type=int, default=60)
    ap.add_argument("--full-runs", type=int, default=1)
    ap.add_argument("--engines", default="reference,core", help="rule engines side by side")
    args = ap.parse_args()
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    rows = [measure(int(n), args.updates, args.full_runs, e) for n in args.sizes.split(",") for e in engines]
    for engine in engines:
        mine = [row for row in rows if row["engine"] == engine]
        base = mine[0]["kpi_update_ms_median"]
        for row in mine:
            row["per_event_vs_smallest"] = round(row["kpi_update_ms_median"] / base, 2)
    print(json.dumps({"benchmark": "kpi_update", "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
