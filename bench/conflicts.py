"""Ingest with many memories sharing one label against the same count with unique labels (#27).

A conversation imported one memory per turn, labelled by speaker, gives k memories that all
conflict. The rules now derive one conflict-set membership per memory (linear in k) where they
used to derive every pair (k²). In process, one store per tenant (on disk, as the worker keeps
them), the events applied in batches as the projector takes them. Workloads run interleaved,
``--runs`` times each: same-label and unique-label, and with ``--pairwise`` the same two under the
old pairwise rule (``PAIRWISE``, swapped into a copy of the rule files), so before and after are
measured side by side in one run. Reports min/median wall-clock events/s, events per CPU-second
(``time.process_time``), the inferred facts a tenant ends with, and the median milliseconds of the
reads that list a memory's conflicts (``read_*``, for the sets only: today's readers do not read
stored pairs; run this file with the old code on ``PYTHONPATH`` for those). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from engram.projections.batch import Step
from engram.projections.explain import derived_for_memory
from engram.projections.knowledge import DEFAULT_ONTOLOGY_DIR, DEFAULT_RULES_DIR, Knowledge, load_knowledge
from engram.projections.read import list_memory_ids
from engram.projections.resolve import conflict_sets
from engram.projections.tenant_graph import TenantGraph
from engram.projections.terms import INFERRED
from engram.projections.visibility import everything, inferred_by_name
from engram.schemas.events import Event, Position, event_from_json

ACTOR = {"id": "bench", "role": "operator"}
MEMBERSHIP_START = "# Conflicts as membership"
PAIRWISE = """
#@explain "conflicts with {b}: both active, same {key}, same {scope} scope ({holder})"
[?a, :conflictsWith, ?b] :- [?a, :conflictKey, ?key], [?b, :conflictKey, ?key], [?a, :scope, ?scope],
    [?b, :scope, ?scope], [?a, :stakeholderKey, ?holder], [?b, :stakeholderKey, ?holder],
    [?a, a, :ActiveMemory], [?b, a, :ActiveMemory], FILTER(?a != ?b) .
"""


def pairwise_rules(root: Path) -> Path:
    """A copy of the rule files with the conflict-set rule replaced by the old pairwise one."""
    rules = root / "rules-pairwise"
    shutil.copytree(DEFAULT_RULES_DIR, rules, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    text = (rules / "conflicts.dlog").read_text()
    (rules / "conflicts.dlog").write_text(text[: text.index(MEMBERSHIP_START)] + PAIRWISE)
    return rules


def workload(n: int, tenants: int, *, same_label: bool) -> list[tuple[str, Event]]:
    """``n`` new memories over ``tenants``: one speaker's turns ("Caroline said"), or unique labels."""
    out = []
    for i in range(n):
        tenant = f"c{i % tenants:03d}"
        payload = {
            "memory_id": f"turn-{i}",
            "label": "Caroline said" if same_label else f"Caroline said, turn {i}",
            "content": f"turn {i}: what Caroline said then, " * 4,
            "kind": "fact",
            "scope": "company",
            "importance": 3,
        }
        body = {"type": "MemoryRemembered", "tenant": tenant, "source": "pipeline", "actor": ACTOR}
        out.append((tenant, event_from_json({**body, "payload": payload})))
    return out


def ingest(knowledge: Knowledge, events: list[tuple[str, Event]], root: Path, batch: int) -> dict[str, Any]:
    """Apply the events tenant by tenant in batches; the wall and CPU seconds it took."""
    graphs = {t: TenantGraph(root / t, knowledge) for t in sorted({t for t, _ in events})}
    offsets = dict.fromkeys(graphs, -1)
    pending: dict[str, list[Step]] = {t: [] for t in graphs}
    wall, cpu = time.perf_counter(), time.process_time()
    for tenant, ev in events:
        offsets[tenant] += 1
        pending[tenant].append(Step(Position(0, offsets[tenant], 0), ev))
        if len(pending[tenant]) >= batch:
            graphs[tenant].commit_planned(graphs[tenant].plan(pending[tenant]))
            pending[tenant] = []
    for tenant, steps in pending.items():
        if steps:
            graphs[tenant].commit_planned(graphs[tenant].plan(steps))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    first = graphs[min(graphs)]
    inferred = sum(1 for _ in first.store.quads_for_pattern(None, None, None, INFERRED))
    return {"wall": wall, "cpu": cpu, "inferred_facts_per_tenant": inferred, **reads(first)}


def reads(graph: TenantGraph) -> dict[str, float]:
    """Milliseconds of the reads that list a memory's conflicts: its view's derived facts (with
    one explanation each), its derived facts by name (the context's), and ``resolve``'s sets."""
    memory_id = next(iter(list_memory_ids(graph)))
    out = {}
    for name, read in (
        ("read_memory_derived_ms", lambda: derived_for_memory(graph, memory_id)),
        ("read_inferred_by_name_ms", lambda: inferred_by_name(graph, memory_id)),
        ("read_conflict_sets_ms", lambda: conflict_sets(graph, everything)),
    ):
        start = time.perf_counter()
        read()
        out[name] = (time.perf_counter() - start) * 1000
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1000)
    ap.add_argument("--tenants", type=int, default=4, help="k = events / tenants share a label")
    ap.add_argument("--batch", type=int, default=50)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--pairwise", action="store_true", help="also measure the old pairwise rule")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
        root = Path(tmp)
        engines = {"sets": load_knowledge()}
        if args.pairwise:
            engines["pairwise"] = load_knowledge(DEFAULT_ONTOLOGY_DIR, pairwise_rules(root))
        loads = {
            label: workload(args.events, args.tenants, same_label=label == "same_label")
            for label in ("same_label", "unique_label")
        }
        results: dict[str, list[dict[str, Any]]] = {}
        for run in range(args.runs):  # interleaved: every configuration once per round
            for engine, knowledge in engines.items():
                for label, events in loads.items():
                    name = f"{engine}_{label}"
                    got = ingest(knowledge, events, root / f"{name}-{run}", args.batch)
                    results.setdefault(name, []).append(got)
        report: dict[str, Any] = {
            "events": args.events,
            "tenants": args.tenants,
            "k_sharing_a_label": args.events // args.tenants,
            "batch": args.batch,
            "runs": args.runs,
        }
        for name, runs in results.items():
            rates = sorted(args.events / r["wall"] for r in runs)
            per_cpu = sorted(args.events / r["cpu"] for r in runs)
            report[name] = {
                "events_per_s_min": round(rates[0], 1),
                "events_per_s_median": round(statistics.median(rates), 1),
                "events_per_cpu_s_min": round(per_cpu[0], 1),
                "events_per_cpu_s_median": round(statistics.median(per_cpu), 1),
                "inferred_facts_per_tenant": runs[-1]["inferred_facts_per_tenant"],
                **{
                    key: round(statistics.median(r[key] for r in runs), 1)
                    for key in runs[0]
                    if key.startswith("read_") and name.startswith("sets")  # today's readers read sets
                },
            }
        for engine in engines:
            same, unique = report[f"{engine}_same_label"], report[f"{engine}_unique_label"]
            report[f"{engine}_unique_over_same"] = round(
                unique["events_per_cpu_s_median"] / same["events_per_cpu_s_median"], 2
            )
        print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
