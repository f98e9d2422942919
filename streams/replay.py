"""Rebuild a tenant's projection from the log: for audit, AS OF, and to check a live store.

Replay feeds the tenant's records, from offset zero, through the same ``handle_batch_with_retries``
the live agent uses, into a store of its own, so it refuses exactly the records the live
projector refused (for the same reasons) and never stops at one; nothing is dead-lettered again.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from aiokafka import AIOKafkaConsumer, TopicPartition

from engram.settings import Settings
from projections.knowledge import load_knowledge
from projections.stores import TenantStores
from projections.tenant_graph import TenantGraph
from schemas import vocabulary as v
from schemas.events import Position
from streams import fetch_guard
from streams.keystore import KeyStore, ReadOnlyKeys
from streams.projector import Record, handle_batch_with_retries
from streams.topics import partition_count, partition_for

log = logging.getLogger(__name__)


async def replay_tenant(
    settings: Settings,
    tenant: str,
    root: Path,
    *,
    as_of_ms: int | None = None,
    until_offset: int | None = None,
    stores: TenantStores | None = None,
) -> TenantGraph | None:
    """Replay ``tenant``'s events (appended at or before ``as_of_ms``, at offsets before
    ``until_offset`` of its partition) into a store in ``root`` (or in ``stores``, when the caller
    wants its indexes too).

    None when no event of the tenant applies (the tenant does not exist at that point).
    """
    if not v.full_match(v.TENANT_RE, tenant):
        raise ValueError(f"not a tenant id: {tenant!r} (must match {v.TENANT_RE.pattern})")
    fetch_guard.install()
    partitions = await partition_count(settings, settings.events_topic)
    knowledge = load_knowledge(settings.ontology_dir.resolve(), settings.rules_dir.resolve())
    keys = ReadOnlyKeys(KeyStore(settings.key_store_dir))  # a forgotten memory's key is already gone
    stores = stores or TenantStores(root, knowledge=knowledge, keys=keys)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=settings.kafka_bootstrap,
        enable_auto_commit=False,
        group_id=None,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    try:
        tp = TopicPartition(settings.events_topic, partition_for(tenant, partitions))
        consumer.assign([tp])
        end = (await consumer.end_offsets([tp]))[tp]
        if until_offset is not None:
            end = min(end, until_offset)
        consumer.seek(tp, (await consumer.beginning_offsets([tp]))[tp])
        key, seen, started = tenant.encode(), 0, time.monotonic()

        def result() -> TenantGraph | None:
            return stores.get(tenant)  # None: no event of the tenant applied, as live

        async def no_dead_letters(_record: Record, _reason: str) -> None:
            return None

        while await consumer.position(tp) < end:
            fetched = (await consumer.getmany(tp, timeout_ms=1000, max_records=2000)).get(tp, [])
            done = any(m.offset >= end or (as_of_ms is not None and m.timestamp > as_of_ms) for m in fetched)
            records = [
                Record(m.key, m.value, list(m.headers), Position(m.partition, m.offset, m.timestamp))
                for m in fetched
                if m.key == key and m.offset < end and (as_of_ms is None or m.timestamp <= as_of_ms)
            ]
            # the same batches as live: a tenant's run planned together, committed once
            await handle_batch_with_retries(records, stores, no_dead_letters, partitions=partitions)
            seen += len(records)
            if done:
                return result()
            log.info(
                "replay %s: %d events, offset %d/%d, %.1fs",
                tenant,
                seen,
                await consumer.position(tp),
                end,
                time.monotonic() - started,
            )
        return result()
    finally:
        await consumer.stop()
