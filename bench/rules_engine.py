"""The rule engine's cost per event, in process: the projection of bench/throughput.py's workload
with the rules off, with the reference engine (SPARQL, ``old``), the Python engine (``new``) and the
compiled core (``core``, engram._core), side by side in one run.

No broker and no server: the workload is sealed and encoded as the API would, handed to the
projector's own batches (``handle_batch_with_retries``) in log order, partitions interleaved, into
fresh stores. Each repetition runs every configuration once, in turn, so a noisy neighbour costs
them alike. Reports events/s (wall clock) and events per CPU-second (``time.process_time``), min
and median over the repetitions, and checks that both engines leave every tenant's inferred graph
identical (the core against the Python engine, and the Python engine against the reference).
``--profile ENGINE`` prints cProfile's top functions of one run of that engine instead.
Prints one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import dataclasses
import io
import itertools
import json
import pstats
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from engram.projections import tenant_graph
from engram.projections.knowledge import DEFAULT_RULES_DIR, Knowledge, load_knowledge
from engram.projections.rules.core import CoreEngine
from engram.projections.rules.engine import RuleEngine
from engram.projections.stores import TenantStores
from engram.projections.terms import GRAPHS
from engram.schemas.events import Position, event_from_json
from engram.streams import codec
from engram.streams.keystore import KeyStore
from engram.streams.pipeline import seal as seal_event
from engram.streams.projector import Record, handle_batch_with_retries
from engram.streams.topics import partition_for
from pyoxigraph import Store

from bench.throughput import workload
from tests.projections.rules.reference.engine import RuleEngine as ReferenceEngine

PARTITIONS = 6
CONFIGS = ("off", "old", "new", "core")


def records(n: int, tenants: int, keys: KeyStore) -> list[Record]:
    """The workload as the worker's consumer hands it over: by partition, the partitions interleaved."""
    by_partition: dict[int, list[Record]] = {}
    for line in workload(n, tenants):
        event = seal_event(event_from_json(line), keys)
        partition = partition_for(line["tenant"], PARTITIONS)
        offset = len(by_partition.setdefault(partition, []))
        position = Position(partition, offset, 1_764_547_200_000 + offset)
        by_partition[partition].append(Record(line["tenant"].encode(), codec.encode(event), [], position))
    rounds = itertools.zip_longest(*by_partition.values())
    return [record for round_ in rounds for record in round_ if record is not None]


def knowledge_for(config: str, root: Path) -> Knowledge:
    if config == "off":
        (root / "no-rules").mkdir(parents=True, exist_ok=True)
        (root / "no-rules" / "none.dlog").write_text("# the rules off: no rule at all\n")
        return load_knowledge(rules_dir=root / "no-rules")
    knowledge = load_knowledge(rules_dir=DEFAULT_RULES_DIR)
    engine = {"new": RuleEngine, "old": ReferenceEngine, "core": CoreEngine}[config]
    return dataclasses.replace(knowledge, engine=engine(knowledge.engine.program))


def project(
    config: str, recs: list[Record], root: Path, keys: KeyStore, batch: int, profile: cProfile.Profile | None
) -> tuple[float, float, dict[str, str]]:
    """One run into fresh stores: (wall seconds, CPU seconds, each tenant's inferred graph)."""
    stores = TenantStores(
        root / f"{config}-{time.monotonic_ns()}", knowledge=knowledge_for(config, root), keys=keys
    )

    async def sink(*_: Any) -> None:
        raise AssertionError("the bench's workload is valid: nothing may be dead-lettered")

    async def run() -> None:
        for start in range(0, len(recs), batch):
            await handle_batch_with_retries(recs[start : start + batch], stores, sink, partitions=PARTITIONS)

    try:
        wall, cpu = time.perf_counter(), time.process_time()
        if profile is not None:
            profile.enable()
        asyncio.run(run())
        if profile is not None:
            profile.disable()
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        inferred = {}
        for tenant in sorted({r.key.decode() for r in recs if r.key}):
            graph = stores.get(tenant)
            lines = sorted(
                str(q.triple) for q in graph.store.quads_for_pattern(None, None, None, GRAPHS.inferred)
            )
            inferred[tenant] = "\n".join(lines)
        return wall, cpu, inferred
    finally:
        stores.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=10_000)
    ap.add_argument("--tenants", type=int, default=100)
    ap.add_argument("--batch", type=int, default=2000, help="records per projector batch")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--engines", default="off,new,core", help="of off (no rules), old (reference), new (Python), core"
    )
    ap.add_argument("--profile", choices=CONFIGS, help="profile one run of this configuration instead")
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument(
        "--store", choices=("disk", "memory"), default="disk", help="memory: each tenant an in-memory Store()"
    )
    args = ap.parse_args()
    if args.store == "memory":  # the working set in memory, as issue 27 item 2 plans it
        tenant_graph.Store = lambda *_: Store()  # type: ignore[assignment,misc]
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
        root = Path(tmp)
        keys = KeyStore(root / "keys")
        recs = records(args.events, args.tenants, keys)
        if args.profile:
            profile = cProfile.Profile()
            project(args.profile, recs, root, keys, args.batch, profile)
            out = io.StringIO()
            pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(args.top)
            print(out.getvalue())
            return
        configs = args.engines.split(",")
        runs: dict[str, list[tuple[float, float]]] = {c: [] for c in configs}
        graphs: dict[str, dict[str, str]] = {}
        for _ in range(args.repeat):
            for config in configs:
                wall, cpu, inferred = project(config, recs, root, keys, args.batch, None)
                runs[config].append((wall, cpu))
                graphs[config] = inferred
        report: dict[str, Any] = {
            "events": args.events,
            "tenants": args.tenants,
            "batch": args.batch,
            "store": args.store,
        }
        for config, times in runs.items():
            rates = [args.events / wall for wall, _ in times]
            per_cpu = [args.events / cpu for _, cpu in times]
            report[config] = {
                "events_per_s": {"min": round(min(rates)), "median": round(statistics.median(rates))},
                "events_per_cpu_s": {"min": round(min(per_cpu)), "median": round(statistics.median(per_cpu))},
            }
        if "old" in graphs and "new" in graphs:
            report["inferred_identical"] = graphs["old"] == graphs["new"]
        if "core" in graphs and "new" in graphs:
            report["inferred_identical_core_and_python"] = graphs["core"] == graphs["new"]
        if any(c in graphs for c in ("new", "core", "old")):
            some = next(graphs[c] for c in ("new", "core", "old") if c in graphs)
            report["inferred_facts"] = sum(text.count("\n") + bool(text) for text in some.values())
        print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
