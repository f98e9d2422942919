"""The Faust app and its agent ``project_tenant_events``: the events topic, taken in batches and
handed to ``streams.projector``, dead letters (``streams.dead_letters``) as a topic of their own.
The app, its topics and its one agent are declared here and nowhere else."""

from __future__ import annotations

import asyncio
from typing import Any

import faust
from engram.projections.progress import Progress
from engram.projections.stores import TenantStores
from engram.schemas.events import Position
from engram.streams.dead_letters import send_dead_letter
from engram.streams.faust_app import faust_app
from engram.streams.held_acks import HeldAcks
from engram.streams.indexer import Indexer
from engram.streams.projector import Record, handle_batch_with_retries
from engram.streams.take import take_available
from engram.streams.topics import partition_count

from engram.settings import Settings

# a batch is taken once no record has joined it for BATCH_IDLE_S (a lone write is not held up) or
# BATCH_WITHIN_S after its first record (a backlog is taken in batches of up to the maximum)
BATCH_IDLE_S = 0.001
BATCH_WITHIN_S = 0.5


def as_record(message: object) -> Record:
    """A Faust message as the projector's ``Record``."""
    msg: Any = message
    headers = msg.headers or []
    if isinstance(headers, dict):
        headers = headers.items()
    return Record(
        msg.key,
        msg.value,
        list(headers),
        Position(msg.partition, msg.offset, round((msg.timestamp or 0) * 1000)),
    )


def create_app(settings: Settings, stores: TenantStores, progress: Progress, indexer: Indexer) -> faust.App:
    """The projector: one agent over the events topic, dead letters as a topic of their own.

    Each handled record is reported to ``progress`` (reads, readiness) at once, and goes to the
    indexer, which reports it again once its memories are also searchable. With stores in memory
    its offsets are committed only once snapshots hold it (``streams.held_acks``).
    """
    app = faust_app(settings, settings.projector_group(), "faust")
    held = HeldAcks(stores, lambda: app.consumer, settings.snapshot_after_s) if stores.memory else None
    # the agent's batches and the timer's snapshots, one at a time
    writing = held.writing if held is not None else asyncio.Lock()
    app.held_acks = held  # type: ignore[attr-defined]
    events = app.topic(settings.events_topic, internal=False)
    dead_letters = app.topic(settings.dead_letters_topic, internal=False)

    @app.agent(events, name="project_tenant_events")
    async def project_tenant_events(stream: faust.StreamT) -> None:
        partitions = await partition_count(settings, settings.events_topic)
        # what is available, up to a batch: a lone write waits BATCH_IDLE_S for company

        async def sink(record: Record, reason: str) -> None:
            await send_dead_letter(
                dead_letters,
                settings.events_topic,
                record.key,
                record.value,
                record.headers,
                reason,
                origin=record.position,
            )

        batches = take_available(
            stream, settings.projector_batch_max, idle_s=BATCH_IDLE_S, within_s=BATCH_WITHIN_S
        )
        async for items in batches:
            records = [as_record(item.message) for item in items]
            progress.batch(len(records))
            async with writing:
                results = await handle_batch_with_retries(records, stores, sink, partitions=partitions)
                if held is not None:
                    await stores.trim()  # evictions save what they drop: before the acks are weighed
                    if held.stopping:
                        await held.save_due(everything=True)
                    held.hold(items)
            for record, result in zip(records, results, strict=True):
                progress.record(
                    result.tenant, record.position.partition, record.position.offset, result.outcome
                )
                indexer.submit(result.tenant, record.position, result.outcome, result.memory_ids)

    if held is not None:

        @app.timer(interval=max(0.5, settings.snapshot_after_s / 4))
        async def save_memory_stores() -> None:
            async with writing:
                await stores.trim()
                await held.save_due()

    return app
