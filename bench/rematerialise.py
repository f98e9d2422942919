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
Prints one JSON object; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from engram.projections.knowledge import DEFAULT_ONTOLOGY_DIR, DEFAULT_RULES_DIR, load_knowledge
from engram.projections.rules.program import Rank
from engram.projections.tenant_graph import TenantGraph
from engram.projections.terms import GRAPHS
from engram.schemas.events import Position, event_from_json
from engram.streams import kafka_local
from engram.streams.keystore import KeyStore
from engram.streams.pipeline import seal as seal_event
from engram.streams.replay import replay_tenant
from engram.streams.topics import ensure_topics

from bench.throughput import produce_all
from engram.harness import isolated_settings
from engram.settings import load_settings

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--memories", type=int, default=100_000)
    ap.add_argument("--probes", type=int, default=9, help="events of each kind timed on the rebuilt store")
    ap.add_argument("--sizes", default="50,100,200", help="candidates at which both rank rules are timed")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s")

    base = load_settings()
    kafka_local.start(base)
    with tempfile.TemporaryDirectory() as tmp:
        settings = isolated_settings(base, Path(tmp) / "data", partitions=12)
        asyncio.run(ensure_topics(settings))
        events = workload(args.memories)
        asyncio.run(produce(settings, events))
        began = time.monotonic()
        graph = asyncio.run(replay_tenant(settings, TENANT, Path(tmp) / "replay"))
        replay_s = time.monotonic() - began
        assert graph is not None
        t = time.monotonic()
        inferred = graph.rematerialize()
        rematerialize_s = time.monotonic() - t
        result: dict[str, Any] = {
            "memories": args.memories,
            "replay": {"seconds": round(replay_s, 1), "events_per_second": round(len(events) / replay_s, 1)},
            "rematerialize": {"seconds": round(rematerialize_s, 1), "inferred_facts": inferred},
            "rank_on_rebuilt_store": rank_costs(graph, args.probes),
        }
        del graph
        result["side_by_side"] = side_by_side(Path(tmp), [int(s) for s in args.sizes.split(",")])
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
