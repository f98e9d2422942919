"""Rebuild a tenant's projection from the log: for audit, AS OF, and to check a live store.

Replay feeds the tenant's records, from offset zero, through the same ``handle_batch_with_retries``
the live agent uses, into a store of its own, so it refuses exactly the records the live
projector refused (for the same reasons) and never stops at one; nothing is dead-lettered again.
Offsets Kafka no longer holds (retention) are read from the archive (``streams.archive_read``),
which keeps the records' bytes as they were; an offset in neither is an ``ArchiveGap``, never a
silent skip.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import OffsetOutOfRangeError
from engram.projections.knowledge import load_knowledge
from engram.projections.stores import TenantStores
from engram.projections.tenant_graph import TenantGraph
from engram.schemas import vocabulary as v
from engram.schemas.events import Position
from engram.streams import fetch_guard
from engram.streams.archive_read import ArchiveGap, LogRecord, Manifest, covering, segment_records
from engram.streams.keystore import KeyStore, ReadOnlyKeys
from engram.streams.objects import open_objects
from engram.streams.projector import Record, handle_batch_with_retries
from engram.streams.snapshots import Snapshots
from engram.streams.topics import partition_count, partition_for

from engram.settings import Settings

log = logging.getLogger(__name__)

FETCH_RECORDS = 2000  # records per batch, from Kafka or the archive alike


async def replay_tenant(
    settings: Settings,
    tenant: str,
    root: Path,
    *,
    as_of_ms: int | None = None,
    until_offset: int | None = None,
    stores: TenantStores | None = None,
    snapshots: Snapshots | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> TenantGraph | None:
    """Replay ``tenant``'s events (appended at or before ``as_of_ms``, at offsets before
    ``until_offset`` of its partition) into a store in ``root`` (or in ``stores``, when the caller
    wants its indexes too). With ``snapshots``, it starts from the nearest earlier snapshot of the
    tenant rather than offset zero; ``progress(offset, end)`` is told where it is after each batch.

    None when no event of the tenant applies (the tenant does not exist at that point).
    """
    if not v.full_match(v.TENANT_RE, tenant):
        raise ValueError(f"not a tenant id: {tenant!r} (must match {v.TENANT_RE.pattern})")
    fetch_guard.install()
    partitions = await partition_count(settings, settings.events_topic)
    if stores is None:  # a caller's stores (an as_of) come with their knowledge and keys
        knowledge = load_knowledge(
            settings.ontology_dir.resolve(), settings.rules_dir.resolve(), settings.rule_engine
        )
        keys = ReadOnlyKeys(KeyStore(settings.key_store_dir))  # a forgotten memory's key is gone already
        stores = TenantStores(root, knowledge=knowledge, keys=keys)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=settings.kafka_bootstrap,
        enable_auto_commit=False,
        group_id=None,
        auto_offset_reset="none",  # an offset deleted under us is read from the archive, not skipped
    )
    await consumer.start()
    try:
        tp = TopicPartition(settings.events_topic, partition_for(tenant, partitions))
        consumer.assign([tp])
        end = (await consumer.end_offsets([tp]))[tp]
        if until_offset is not None:
            end = min(end, until_offset)
        key, seen, started = tenant.encode(), 0, time.monotonic()

        def result() -> TenantGraph | None:
            return stores.get(tenant)  # None: no event of the tenant applied, as live

        async def no_dead_letters(_record: Record, _reason: str) -> None:
            return None

        async def apply(fetched: Iterable[LogRecord]) -> bool:
            """Apply the tenant's records of one fetch, as one batch; True once past ``end`` or
            ``as_of_ms``."""
            nonlocal seen
            fetched = list(fetched)
            done = any(m.offset >= end or (as_of_ms is not None and m.timestamp > as_of_ms) for m in fetched)
            records = [
                Record(m.key, m.value, list(m.headers), Position(m.partition, m.offset, m.timestamp))
                for m in fetched
                if m.key == key and m.offset < end and (as_of_ms is None or m.timestamp <= as_of_ms)
            ]
            # the same batches as live: a tenant's run planned together, committed once
            await handle_batch_with_retries(records, stores, no_dead_letters, partitions=partitions)
            await stores.flush_over_budget(0)  # no memory budget here: the stores whose tombstones are due
            seen += len(records)
            if progress is not None and fetched:
                progress(fetched[-1].offset + 1, end)
            return done

        async def from_archive(start: int, stop: int, beginning: int) -> bool:
            """Offsets ``start`` to ``stop - 1``, which Kafka no longer holds, from the archive."""
            objects = open_objects(settings)
            manifest = await asyncio.to_thread(Manifest.load, objects, settings.events_topic)
            try:
                segments = covering(manifest, tp.partition, start, stop)
            except ArchiveGap as gap:
                raise ArchiveGap(
                    gap.topic, gap.partition, gap.first, gap.last, f"Kafka's first offset is {beginning}"
                ) from None
            for segment in segments:
                archived = await asyncio.to_thread(segment_records, objects, segment, start, stop)
                for i in range(0, len(archived), FETCH_RECORDS):
                    if await apply(archived[i : i + FETCH_RECORDS]):
                        return True
            log.info("replay %s: %d events from the archive, offsets %d..%d", tenant, seen, start, stop - 1)
            return False

        position = 0  # the next offset to apply: every one from zero, from Kafka or the archive
        if snapshots is not None and not stores.exists(tenant):
            # the store as it was at the snapshot's checkpoint (picked again if another process
            # deletes it meanwhile); the rest follows from the log
            snap = await asyncio.to_thread(
                snapshots.restore_nearest, tenant, tp.partition, end, as_of_ms, stores.store_path(tenant)
            )
            if snap is not None:
                position = snap.offset + 1
                log.info("replay %s: from the snapshot at offset %d", tenant, snap.offset)
        if progress is not None:
            progress(position, end)
        while position < end:
            beginning = (await consumer.beginning_offsets([tp]))[tp]
            if position < beginning:
                if await from_archive(position, min(beginning, end), beginning):
                    return result()
                position = min(beginning, end)
                continue
            consumer.seek(tp, position)
            try:
                while position < end:
                    fetched = (await consumer.getmany(tp, timeout_ms=1000, max_records=FETCH_RECORDS)).get(
                        tp, []
                    )
                    if await apply(
                        LogRecord(m.partition, m.offset, m.timestamp, m.key, m.value, list(m.headers))
                        for m in fetched
                    ):
                        return result()
                    position = await consumer.position(tp)
                    log.info(
                        "replay %s: %d events, offset %d/%d, %.1fs",
                        tenant,
                        seen,
                        position,
                        end,
                        time.monotonic() - started,
                    )
            except OffsetOutOfRangeError:  # retention deleted ``position`` meanwhile: the archive has it
                continue
        return result()
    finally:
        await consumer.stop()
