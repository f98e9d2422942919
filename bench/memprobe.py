"""Where the server's memory grows per write (issue 28): remembers applied in one process through
the projector's own path, optionally with the indexer behind it, RSS sampled.

No HTTP, no Kafka: each run varies one part (the indexes, the store write budget, the pace, the
text index's commit cadence, the vectors' saves), so its KB per event says what that part costs.
``--indexer`` runs ``streams.indexer.Indexer`` as the server does (its pass after each batch, its
flusher committing the text overlays every second, the vectors saved every ``SAVE_VECTORS_EVERY``).

    python -m bench.memprobe --events 6000 --tenants 30 --indexer --budget-mb 64

One JSON line: RSS (anonymous and file-backed) at a third of the run and at the end, KB per event
between them, events per CPU-second, threads; and the same after every store is flushed and
glibc trimmed, which says what was held rather than leaked.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import gc
import json
import random
import shutil
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from engram.projections import indexes as indexes_module
from engram.projections import text_index
from engram.projections.knowledge import load_knowledge
from engram.projections.progress import Progress
from engram.projections.stores import TenantStores
from engram.schemas.events import Position, event_from_json
from engram.streams import codec
from engram.streams import indexer as indexer_module
from engram.streams.indexer import Indexer
from engram.streams.projector import Record, handle_batch_with_retries
from engram.streams.topics import partition_for

WORDS = ["budget", "roas", "meta", "google", "tiktok", "launch", "target", "cap", "creative", "audience"]
PARTITIONS = 12
MODEL, DIM = "minilm-int8", 384


def memory_kb() -> dict[str, float]:
    """RSS and its anonymous and file-backed parts (tantivy's segments are mmapped), in MB."""
    out = {}
    with open("/proc/self/status") as status:
        for line in status:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "RssAnon", "RssFile"):
                out[key] = round(int(value.split()[0]) / 1024, 1)
    return out


def remember(i: int, tenants: int, rng: random.Random, offsets: dict[int, int]) -> Record:
    # the write path embeds before it appends: the projector and indexer take the vector as is
    embedding = [rng.uniform(-0.1, 0.1) for _ in range(DIM)]
    return memory_record(f"probe-{i % tenants}", i, f"Soak note {i}", embedding, rng, offsets)


def memory_record(
    tenant: str, i: int, label: str, embedding: list[float], rng: random.Random, offsets: dict[int, int]
) -> Record:
    """Memory ``m{i}`` of ``tenant`` remembered (embedded, as the write path hands it over), as
    the record at the next offset of the tenant's partition; its event id drawn from ``rng``."""
    words = " ".join(WORDS[(i * k) % len(WORDS)] for k in (1, 3, 5, 7))
    payload = {
        "memory_id": f"m{i}",
        "label": label,
        "content": f"Observation {i}: {words}, week {i % 52}.",
        "kind": "fact",
        "scope": "company",
        "importance": 3,
        "embedding": embedding,
        "embedding_model": MODEL,
    }
    event = event_from_json(
        {
            "type": "MemoryRemembered",
            "tenant": tenant,
            "source": "agent",
            "actor": {"id": "dana", "role": "operator"},
            "payload": payload,
            "event_id": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
        }
    )
    partition = partition_for(tenant, PARTITIONS)
    offset = offsets.get(partition, 0)
    offsets[partition] = offset + 1
    position = Position(partition, offset, 1_764_547_200_000 + i)
    return Record(tenant.encode(), codec.encode(event), [], position)


async def run(a: argparse.Namespace, root: Path) -> dict[str, object]:
    stores = TenantStores(root, knowledge=load_knowledge(), vectors=(MODEL, DIM) if a.indexer else None)
    libc = ctypes.CDLL("libc.so.6")
    indexer = Indexer(stores, Progress()) if a.indexer else None
    progress = Progress()
    if indexer is not None:
        await indexer.start()
    rng = random.Random(1)
    offsets: dict[int, int] = {}
    samples: list[tuple[int, dict[str, float]]] = []

    async def sink(*_: object) -> None:
        raise AssertionError("dead letter")

    cpu0, wall0 = time.process_time(), time.perf_counter()
    for start in range(0, a.events, a.batch):
        records = [remember(i, a.tenants, rng, offsets) for i in range(start, min(start + a.batch, a.events))]
        results = await handle_batch_with_retries(records, stores, sink, partitions=PARTITIONS)
        for record, result in zip(records, results, strict=True):
            progress.record(result.tenant, record.position.partition, record.position.offset, result.outcome)
            if indexer is not None:
                indexer.submit(result.tenant, record.position, result.outcome, result.memory_ids)
        if a.budget_mb:
            await stores.flush_over_budget(a.budget_mb << 20)
        if a.trim_every and (start // a.batch) % a.trim_every == 0:
            libc.malloc_trim(0)
        # the server's loop turns over between batches: the indexer's pass runs here
        await asyncio.sleep(1 / a.pace if a.pace else 0)
        if start % 100 < a.batch or start + a.batch >= a.events:
            samples.append((start + a.batch, memory_kb()))
            progress_line = [*samples[-1], round(time.process_time() - cpu0, 1)]
            print(json.dumps(progress_line), file=sys.stderr, flush=True)
    if indexer is not None:
        await indexer.stop()
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    threads = len(list(Path("/proc/self/task").iterdir()))
    end = memory_kb()
    for tenant in stores.tenants():
        graph = stores.get(tenant)
        if graph is not None:
            graph.flush()
    libc.malloc_trim(0)
    flushed = memory_kb()
    stores.close()
    gc.collect()
    libc.malloc_trim(0)
    closed = memory_kb()
    third = next(s for s in samples if s[0] >= a.events // 3)
    last = samples[-1]
    per_event = {
        key: round((last[1][key] - third[1][key]) * 1024 / max(last[0] - third[0], 1), 2)
        for key in ("VmRSS", "RssAnon", "RssFile")
    }
    return {
        "args": vars(a),
        "events_per_cpu_s": round(a.events / cpu, 1),
        "events_per_s": round(a.events / wall, 1),
        "threads": threads,
        "rss_mb": {
            "first": samples[0][1],
            "third": third[1],
            "end": end,
            "flushed_trimmed": flushed,
            "closed": closed,
        },
        "kb_per_event_after_third": per_event,
        "text_commits": indexer.flushes if indexer is not None else 0,
        "trims": indexer.trims if indexer is not None else 0,
        "python_threads": threading.active_count(),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=6000)
    ap.add_argument("--tenants", type=int, default=30)
    ap.add_argument("--batch", type=int, default=1, help="records per projector batch")
    ap.add_argument("--indexer", action="store_true", help="the search indexes and their indexer on")
    ap.add_argument("--budget-mb", type=int, default=64, help="ENGRAM_STORE_WRITE_BUFFER_MB (0: off)")
    ap.add_argument("--trim-every", type=int, default=0, help="malloc_trim(0) every N batches (0: never)")
    ap.add_argument("--pace", type=float, default=0, help="batches per second (0: as fast as it goes)")
    ap.add_argument("--text-flush-s", type=float, default=None, help="text_index.FLUSH_AFTER_S")
    ap.add_argument("--trim-after-s", type=float, default=None, help="indexer.TRIM_AFTER_S (0: never)")
    ap.add_argument("--vectors-every", type=int, default=None, help="indexes.SAVE_VECTORS_EVERY")
    a = ap.parse_args()
    if a.text_flush_s is not None:
        text_index.FLUSH_AFTER_S = indexer_module.FLUSH_AFTER_S = a.text_flush_s
    if a.trim_after_s is not None:
        indexer_module.TRIM_AFTER_S = a.trim_after_s
    if a.vectors_every is not None:
        indexes_module.SAVE_VECTORS_EVERY = a.vectors_every
    root = Path(tempfile.mkdtemp(prefix="memprobe-"))
    try:
        print(json.dumps(asyncio.run(run(a, root / "tenants"))))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
