"""The archiver: copies the events topic to the object store, so the log outlives Kafka's retention.

Each partition is cut into segments (``streams.archive_read`` has the format) of at most
``archive_segment_records`` records (or ``archive_segment_bytes``), or fewer once the partition is
caught up and its open segment is ``archive_segment_age_s`` old. The manifest is the only progress
there is (no consumer group): a segment is put under its final key once complete, then the manifest
that lists it; on start the archiver reads the manifest, adopts a valid segment that a crash left
out of it, and resumes every partition after its last archived offset. A segment's bytes depend only
on its records, so writing one twice is harmless: in effect, every offset is archived exactly once.

One archiver per topic: two would race on the manifest.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import OffsetOutOfRangeError
from engram.streams.archive_read import (
    ArchiveError,
    LogRecord,
    Manifest,
    describe_segment,
    encode_segment,
    manifest_key,
    parse_segment_key,
    segment_key,
    topic_root,
)
from engram.streams.objects import Objects
from engram.streams.topics import partition_count

from engram.settings import Settings

log = logging.getLogger(__name__)

FETCH_TIMEOUT_MS = 200


def adopt_orphans(objects: Objects, manifest: Manifest) -> int:
    """Add to ``manifest`` the segments put before a crash and not yet listed (one per partition at
    most: the manifest is put after each segment): those that start where the partition's archive
    ends and hold what their key says. Returns how many were adopted."""
    listed = {s.key for segments in manifest.partitions.values() for s in segments}
    orphans: dict[int, list[tuple[int, str]]] = {}
    for key in objects.list(f"{topic_root(manifest.topic)}/p="):
        parsed = parse_segment_key(manifest.topic, key)
        if parsed is not None and key not in listed:
            orphans.setdefault(parsed[0], []).append((parsed[1], key))
    adopted = 0
    for partition, found in sorted(orphans.items()):
        for first, key in sorted(found):
            expected = manifest.next_offset(partition)
            if expected is not None and first != expected:
                log.warning(
                    "archive: ignoring %s: partition %d's archive ends before %s", key, partition, expected
                )
                continue
            try:
                segment = describe_segment(manifest.topic, key, objects.get(key))
            except ArchiveError as exc:
                log.warning("archive: ignoring %s: %s (it is rewritten when its records are)", key, exc)
                continue
            manifest.segments(partition).append(segment)
            adopted += 1
            log.info(
                "archive: adopted %s (%d records), written before the manifest listed it",
                key,
                segment.records,
            )
    return adopted


@dataclass
class OpenSegment:
    """A partition's records not yet in a segment."""

    records: list[LogRecord] = field(default_factory=list)
    size: int = 0
    since: float = 0.0  # monotonic time its first record arrived

    def add(self, record: LogRecord) -> None:
        if not self.records:
            self.since = time.monotonic()
        self.records.append(record)
        self.size += len(record.key or b"") + len(record.value or b"") + 40

    def take(self, limit_records: int, limit_bytes: int) -> list[LogRecord]:
        """The oldest records up to either limit (at least one), removed from the open segment."""
        n, size = 0, 0
        for r in self.records[:limit_records]:
            size += len(r.key or b"") + len(r.value or b"") + 40
            n += 1
            if size >= limit_bytes:
                break
        taken, self.records = self.records[:n], self.records[n:]
        self.size -= size
        self.since = time.monotonic() if self.records else 0.0
        return taken


class Archiver:
    """Copies ``topic`` (the events topic by default) to ``objects`` until ``stop`` is set."""

    def __init__(self, settings: Settings, objects: Objects, *, topic: str | None = None) -> None:
        self.settings = settings
        self.objects = objects
        self.topic = topic or settings.events_topic
        self.max_records = settings.archive_segment_records
        self.max_bytes = settings.archive_segment_bytes
        self.max_age = settings.archive_segment_age_s
        self.manifest = Manifest(self.topic)

    async def _put_manifest(self) -> None:
        await asyncio.to_thread(self.objects.put, manifest_key(self.topic), self.manifest.to_bytes())

    async def _write(self, partition: int, records: list[LogRecord]) -> None:
        """Put one segment, then the manifest listing it (in this order: see the module's doc)."""
        data = encode_segment(self.topic, partition, records)
        key = segment_key(self.topic, partition, records[0].offset, records[-1].offset)
        await asyncio.to_thread(self.objects.put, key, data)
        segment = describe_segment(self.topic, key, data)
        self.manifest.segments(partition).append(segment)
        await self._put_manifest()
        log.info(
            "archive: %s p=%d offsets %d..%d, %d records, %d bytes",
            self.topic,
            partition,
            segment.first_offset,
            segment.last_offset,
            segment.records,
            segment.bytes,
        )

    async def recover(self) -> Manifest:
        """The manifest as stored, with the segments a crash left out of it adopted."""
        self.manifest = await asyncio.to_thread(Manifest.load, self.objects, self.topic)
        if await asyncio.to_thread(adopt_orphans, self.objects, self.manifest):
            await self._put_manifest()
        return self.manifest

    async def run(self, stop: asyncio.Event) -> None:
        """Archive until ``stop`` is set, then write what is pending (a shorter last segment)."""
        await self.recover()
        partitions = await partition_count(self.settings, self.topic)
        tps = [TopicPartition(self.topic, p) for p in range(partitions)]
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.settings.kafka_bootstrap,
            enable_auto_commit=False,
            group_id=None,
            auto_offset_reset="none",  # a deleted offset is an error to report, never a silent jump
        )
        await consumer.start()
        pending = {tp.partition: OpenSegment() for tp in tps}
        try:
            consumer.assign(tps)
            beginnings = await consumer.beginning_offsets(tps)
            for tp in tps:
                await self._seek(consumer, tp, beginnings[tp])
            log.info(
                "archive: %s, %d partitions, resuming at %s",
                self.topic,
                partitions,
                {tp.partition: await consumer.position(tp) for tp in tps},
            )
            while not stop.is_set():
                try:
                    fetched = await consumer.getmany(
                        timeout_ms=FETCH_TIMEOUT_MS, max_records=self.max_records
                    )
                except OffsetOutOfRangeError as exc:  # retention overtook the archiver
                    for tp in exc.args[0] if exc.args and isinstance(exc.args[0], dict) else tps:
                        # what was fetched before the gap is a segment of its own: none spans a gap
                        await self._flush(tp.partition, pending[tp.partition])
                        await self._seek(consumer, tp, (await consumer.beginning_offsets([tp]))[tp])
                    continue
                for tp, messages in fetched.items():
                    for m in messages:
                        pending[tp.partition].add(
                            LogRecord(m.partition, m.offset, m.timestamp, m.key, m.value, list(m.headers))
                        )
                for tp in tps:
                    await self._roll(consumer, tp, pending[tp.partition])
        finally:
            try:
                for partition, open_segment in sorted(pending.items()):
                    await self._flush(partition, open_segment)
            finally:
                await consumer.stop()

    async def _flush(self, partition: int, open_segment: OpenSegment) -> None:
        while open_segment.records:
            await self._write(partition, open_segment.take(self.max_records, self.max_bytes))

    async def _seek(self, consumer: AIOKafkaConsumer, tp: TopicPartition, beginning: int) -> None:
        """Position ``tp`` after its last archived offset; if Kafka has deleted offsets that were
        never archived, say so loudly (``engram archive status`` shows the gap) and go on from
        Kafka's first offset, so no more is lost."""
        wanted = self.manifest.next_offset(tp.partition)
        if wanted is None:
            wanted = 0
        if wanted < beginning:
            log.error(
                "archive: offsets %d..%d of %s p=%d were deleted by Kafka before they were archived",
                wanted,
                beginning - 1,
                self.topic,
                tp.partition,
            )
            wanted = beginning
        consumer.seek(tp, wanted)

    async def _roll(self, consumer: AIOKafkaConsumer, tp: TopicPartition, open_segment: OpenSegment) -> None:
        while len(open_segment.records) >= self.max_records or open_segment.size >= self.max_bytes:
            await self._write(tp.partition, open_segment.take(self.max_records, self.max_bytes))
        if not open_segment.records or time.monotonic() - open_segment.since < self.max_age:
            return
        highwater = consumer.highwater(tp)
        if highwater is not None and await consumer.position(tp) >= highwater:  # caught up
            await self._write(tp.partition, open_segment.take(self.max_records, self.max_bytes))


@dataclass(frozen=True)
class PartitionStatus:
    """One partition's archive against what Kafka holds."""

    partition: int
    segments: int
    records: int
    bytes: int
    first_offset: int | None  # archived
    last_offset: int | None
    kafka_beginning: int
    kafka_end: int
    gaps: list[tuple[int, int]]  # offset ranges neither archived nor in Kafka any more

    @property
    def lag(self) -> int:
        """Records Kafka holds that are not archived yet."""
        return self.kafka_end - (
            self.last_offset + 1 if self.last_offset is not None else self.kafka_beginning
        )


def missing_ranges(manifest: Manifest, partition: int, kafka_beginning: int) -> list[tuple[int, int]]:
    """Offsets below Kafka's first that no segment holds (they exist nowhere any more)."""
    gaps, wanted = [], 0
    for segment in manifest.partitions.get(partition, []):
        if wanted >= kafka_beginning:
            break
        if segment.first_offset > wanted:
            gaps.append((wanted, min(segment.first_offset, kafka_beginning) - 1))
        wanted = max(wanted, segment.last_offset + 1)
    if wanted < kafka_beginning:
        gaps.append((wanted, kafka_beginning - 1))
    return gaps


async def archive_status(
    settings: Settings, objects: Objects, *, topic: str | None = None
) -> list[PartitionStatus]:
    """Per partition of the topic: what is archived, what Kafka still holds, and any gap."""
    topic = topic or settings.events_topic
    manifest = await asyncio.to_thread(Manifest.load, objects, topic)
    tps = [TopicPartition(topic, p) for p in range(await partition_count(settings, topic))]
    consumer = AIOKafkaConsumer(
        bootstrap_servers=settings.kafka_bootstrap, enable_auto_commit=False, group_id=None
    )
    await consumer.start()
    try:
        beginnings = await consumer.beginning_offsets(tps)
        ends = await consumer.end_offsets(tps)
    finally:
        await consumer.stop()
    out = []
    for tp in tps:
        segments = manifest.partitions.get(tp.partition, [])
        out.append(
            PartitionStatus(
                tp.partition,
                len(segments),
                sum(s.records for s in segments),
                sum(s.bytes for s in segments),
                segments[0].first_offset if segments else None,
                segments[-1].last_offset if segments else None,
                beginnings[tp],
                ends[tp],
                missing_ranges(manifest, tp.partition, beginnings[tp]),
            )
        )
    return out


RESTART_AFTER_S = 5.0


async def archive_until(settings: Settings, stop: asyncio.Event) -> None:
    """The archiver inside ``engram serve`` (``ENGRAM_ARCHIVE_ENABLED``): an error (the object store
    or Kafka unreachable) is logged and the archiver starts again from the manifest a moment later,
    so it never takes the API down and never stays down."""
    from engram.streams.objects import open_objects

    while not stop.is_set():
        try:
            await Archiver(settings, await asyncio.to_thread(open_objects, settings)).run(stop)
        except Exception:
            log.exception("archive: stopped by an error; starting again in %.0fs", RESTART_AFTER_S)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), RESTART_AFTER_S)


async def run_until_signalled(settings: Settings, objects: Objects) -> None:
    """``engram archive run``: archive until SIGTERM or SIGINT, then finish the pending segments."""
    import signal

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await Archiver(settings, objects).run(stop)
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(sig)
