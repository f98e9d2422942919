"""System time: ``as_of`` over a tenant with a long history, with and without snapshots, and replay
throughput from Kafka and from the archive.

One run, one machine: starts (or reuses) the local broker, then
  1. produces one tenant's N memories (``bench.rematerialise.workload``) to a private topic;
  2. replays them from offset zero (``streams.replay.replay_tenant``, the live agent's batches)
     into a fresh store whose projector takes a snapshot every ``--every`` handled events, as the
     live projector does with ``ENGRAM_SNAPSHOT_EVERY``: events/s from Kafka, and what the
     snapshots cost (count, time, bytes);
  3. ``as_of`` latency: the tenant rebuilt to a log position near the start, the middle and the
     end of its history (what ``streams.asof`` does for an ``as_of`` read), from offset zero and
     from the nearest snapshot; then ``--probes`` positions drawn at random, with snapshots
     (p50/p95);
  4. archives the topic (``streams.archiver``), deletes the records from Kafka (the admin
     client's DeleteRecords, as retention would) and replays again: events/s from the archive.
Prints one JSON object; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete
from engram.projections.stores import TenantStores
from engram.streams import kafka_local
from engram.streams.archive_read import Manifest
from engram.streams.archiver import Archiver
from engram.streams.keystore import KeyStore, ReadOnlyKeys
from engram.streams.objects import Objects, open_objects
from engram.streams.replay import replay_tenant
from engram.streams.snapshots import Snapshots
from engram.streams.topics import ensure_topics

from bench.rematerialise import TENANT, produce, workload
from engram.settings import Settings, load_settings
from tests.harness import isolated_settings

log = logging.getLogger("bench.asof")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


class TimedSnapshots(Snapshots):
    """Snapshots that keep how long each take took."""

    taken: list[float]

    def take(self, tenant: str, graph: Any) -> Any:
        started = time.perf_counter()
        snap = super().take(tenant, graph)
        self.taken.append(time.perf_counter() - started)
        return snap


def rebuild(settings: Settings, root: Path, **kw: Any) -> float:
    """Seconds to rebuild the tenant into ``root`` (a fresh store; closed and removed after)."""
    started = time.perf_counter()
    graph = asyncio.run(replay_tenant(settings, TENANT, root, **kw))
    elapsed = time.perf_counter() - started
    assert graph is not None
    del graph
    gc.collect()
    shutil.rmtree(root, ignore_errors=True)
    return elapsed


async def archive_all(settings: Settings, objects: Objects, end: int) -> float:
    """Run the archiver until its manifest holds every offset below ``end``; seconds it took."""
    stop = asyncio.Event()
    started = time.perf_counter()
    quick = settings.model_copy(update={"archive_segment_age_s": 1.0})  # the last segment rolls soon
    task = asyncio.create_task(Archiver(quick, objects).run(stop))
    while True:
        await asyncio.sleep(0.5)
        manifest = await asyncio.to_thread(Manifest.load, objects, settings.events_topic)
        if (manifest.next_offset(0) or 0) >= end:
            break
        if task.done():
            task.result()
    stop.set()
    await task
    return time.perf_counter() - started


async def delete_from_kafka(settings: Settings, end: int) -> int:
    """Move the partition's first offset to ``end``, as retention would; the new first offset."""
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap)
    await admin.start()
    try:
        tp = TopicPartition(settings.events_topic, 0)
        done = await admin.delete_records({tp: RecordsToDelete(before_offset=end)})
        return done[tp]
    finally:
        await admin.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--every", type=int, default=500, help="snapshot every this many handled events")
    ap.add_argument("--probes", type=int, default=20, help="random as_of positions, with snapshots")
    ap.add_argument("--no-archive", action="store_true", help="skip the replay from the archive")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s")
    for noisy in (
        "aiokafka",
        "engram.streams.replay",
        "engram.streams.snapshots",
        "engram.projections",
        "engram.streams.archiver",
    ):
        logging.getLogger(noisy).setLevel(logging.WARNING)

    base = load_settings()
    kafka_local.start(base)
    out: dict[str, Any] = {"events": args.events, "snapshot_every": args.every}
    with tempfile.TemporaryDirectory(prefix="engram-bench-asof-", ignore_cleanup_errors=True) as tmp:
        root = Path(tmp)
        settings = isolated_settings(base, root / "data", partitions=1)
        asyncio.run(ensure_topics(settings))
        asyncio.run(produce(settings, workload(args.events)))
        end = args.events

        objects = open_objects(settings)  # where replay looks for the archive: DATA_DIR/archive
        snaps = TimedSnapshots(objects, every=args.every)
        snaps.taken = []
        # with the tenant's keys, as replay's own stores have them: without, every memory reads erased
        stores = TenantStores(root / "live", keys=ReadOnlyKeys(KeyStore(settings.key_store_dir)))
        stores.snapshots = snaps
        log.info("replaying %d events from Kafka, a snapshot every %d", end, args.every)
        full = rebuild(settings, root / "live", stores=stores)
        stores.close()
        taken = snaps.list(TENANT)
        out["replay_from_kafka"] = {
            "seconds": round(full, 2),
            "events_per_second": round(end / full, 1),
            "snapshots": len(taken),
            "snapshot_take_ms_median": round(statistics.median(snaps.taken) * 1000, 1)
            if snaps.taken
            else None,
            "snapshot_take_seconds_total": round(sum(snaps.taken), 2),
            "snapshot_bytes_last": taken[-1].bytes if taken else None,
        }

        plain = Snapshots(objects)
        points = {"start": max(1, end // 100), "middle": end // 2, "end": end}
        latency: dict[str, Any] = {}
        for name, until in points.items():
            with_snap = rebuild(settings, root / f"at-{name}", until_offset=until, snapshots=plain)
            log.info("as_of %s (offset %d): %.2fs from the nearest snapshot", name, until - 1, with_snap)
            without = rebuild(settings, root / f"zero-{name}", until_offset=until)
            log.info("as_of %s (offset %d): %.2fs from offset zero", name, until - 1, without)
            latency[name] = {"offset": until - 1, "with_snapshots_s": round(with_snap, 3),
                             "from_zero_s": round(without, 3)}  # fmt: skip
        rng = random.Random(7)
        probes = [
            rebuild(settings, root / f"probe-{i}", until_offset=rng.randrange(1, end + 1), snapshots=plain)
            for i in range(args.probes)
        ]
        latency["random_with_snapshots"] = {
            "probes": len(probes),
            "p50_s": round(percentile(probes, 0.5), 3),
            "p95_s": round(percentile(probes, 0.95), 3),
            "max_s": round(max(probes), 3),
        }
        out["as_of"] = latency

        if not args.no_archive:
            archived = asyncio.run(archive_all(settings, objects, end))
            first = asyncio.run(delete_from_kafka(settings, end))
            log.info("archived in %.1fs; Kafka's first offset is now %d", archived, first)
            from_archive = rebuild(settings, root / "archive")
            out["replay_from_archive"] = {
                "archive_seconds": round(archived, 2),
                "kafka_first_offset": first,
                "seconds": round(from_archive, 2),
                "events_per_second": round(end / from_archive, 1),
            }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
