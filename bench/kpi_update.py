"""Cost of one KPI update (event + incremental rule maintenance) as a tenant grows, side by side
with re-materialising every inferred fact from scratch, in one run.

Each tenant holds N memories: a fixed core the KPI touches (10 performance targets over 5
metrics, 5 budget caps, 200 company-scoped memories competing for the live context) and N-215
others (user- and team-scoped preferences, facts, brand voice, hiring criteria) that it does not.
Asserted facts are bulk-loaded through the same projection code the worker uses, materialised
once, then KPI updates are applied one by one through ``TenantGraph.apply``.
Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from engram.projections.plan import no_facts, plan
from engram.projections.tenant_graph import TenantGraph
from engram.projections.terms import ASSERTED
from engram.schemas.events import Position, event_from_json

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


def build(path: Path, n: int) -> TenantGraph:
    rng = random.Random(n)
    graph = TenantGraph(path)
    quads = []
    for i in range(n):
        ev = event_from_json(remember(i, rng))
        quads += plan(ev, Position(0, i, 1_764_547_200_000 + i), no_facts()).adds
    graph.store.bulk_extend(quads)
    graph.commit(plan(event_from_json(kpi_event(3.0)), Position(0, n, 1), graph), Position(0, n))
    return graph


def kpi_event(value: float) -> dict[str, Any]:
    return {
        "type": "KpiObserved",
        "tenant": "bench",
        "source": "pipeline",
        "actor": ACTOR,
        "payload": {"metric": "roas", "value": value, "period": "2026-12"},
    }


def measure(n: int, updates: int, full_runs: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        graph = build(Path(tmp) / "graph", n)
        load_s = time.perf_counter() - t0
        full = []
        for _ in range(full_runs):
            t0 = time.perf_counter()
            inferred = graph.rematerialize()
            full.append(time.perf_counter() - t0)
        per_event = []
        offset = n
        for i in range(updates):
            offset += 1
            ev = event_from_json(kpi_event(2.5 if i % 2 else 3.5))
            t0 = time.perf_counter()
            graph.apply(ev, Position(0, offset, 1))
            per_event.append(time.perf_counter() - t0)
        asserted = sum(1 for _ in graph.store.quads_for_pattern(None, None, None, ASSERTED))
        statuses = {q.object.value for q in graph.inferred() if q.predicate.value.endswith("targetStatus")}
        del graph
    med = statistics.median(per_event)
    return {
        "memories": n,
        "asserted_facts": asserted,
        "inferred_facts": inferred,
        "load_seconds": round(load_s, 2),
        "kpi_update_ms_median": round(med * 1000, 3),
        "kpi_update_ms_p95": round(sorted(per_event)[int(0.95 * (len(per_event) - 1))] * 1000, 3),
        "full_rematerialisation_ms": round(statistics.median(full) * 1000, 1),
        "full_over_incremental": round(statistics.median(full) / med, 1),
        "target_statuses_seen": sorted(statuses),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--updates", type=int, default=60)
    ap.add_argument("--full-runs", type=int, default=1)
    args = ap.parse_args()
    rows = [measure(int(n), args.updates, args.full_runs) for n in args.sizes.split(",")]
    base = rows[0]["kpi_update_ms_median"]
    for row in rows:
        row["per_event_vs_smallest"] = round(row["kpi_update_ms_median"] / base, 2)
    print(json.dumps({"benchmark": "kpi_update", "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
