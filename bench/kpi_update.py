"""Cost of one KPI update (event + incremental rule maintenance) as a tenant grows, side by side
with re-materialising every inferred fact from scratch, in one run.

Each tenant holds N memories: a fixed core the KPI touches (10 performance targets over 5
metrics, 5 budget caps, 200 company-scoped memories competing for the live context) and N-215
others (user- and team-scoped preferences, facts, brand voice, hiring criteria) that it does not.
Asserted facts are bulk-loaded through the same projection code the worker uses, materialised
once, then KPI updates are applied one by one through ``TenantGraph.apply``: the whole event
(plan, commit, rules) and, apart, the rules' share of it; then ``--sustained`` more of them, to
show whether an update's cost stays flat as one series is replaced in place thousands of times
(``--no-tombstone-flush``: without the flush that bounds RocksDB's tombstones, for the figure
before it); then, for the core, KPI records from their bytes through the Python event path and the
compiled one (``streams.live_path``) side by side, in runs of 1 and of 100. Every size runs once
per rule engine
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

from engram.projections import tenant_graph
from engram.projections.batch import LiveGroup
from engram.projections.knowledge import load_knowledge
from engram.projections.plan import no_facts, plan
from engram.projections.rules.core import CoreReasoner, engine_for
from engram.projections.tenant_graph import Step, TenantGraph
from engram.projections.terms import ASSERTED, GRAPHS
from engram.schemas.events import Position, event_from_json
from engram.streams import codec, live_path
from engram.streams.pipeline import read_record

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


def measure(n: int, updates: int, full_runs: int, engine: str, sustained: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
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
        later = []
        for i in range(sustained):
            offset += 1
            ev = event_from_json(kpi_event(3.0 + (updates + i) / 100_000))
            t0 = time.perf_counter()
            graph.apply(ev, Position(0, offset, 1))
            if graph.tombstones_due():  # as the projector does between batches (in a thread)
                graph.flush()
            later.append(time.perf_counter() - t0)
        from_bytes = records_side_by_side(graph, offset, sustained) if engine == "core" else {}
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
        **(
            {
                "sustained_updates": sustained,
                "sustained_ms_median_first_500": round(statistics.median(later[:500]) * 1000, 3),
                "sustained_ms_median_last_500": round(statistics.median(later[-500:]) * 1000, 3),
                "sustained_ms_mean_with_flushes": round(statistics.fmean(later) * 1000, 3),
            }
            if later
            else {}
        ),
        **from_bytes,
        "working_set": working_set,
        "working_set_bytes_per_memory": round(working_set["bytes_allocated"] / n) if working_set else None,
        "full_rematerialisation_ms": round(statistics.median(full) * 1000, 1),
        "full_over_incremental": round(statistics.median(full) / med, 1),
        "target_statuses_seen": sorted(statuses),
    }


def _no_fallback(k: int) -> Step:
    raise AssertionError("the core declined a run of fresh KPI records")


def records_side_by_side(graph: TenantGraph, offset: int, sustained: int) -> dict[str, Any]:
    """KPI records from their bytes, as the projector takes them, through the Python path (decode,
    unseal, validate, ``TenantGraph.plan``) and the compiled one (``streams.live_path``), runs of 1
    and of 100 records alternating on the same graph, then committed: ms per record, median."""
    out: dict[str, Any] = {}
    n = 0
    for size, runs in ((1, 400), (100, 20)):
        took: dict[str, list[float]] = {"python": [], "core": []}
        for _ in range(runs):
            for path in took:
                values, positions = [], []
                for _ in range(size):
                    offset, n = offset + 1, n + 1
                    values.append(codec.encode(event_from_json(kpi_event(4.0 + (sustained + n) / 100_000))))
                    positions.append(Position(0, offset, 1))
                t0 = time.perf_counter()
                if path == "core":  # as the projector has it planned: one group, in TenantGraph.plan
                    run = live_path.decode("bench", values)
                    assert run is not None, "a run of KPI records is the core's"
                    group = LiveGroup(run, positions, fallback=_no_fallback)
                    planned = graph.plan([Step(p, live=(group, k)) for k, p in enumerate(positions)])
                    assert group.outcomes is not None, "and the core plans it"
                else:
                    planned = graph.plan(
                        [Step(p, read_record(v, None)) for v, p in zip(values, positions, strict=True)]
                    )
                graph.commit_planned(planned)
                if graph.tombstones_due():
                    graph.flush()
                took[path].append((time.perf_counter() - t0) / size)
                assert all(o.status.value == "applied" for o in planned.outcomes)
        for path, times in took.items():
            out[f"from_bytes_runs_of_{size}_{path}_ms_median"] = round(statistics.median(times) * 1000, 3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--updates", type=int, default=60)
    ap.add_argument("--full-runs", type=int, default=1)
    ap.add_argument("--engines", default="reference,core", help="rule engines side by side")
    ap.add_argument("--sustained", type=int, default=3000, help="updates after the first, in a row")
    ap.add_argument("--no-tombstone-flush", action="store_true", help="the store's own flushes only")
    args = ap.parse_args()
    if args.no_tombstone_flush:
        tenant_graph.TOMBSTONES_PER_FLUSH = 1 << 62
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    rows = [
        measure(int(n), args.updates, args.full_runs, e, args.sustained)
        for n in args.sizes.split(",")
        for e in engines
    ]
    for engine in engines:
        mine = [row for row in rows if row["engine"] == engine]
        base = mine[0]["kpi_update_ms_median"]
        for row in mine:
            row["per_event_vs_smallest"] = round(row["kpi_update_ms_median"] / base, 2)
    flush = "off" if args.no_tombstone_flush else tenant_graph.TOMBSTONES_PER_FLUSH
    print(json.dumps({"benchmark": "kpi_update", "tombstone_flush": flush, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
