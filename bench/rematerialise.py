"""A tenant rebuilt from scratch, and what the live-context rank costs as its candidates grow.

One run, one machine: starts (or reuses) the local broker, then
  1. produces one tenant's N memories (company scope, one in ten High or Critical: a live-context
     candidate) and replays them from offset zero (``streams.replay.replay_tenant``, the live
     agent's batches) into a fresh store: events/s of the rebuild;
  2. recomputes every inferred fact of that store from its asserted ones
     (``TenantGraph.rematerialize``, what a change of rules or ontology runs);
  3. on the rebuilt store, the cost of one more event (ms, median of ``--probes``): a new
     candidate (it enters the top), a new memory that is no candidate, and the top memory
     superseded (the whole ranking asked again); and the rank's own queries: the whole ranking
     and the merge of a new candidate into the top;
  4. side by side at a few sizes, one event at a time: a new candidate under the shipped rule
     (RANK … LIMIT: only the top is ranked) and under the COUNT aggregate it replaced (every
     candidate ranked, each by counting those above it).
With ``--stores disk,memory --runs 3`` step 1 alone is run again per store, interleaved, each into
a fresh store: events/s wall and per CPU-second (``time.process_time``: the replay runs in this
process), min and median; the store's directory (disk), its snapshot and the RSS a fresh process
takes to load it (memory), and the Kafka log's bytes per event (``--kafka-logs``, the broker's
log directory). ``--replay-only`` skips steps 2 to 4; ``--profile`` prints each replay's cProfile
(top 15 by own and by cumulative time) to stderr (its rates then include the profiler's cost).
Prints one JSON object; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import logging
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from engram.projections.knowledge import DEFAULT_ONTOLOGY_DIR, DEFAULT_RULES_DIR, load_knowledge
from engram.projections.rules.program import Rank
from engram.projections.stores import TenantStores
from engram.projections.tenant_graph import TenantGraph
from engram.projections.terms import GRAPHS
from engram.schemas.events import Position, event_from_json
from engram.streams import kafka_local
from engram.streams.keystore import KeyStore, ReadOnlyKeys
from engram.streams.objects import LocalObjects
from engram.streams.pipeline import seal as seal_event
from engram.streams.replay import replay_tenant
from engram.streams.snapshots import Snapshots
from engram.streams.topics import ensure_topics

from bench.throughput import produce_all
from engram.settings import load_settings
from tests.harness import isolated_settings

ACTOR = {"id": "bench", "role": "operator"}
TENANT = "rebuild"
# The rank this bench compares against: every candidate ranked by a COUNT of those above it.
COUNT_RANK = """#@explain "rank {rank} among live candidates (importance, then recency)"
[?m, :liveRank, ?rank] :- AGGREGATE([?m, a, :LiveCandidate], [?n, a, :LiveCandidate],
    [?m, :importance, ?im], [?n, :importance, ?in], [?m, :recordedAt, ?tm], [?n, :recordedAt, ?tn],
    FILTER(?in > ?im || (?in = ?im && (?tn > ?tm || (?tn = ?tm && STR(?n) <= STR(?m)))))
    ON ?m BIND COUNT(?n) AS ?rank) .
"""

log = logging.getLogger("bench.rematerialise")


def remembered(memory_id: str, importance: int, tenant: str = TENANT) -> dict[str, Any]:
    payload = {
        "memory_id": memory_id,
        "label": f"note {memory_id}",
        "content": f"what {memory_id} says " * 6,
        "kind": "fact",
        "scope": "company",
        "importance": importance,
    }
    return {"type": "MemoryRemembered", "payload": payload, "tenant": tenant, "source": "pipeline",
            "actor": ACTOR, "event_id": str(uuid.uuid4())}  # fmt: skip


def workload(n: int) -> list[dict[str, Any]]:
    """``n`` memories of one tenant; every tenth is High or Critical (a live-context candidate)."""
    return [remembered(f"m{i}", (4 + i // 10 % 2) if i % 10 == 0 else 1 + i % 3) for i in range(n)]


async def produce(settings, events: list[dict[str, Any]]) -> None:
    keys = KeyStore(settings.key_store_dir)  # sealed as the API and `engram produce` seal them
    for start in range(0, len(events), 10_000):
        chunk = events[start : start + 10_000]
        await produce_all(settings, [seal_event(event_from_json(e), keys) for e in chunk])
        log.info("produced %d/%d", start + len(chunk), len(events))


class Probe:
    """Events applied to a graph after its log's end, one at a time, timed."""

    def __init__(self, graph: TenantGraph, partition: int, offset: int) -> None:
        self.graph, self.partition, self.offset = graph, partition, offset
        self.clock_ms = int(time.time() * 1000)

    def apply(self, raw: dict[str, Any]) -> float:
        self.offset += 1
        self.clock_ms += 1000
        ev = event_from_json(raw)
        started = time.perf_counter()
        outcome = self.graph.apply(ev, Position(self.partition, self.offset, self.clock_ms))
        elapsed = (time.perf_counter() - started) * 1000
        assert outcome.status.name == "APPLIED", outcome
        return elapsed


def top_memory(graph: TenantGraph) -> str:
    rows = graph.store.query(
        "SELECT ?m WHERE { ?m <https://engram.dev/ns#liveRank> 1 }", default_graph=GRAPHS.current
    )
    return next(iter(rows))["m"].value.rsplit(":", 1)[-1]


def rank_costs(graph: TenantGraph, probes: int) -> dict[str, Any]:
    """One more event of each kind, and the rank's own queries, on the rebuilt store."""
    engine = graph.knowledge.engine
    rule = next(r for r in engine.program.rules if isinstance(r.body[0], Rank))
    rank = rule.body[0]
    assert isinstance(rank, Rank)
    store, current = graph.store, GRAPHS.current
    whole, merge = [], []
    for _ in range(probes):
        t = time.perf_counter()
        top = engine._top(store, rule, rank, current, None)
        whole.append((time.perf_counter() - t) * 1000)
        items = {fact.subject for fact in top}
        t = time.perf_counter()
        engine._top(store, rule, rank, current, None, items=items | {next(iter(items))})
        merge.append((time.perf_counter() - t) * 1000)
    candidates = next(iter(store.query(
        "SELECT (COUNT(?m) AS ?n) WHERE { ?m a <https://engram.dev/ns#LiveCandidate> }", default_graph=current
    )))["n"].value  # fmt: skip
    probe = Probe(graph, 0, 10**9)
    new_candidate = [probe.apply(remembered(f"c{i}", 5)) for i in range(probes)]
    non_candidate = [probe.apply(remembered(f"n{i}", 2)) for i in range(probes)]
    superseded = []
    for i in range(probes):
        probe.apply(remembered(f"s{i}", 1))
        old = top_memory(graph)
        body = {"memory_id": old, "superseded_by": f"s{i}"}
        raw = {"type": "MemorySuperseded", "payload": body, "tenant": TENANT, "source": "pipeline",
               "actor": ACTOR, "event_id": str(uuid.uuid4())}  # fmt: skip
        superseded.append(probe.apply(raw))
    return {
        "live_candidates": int(candidates),
        "ms_per_event_median": {
            "new_candidate_enters_top": round(statistics.median(new_candidate), 2),
            "new_memory_not_a_candidate": round(statistics.median(non_candidate), 2),
            "top_member_superseded_whole_rerank": round(statistics.median(superseded), 2),
        },
        "rank_query_ms_median": {
            "whole_ranking": round(statistics.median(whole), 2),
            "merge_into_top": round(statistics.median(merge), 2),
        },
    }


def side_by_side(root: Path, sizes: list[int]) -> dict[str, Any]:
    """ms for one new candidate at each size, one event at a time, the shipped rule and the COUNT."""
    count_rules = root / "count-rules"
    shutil.copytree(DEFAULT_RULES_DIR, count_rules)
    live = count_rules / "live_context.dlog"
    text = live.read_text()
    start = text.index('#@explain "rank {rank}')
    end = text.index('#@explain "in the live context')
    live.write_text(text[:start] + COUNT_RANK + "\n" + text[end:])
    out: dict[str, Any] = {}
    for name, rules in (("rank_limit", DEFAULT_RULES_DIR), ("count_aggregate", count_rules)):
        graph = TenantGraph(root / name, load_knowledge(DEFAULT_ONTOLOGY_DIR, rules))
        probe = Probe(graph, 0, -1)
        per_size = {}
        for size in sizes:
            while probe.offset + 1 < size - 3:
                probe.apply(remembered(f"m{probe.offset + 1}", 4))
            times = [probe.apply(remembered(f"m{probe.offset + 1}", 4)) for _ in range(3)]
            per_size[str(size)] = round(statistics.median(times), 1)
            log.info("%s: %d candidates, %.1f ms per new one", name, size, per_size[str(size)])
        out[name] = per_size
        del graph, probe
    return {"ms_per_new_candidate_by_candidates": out}


def du(path: Path) -> int:
    """Bytes of the files under ``path``."""
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def replay_once(settings, root: Path, mode: str, profile: bool = False) -> dict[str, Any]:
    """One replay of the tenant into fresh stores of ``mode`` (``ENGRAM_STORE``): wall and CPU
    seconds, and what the rebuilt tenant takes (its directory on disk; in memory its snapshot and
    the RSS a fresh process takes to load that)."""
    knowledge = load_knowledge(settings.ontology_dir.resolve(), settings.rules_dir.resolve())
    keys = ReadOnlyKeys(KeyStore(settings.key_store_dir))
    stores = TenantStores(root / "tenants", knowledge=knowledge, keys=keys, memory=mode == "memory")
    profiler = cProfile.Profile() if profile else None
    wall, cpu = time.perf_counter(), time.process_time()
    if profiler is not None:
        profiler.enable()
    graph = asyncio.run(replay_tenant(settings, TENANT, root, stores=stores))
    if profiler is not None:
        profiler.disable()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    if profiler is not None:  # where the replay's time goes: to stderr, beside the progress
        for order in ("tottime", "cumulative"):
            pstats.Stats(profiler, stream=sys.stderr).sort_stats(order).print_stats(15)
    assert graph is not None
    out: dict[str, Any] = {"seconds": round(wall, 1), "cpu_seconds": round(cpu, 1), "quads": len(graph.store)}
    if mode == "memory":
        snaps = Snapshots(LocalObjects(root / "objects"))
        started = time.process_time()
        snap = snaps.take(TENANT, graph)
        out["snapshot_bytes"], out["snapshot_cpu_s"] = snap.bytes, round(time.process_time() - started, 2)
        code = f"from bench.memstore import load_rss; load_rss({str(root / 'objects')!r}, {TENANT!r})"
        child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        out["loaded_in_a_fresh_process"] = json.loads(child.stdout)
    else:
        out["store_bytes"] = du(stores.store_path(TENANT))
    del graph
    stores.close()
    shutil.rmtree(root, ignore_errors=True)
    return out


def replays(settings, root: Path, n: int, modes: list[str], runs: int, profile: bool) -> dict[str, Any]:
    """``runs`` replays per store mode, the modes interleaved: min / median of each rate."""
    per_mode: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    for run in range(runs):
        for mode in modes:
            row = replay_once(settings, root / f"replay-{run}-{mode}", mode, profile)
            row["events_per_second"] = round(n / row["seconds"], 1)
            row["events_per_cpu_second"] = round(n / row["cpu_seconds"], 1)
            per_mode[mode].append(row)
            log.info("replay %d %s: %s", run, mode, json.dumps(row))
    out: dict[str, Any] = {}
    for mode, rows in per_mode.items():
        wall = sorted(r["events_per_second"] for r in rows)
        cpu = sorted(r["events_per_cpu_second"] for r in rows)
        out[mode] = {
            "events_per_second": {"min": wall[0], "median": statistics.median(wall)},
            "events_per_cpu_second": {"min": cpu[0], "median": statistics.median(cpu)},
            "runs": rows,
        }
    return out


def log_bytes(logs: Path, topic: str) -> int | None:
    """Bytes of ``topic``'s record batches on the broker (its partitions' ``.log`` segments; the
    index files are preallocated), None if the broker's log directory is not here."""
    dirs = [d for d in logs.glob(f"{topic}-*") if d.name.rsplit("-", 1)[-1].isdigit()]
    return sum(f.stat().st_size for d in dirs for f in d.glob("*.log")) if dirs else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--memories", type=int, default=100_000)
    ap.add_argument("--probes", type=int, default=9, help="events of each kind timed on the rebuilt store")
    ap.add_argument("--sizes", default="50,100,200", help="candidates at which both rank rules are timed")
    ap.add_argument("--stores", default="disk", help="ENGRAM_STORE modes replayed, interleaved: disk,memory")
    ap.add_argument("--runs", type=int, default=1, help="replays of each store mode")
    ap.add_argument("--replay-only", action="store_true", help="skip re-materialising and the rank")
    ap.add_argument("--profile", action="store_true", help="cProfile each replay (top 15 to stderr)")
    ap.add_argument("--kafka-logs", type=Path, help="the broker's log.dirs (default: DATA_DIR/kafka/logs)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s")

    base = load_settings()
    kafka_local.start(base)
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
        settings = isolated_settings(base, Path(tmp) / "data", partitions=12)
        asyncio.run(ensure_topics(settings))
        events = workload(args.memories)
        asyncio.run(produce(settings, events))
        logs = args.kafka_logs or kafka_local.broker_dir(base) / "logs"
        n = args.memories
        result: dict[str, Any] = {"memories": n, "kafka_log_bytes_per_event": None}
        if (size := log_bytes(logs, settings.events_topic)) is not None:
            result["kafka_log_bytes_per_event"] = round(size / n, 1)
        modes = args.stores.split(",")
        result["replay"] = replays(settings, Path(tmp) / "replays", n, modes, args.runs, args.profile)
        if not args.replay_only:
            graph = asyncio.run(replay_tenant(settings, TENANT, Path(tmp) / "replay"))
            assert graph is not None
            t = time.monotonic()
            inferred = graph.rematerialize()
            rematerialize_s = time.monotonic() - t
            result["rematerialize"] = {"seconds": round(rematerialize_s, 1), "inferred_facts": inferred}
            result["rank_on_rebuilt_store"] = rank_costs(graph, args.probes)
            del graph
            result["side_by_side"] = side_by_side(Path(tmp), [int(s) for s in args.sizes.split(",")])
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
