"""What an open tenant costs a process at rest (issue 37): threads, file descriptors and RSS per
open tenant once N tenants of M memories each were written and left idle.

No HTTP, no Kafka: each run is a child process that writes the tenants through the projector's own
path (``handle_batch_with_retries``, one tenant's records per batch) with the indexer behind it
(the server's flusher committing the text overlays), then lets them rest and reads ``/proc``.
Side by side, in one run:

- ``writers_kept``: every text index keeps its tantivy writer (as before writers were closed when
  idle: ``WRITER_IDLE_S`` infinite);
- ``writers_closed``: the indexer's flusher closes a writer idle for ``WRITER_IDLE_S`` (set to 1 s
  here so the run is short; the server's is 10 s);
- ``budget`` (with ``--budget-mb``): as ``writers_closed``, the open tenants bounded by that
  ``ENGRAM_OPEN_STORES_MB``: how many stay open, and what the process holds.

Vectors are random unit rows of the default model's dimension (384), as the write path hands
the projector an embedded memory. Prints one JSON object; progress goes to stderr.

    python -m bench.open_tenants --tenants 100 --memories 1000
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from engram.projections import text_index
from engram.projections.knowledge import load_knowledge
from engram.projections.progress import Progress
from engram.projections.stores import TenantStores
from engram.streams.indexer import Indexer
from engram.streams.projector import Record, handle_batch_with_retries

from bench.memprobe import DIM, MODEL, PARTITIONS, memory_record


def proc_figures() -> dict[str, float]:
    """This process's threads, open file descriptors and RSS (MB)."""
    with open("/proc/self/status") as status:
        rss = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
    return {
        "threads": len(os.listdir("/proc/self/task")),
        "fds": len(os.listdir("/proc/self/fd")),
        "rss_mb": round(rss / 1024, 1),
    }


def record(tenant: str, i: int, rng: random.Random, offsets: dict[int, int]) -> Record:
    vector = np.asarray([rng.gauss(0, 1) for _ in range(DIM)], dtype=np.float32)
    embedding = (vector / np.linalg.norm(vector)).tolist()
    return memory_record(tenant, i, f"Note {i} of {tenant}", embedding, rng, offsets)


async def child(a: argparse.Namespace, root: Path) -> dict[str, object]:
    """Write the tenants, let them rest, and measure (in this process)."""
    text_index.WRITER_IDLE_S = float("inf") if a.mode == "writers_kept" else 1.0
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    budget = a.budget_mb << 20 if a.mode == "budget" else 0
    stores = TenantStores(
        root, knowledge=load_knowledge(), vectors=(MODEL, DIM), max_open=a.tenants + 1, max_open_bytes=budget
    )
    indexer = Indexer(stores, Progress())
    await indexer.start()
    base = proc_figures()
    rng, offsets = random.Random(7), {}

    async def sink(*_: object) -> None:
        raise AssertionError("the bench's workload is valid: nothing may be dead-lettered")

    began = time.perf_counter()
    for t in range(a.tenants):
        tenant = f"t{t:05d}"
        records = [record(tenant, i, rng, offsets) for i in range(a.memories)]
        for start in range(0, len(records), a.batch):
            chunk = records[start : start + a.batch]
            results = await handle_batch_with_retries(chunk, stores, sink, partitions=PARTITIONS)
            for r, result in zip(chunk, results, strict=True):
                indexer.submit(result.tenant, r.position, result.outcome, result.memory_ids)
            await stores.flush_over_budget(64 << 20)  # as the projector does between batches
            await stores.trim()
            await asyncio.sleep(0)  # the indexer's pass
        if (t + 1) % max(1, a.tenants // 10) == 0:
            line = {"mode": a.mode, "tenants": t + 1, "open": stores.open_count(), **proc_figures()}
            print(json.dumps(line), file=sys.stderr, flush=True)
    written_s = time.perf_counter() - began
    writing = proc_figures()
    await asyncio.sleep(a.rest)  # the flusher commits the overlays and (writers_closed) closes writers
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    resting = proc_figures()
    open_at_rest, estimated = stores.open_count(), stores.open_bytes()
    await indexer.stop()
    stores.close()
    n = open_at_rest
    return {
        "mode": a.mode,
        "written_seconds": round(written_s, 1),
        "process_before": base,
        "process_while_writing": writing,
        "process_at_rest": resting,
        "open_at_rest": open_at_rest,
        "estimated_open_mb": round(estimated / 2**20, 1),
        "per_open_tenant_at_rest": {
            "threads": round((resting["threads"] - base["threads"]) / n, 2),
            "fds": round((resting["fds"] - base["fds"]) / n, 2),
            "rss_mb": round((resting["rss_mb"] - base["rss_mb"]) / n, 2),
        },
        "writers_closed": indexer.writers_released,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tenants", type=int, default=100)
    ap.add_argument("--memories", type=int, default=1000, help="memories per tenant")
    ap.add_argument("--batch", type=int, default=500, help="records per projector batch")
    ap.add_argument("--rest", type=float, default=8.0, help="seconds the tenants rest before measuring")
    ap.add_argument("--budget-mb", type=int, default=0, help="also a run with ENGRAM_OPEN_STORES_MB this")
    ap.add_argument("--mode", choices=("writers_kept", "writers_closed", "budget"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.mode is not None:  # a child: one mode, in its own process
        root = Path(tempfile.mkdtemp(prefix="open-tenants-"))
        try:
            print(json.dumps(asyncio.run(child(a, root))))
        finally:
            shutil.rmtree(root, ignore_errors=True)
        return
    runs = {}
    for mode in ("writers_kept", "writers_closed", *(("budget",) if a.budget_mb else ())):
        argv = [sys.executable, "-m", "bench.open_tenants", *sys.argv[1:], "--mode", mode]
        out = subprocess.run(argv, check=True, stdout=subprocess.PIPE, text=True).stdout
        runs[mode] = json.loads(out.strip().splitlines()[-1])
    print(json.dumps({"benchmark": "open_tenants", "tenants": a.tenants, "memories": a.memories,
                      "dim": DIM, "runs": runs}, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
