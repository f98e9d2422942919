"""Tenants in memory against tenants on disk (``ENGRAM_STORE``), in process, no broker. Prints JSON.

1. ``rate``: ``bench/throughput.py``'s workload (N events over T tenants, sealed, encoded) through
   the projector's own batches (``handle_batch_with_retries``) into fresh stores, rules off and
   on, disk and memory alternating, ``--reps`` times each: events/s wall and per CPU-second
   (``time.process_time``), min and median. Memory runs with snapshots every
   ``ENGRAM_SNAPSHOT_EVERY`` (250) events into a local object store, as ``engram serve`` would.
2. ``sizes``: one tenant of 1k, 10k and 100k memories (``--sizes``): its snapshot (bytes, time to
   dump and compress), the RSS the graph takes in memory (a fresh child process loads the snapshot:
   pyoxigraph's memory is native, so RSS, not tracemalloc), the eviction (snapshot of an unsaved
   graph, then dropped) and the reopen (load) times. Sizes above ``--build-max`` (10k) are not
   projected (100k events with the rules on take minutes even on a quiet machine): the largest
   built graph is copied with its memories, events, labels and contents renamed.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from engram.projections.knowledge import DEFAULT_RULES_DIR, load_knowledge
from engram.projections.stores import MEMORY, TenantStores
from engram.projections.tenant_graph import TenantGraph
from engram.schemas.events import Position, event_from_json
from engram.streams import codec
from engram.streams.keystore import KeyStore
from engram.streams.objects import LocalObjects
from engram.streams.pipeline import seal as seal_event
from engram.streams.projector import Record, handle_batch_with_retries
from engram.streams.snapshots import Snapshots
from engram.streams.topics import partition_for
from pyoxigraph import RdfFormat, Store

from bench.throughput import workload

PARTITIONS = 12


def records_of(raw: list[dict], keys: KeyStore) -> list[Record]:
    """The events as the log would hold them, partitions interleaved as the worker takes them."""
    by_partition: dict[int, list[Record]] = {}
    for e in raw:
        event = seal_event(event_from_json(e), keys)
        part = partition_for(event.tenant, PARTITIONS)
        queue = by_partition.setdefault(part, [])
        queue.append(Record(event.tenant.encode(), codec.encode(event), [], Position(part, len(queue), 0)))
    rounds = itertools.zip_longest(*by_partition.values())
    return [r for round_ in rounds for r in round_ if r is not None]


async def _sink(*_: Any) -> None:
    raise AssertionError("the workload is valid: nothing may be dead-lettered")


def project(records: list[Record], stores: TenantStores, batch: int) -> tuple[float, float]:
    """Wall and CPU seconds of projecting ``records`` in batches of ``batch``."""

    async def run() -> None:
        for start in range(0, len(records), batch):
            await handle_batch_with_retries(
                records[start : start + batch], stores, _sink, partitions=PARTITIONS
            )

    wall, cpu = time.perf_counter(), time.process_time()
    asyncio.run(run())
    return time.perf_counter() - wall, time.process_time() - cpu


def stores_for(root: Path, mode: str, knowledge: Any, keys: KeyStore, every: int) -> TenantStores:
    stores = TenantStores(root / "tenants", knowledge=knowledge, keys=keys, memory=mode == "memory")
    if mode == "memory":
        stores.snapshots = Snapshots(LocalObjects(root / "objects"), every=every)
    return stores


def rate(root: Path, args: argparse.Namespace) -> dict[str, Any]:
    keys = KeyStore(root / "keys")
    records = records_of(workload(args.events, args.tenants), keys)
    (root / "no-rules").mkdir(parents=True, exist_ok=True)
    (root / "no-rules" / "none.dlog").write_text("# the rules off\n")
    knowledge = {
        "rules-off": load_knowledge(rules_dir=root / "no-rules"),
        "rules-on": load_knowledge(rules_dir=DEFAULT_RULES_DIR),
    }
    runs: dict[str, list[tuple[float, float]]] = {}
    for rep in range(args.reps):
        for rules, mode in itertools.product(knowledge, ("disk", "memory")):  # alternating
            where = root / f"rate-{rep}-{rules}-{mode}"
            stores = stores_for(where, mode, knowledge[rules], keys, args.every)
            runs.setdefault(f"{rules} {mode}", []).append(project(records, stores, args.batch))
            stores.close()
    out = {}
    for name, timings in runs.items():
        per_s = sorted(len(records) / wall for wall, _ in timings)
        per_cpu = sorted(len(records) / cpu for _, cpu in timings)
        out[name] = {
            "events_per_s": {"min": round(per_s[0]), "median": round(statistics.median(per_s))},
            "events_per_cpu_s": {"min": round(per_cpu[0]), "median": round(statistics.median(per_cpu))},
        }
    return {"events": len(records), "tenants": args.tenants, "batch": args.batch, "reps": args.reps, **out}


def rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def load_rss(objects: str, tenant: str) -> None:
    """In a child: the RSS a tenant's graph takes once loaded from its newest snapshot."""
    snaps = Snapshots(LocalObjects(Path(objects)))
    snap = snaps.newest(tenant)
    assert snap is not None
    before = rss_kib()
    started = time.perf_counter()
    store = snaps.load(snap)
    took = time.perf_counter() - started
    print(
        json.dumps(
            {"rss_mib": round((rss_kib() - before) / 1024, 1), "quads": len(store), "load_s": round(took, 3)}
        )
    )


def synthesized(text: str, times: int) -> str:
    """A built tenant's N-Quads ``times`` over, each copy's memories, events, labels and contents
    renamed: a graph of ``times`` as many memories, of the same shape, without the build."""
    copies = []
    for k in range(times):
        copies.append(
            text.replace("urn:engram:memory:m", f"urn:engram:memory:r{k}m")
            .replace('memoryId> "m', f'memoryId> "r{k}m')
            .replace("memory ", f"memory r{k}-")
            .replace("content ", f"content r{k} ")
            .replace("00000000-0000-4000-8000-", f"{k:08d}-0000-4000-8000-")
        )
    return "".join(copies)


def sizes(root: Path, args: argparse.Namespace) -> dict[str, Any]:
    keys = KeyStore(root / "keys")
    knowledge = load_knowledge(rules_dir=DEFAULT_RULES_DIR)
    out: dict[str, Any] = {}
    built: dict[int, str] = {}  # size: its graph as N-Quads
    for n in args.sizes:
        tenant = f"size{n}"
        where = root / f"size-{n}"
        stores = stores_for(where, "memory", knowledge, keys, 0)  # no snapshot while it is built
        row: dict[str, Any] = {}
        base = max((b for b in built if b <= args.build_max and n % b == 0), default=None)
        if n > args.build_max and base is not None:
            store = Store()
            store.bulk_load(synthesized(built[base], n // base), format=RdfFormat.N_QUADS)
            graph = TenantGraph(stores.store_path(tenant), knowledge, memory=store)
            graph.saved = None  # as if it had events no snapshot holds
            stores._opened(tenant, graph)
            (stores.root / tenant / MEMORY).touch()  # the tenant exists: it is held in memory
            row["built"] = f"the {base} memories' graph, {n // base} times over (renamed)"
        else:
            raw = [
                {"type": "MemoryRemembered", "tenant": tenant, "source": "pipeline",
                 "actor": {"id": "b", "role": "operator"}, "event_id": f"00000000-0000-4000-8000-{i:012d}",
                 "payload": {"memory_id": f"m{i}", "label": f"memory {i}", "content": f"content {i} " * 8,
                             "kind": "fact", "scope": "company", "importance": 1 + i % 5}}
                for i in range(n)
            ]  # fmt: skip
            wall, cpu = project(records_of(raw, keys), stores, args.batch)
            row.update(build_events_per_s=round(n / wall), build_events_per_cpu_s=round(n / cpu))
            graph = stores.get(tenant)
            assert graph is not None
            built[n] = graph.store.dump(format=RdfFormat.N_QUADS).decode()
        assert graph.unsaved()
        del graph
        started, cpu = time.perf_counter(), time.process_time()
        stores.max_open = 0
        assert asyncio.run(stores.trim()) == 1  # evicted: an unsaved graph is snapshotted, then dropped
        evict_s, evict_cpu = time.perf_counter() - started, time.process_time() - cpu
        started, cpu = time.perf_counter(), time.process_time()
        stores.max_open = 1
        assert stores.get(tenant) is not None
        reopen_s, reopen_cpu = time.perf_counter() - started, time.process_time() - cpu
        snap = stores.snapshots.newest(tenant)
        code = f"from bench.memstore import load_rss; load_rss({str(where / 'objects')!r}, {tenant!r})"
        child = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True, text=True, check=True, env={**os.environ},
        )  # fmt: skip
        out[f"{n} memories"] = {
            **row,
            "snapshot_bytes": snap.bytes if snap is not None else None,
            "evict_s (snapshot + drop)": round(evict_s, 3),
            "evict_cpu_s": round(evict_cpu, 3),
            "reopen_s (load snapshot)": round(reopen_s, 3),
            "reopen_cpu_s": round(reopen_cpu, 3),
            **json.loads(child.stdout),
        }
        stores.close()
        print(json.dumps({f"{n} memories": out[f"{n} memories"]}), file=sys.stderr, flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument("--tenants", type=int, default=50)
    parser.add_argument("--batch", type=int, default=2000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--every", type=int, default=250, help="ENGRAM_SNAPSHOT_EVERY of the memory runs")
    parser.add_argument("--sizes", type=int, nargs="*", default=[1000, 10_000, 100_000])
    parser.add_argument("--build-max", type=int, default=10_000, help="larger sizes are built by copying")
    parser.add_argument("--skip-rate", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="engram-memstore-", ignore_cleanup_errors=True) as tmp:
        root = Path(tmp)
        result = {} if args.skip_rate else {"rate": rate(root, args)}
        print(json.dumps(result), file=sys.stderr, flush=True)
        result["sizes"] = sizes(root, args)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
