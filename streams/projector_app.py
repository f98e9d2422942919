"""The Faust app and its agent ``project_tenant_events``: the events topic, taken in batches and
handed to ``streams.projector``, dead letters (``streams.dead_letters``) as a topic of their own.
The app, its topics and its one agent are declared here and nowhere else."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import Any

import faust
from engram.projections.progress import Progress
from engram.projections.stores import TenantStores
from engram.schemas import vocabulary as v
from engram.schemas.events import Position
from engram.schemas.payloads import EVENT_TYPES
from engram.streams.codec import HEADER_EVENT_TYPE
from engram.streams.dead_letters import send_dead_letter
from engram.streams.faust_app import faust_app
from engram.streams.group import Membership
from engram.streams.held_acks import HeldAcks
from engram.streams.indexer import Indexer
from engram.streams.projector import Record, Result, handle_batch_with_retries
from engram.streams.take import BatchBound, take_available
from engram.streams.topics import partition_count
from faust.types import TP

from engram import metrics
from engram.settings import Settings

# a batch is taken once no record has joined it for BATCH_IDLE_S (a lone write is not held up) or
# ENGRAM_PROJECTOR_BATCH_MS after its first record, up to as many records as are handled in that
# time (a backlog is taken in batches that each take about that long)
BATCH_IDLE_S = 0.001
# a metric's event type label: one of the schema's (the header holds its full name), or "other"
KNOWN_TYPES = {f"{v.EVENT_NAMESPACE}.{name}": name for name in EVENT_TYPES}
REBALANCE_POLL_S = 0.1  # how soon a rebalance's held events are saved (it waits for them)

log = logging.getLogger(__name__)


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


def event_type(record: Record) -> str:
    """The record's ``event-type`` header as a metric label (a header that names no event type of
    the schema, as anyone producing straight to the topic may write, counts as ``other``)."""
    for key, value in record.headers:
        if key == HEADER_EVENT_TYPE:
            text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
            return KNOWN_TYPES.get(text, metrics.OTHER)
    return metrics.OTHER


class Reporter:
    """Reports a batch's records as handled: each tenant's run as it commits (a write waiting for
    it answers then, not after the whole batch), the rest (refused with no store, retried one by
    one) once the batch is done. Both ``Progress`` are told first which records the batch holds,
    so their watermarks (readiness) wait for the whole batch."""

    def __init__(self, records: list[Record], progress: Progress, indexer: Indexer) -> None:
        self.records, self.progress, self.indexer = records, progress, indexer
        self.reported = [False] * len(records)
        positions = [(r.position.partition, r.position.offset) for r in records]
        progress.taken(positions)
        indexer.progress.taken(positions)

    def _one(self, i: int, result: Result) -> None:
        pos = self.records[i].position
        self.progress.record(result.tenant, pos.partition, pos.offset, result.outcome)
        self.indexer.submit(result.tenant, pos, result.outcome, result.memory_ids)
        self.reported[i] = True
        metrics.events.labels(event_type(self.records[i]), result.outcome.status.value).inc()

    async def run(self, run: Sequence[tuple[int, Result]]) -> None:
        for i, result in run:
            self._one(i, result)
        await asyncio.sleep(0)  # the writes waiting for the run answer, the indexer starts on it

    def rest(self, results: Sequence[Result]) -> None:
        for i, result in enumerate(results):
            if not self.reported[i]:
                self._one(i, result)


def create_app(
    settings: Settings,
    stores: TenantStores,
    progress: Progress,
    indexer: Indexer,
    *,
    group: str | None = None,
    membership: Membership | None = None,
) -> faust.App:
    """The projector: one agent over the events topic, dead letters as a topic of their own.

    Each record is reported to ``progress`` (reads, ``?wait=true``) as soon as its tenant's run
    commits, and goes to the indexer, which reports it again once its memories are also
    searchable; the batch is reported in log order (readiness) once it is all handled. With
    held stores (in memory, or caches on disk of their snapshots) its offsets are committed only
    once snapshots hold it (``streams.held_acks``).

    ``membership`` is told of every rebalance (``streams.group``). With held stores a rebalance
    saves every unsaved tenant at once (the offsets it holds are then committed without waiting
    for the timer), and a revoked partition's tenants are dropped (cached on disk: deleted) before
    it may move.
    """
    group = group or settings.projector_group()
    app = faust_app(
        settings,
        group,
        "faust",
        url=membership.url if membership is not None else None,
        client_id=f"engram-{membership.kind}" if membership is not None else None,
    )
    held = HeldAcks(stores, lambda: app.consumer, settings.snapshot_after_s) if stores.held else None
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
            metrics.dead_letters.labels(event_type(record)).inc()
            await send_dead_letter(
                dead_letters,
                settings.events_topic,
                record.key,
                record.value,
                record.headers,
                reason,
                origin=record.position,
            )

        bound = BatchBound(settings.projector_batch_max, settings.projector_batch_ms / 1000)
        batches = take_available(stream, bound.limit, idle_s=BATCH_IDLE_S, within_s=bound.batch_s)
        async for items in batches:
            records = [as_record(item.message) for item in items]
            progress.batch(len(records))
            report = Reporter(records, progress, indexer)
            async with writing:
                started = time.perf_counter()
                results = await handle_batch_with_retries(
                    records,
                    stores,
                    sink,
                    partitions=partitions,
                    committed=report.run,
                    hold=progress.hold,
                    key_wait_s=settings.key_wait_s,
                )
                took = time.perf_counter() - started
                # the disk stores' memtables, bounded (they flush themselves only at 128 MB each)
                await stores.flush_over_budget(settings.store_write_buffer_mb << 20)
                bound.observe(len(records), took)
                metrics.batch_seconds.observe(took)
                metrics.batch_records.observe(len(records))
                await stores.trim()  # within the open tenants' budget; in memory, evictions save
                if held is not None:  # what they drop: before the acks are weighed
                    if held.stopping:
                        await held.save_due(everything=True)
                    held.hold(items)
            report.rest(results)
            if membership is not None:
                membership.handled()

    if held is not None:

        @app.timer(interval=max(0.5, settings.snapshot_after_s / 4))
        async def save_memory_stores() -> None:
            async with writing:
                await stores.trim()
                await held.save_due()

        @app.timer(interval=REBALANCE_POLL_S)
        async def save_for_rebalance() -> None:
            # a rebalance waits for every held event to be acked before it commits and moves on
            if app.rebalancing and held.held():
                async with writing:
                    await held.save_due(everything=True)

    if membership is not None:
        membership.group = group
        membership.assignor = app.assignor

        if stores.held:
            stores.owns = membership.owns

        async def drop_others(why: str) -> None:
            """Tenants whose partition is not this process's now leave it (saved first)."""
            async with writing:
                dropped = await stores.drop(membership.owns)
            if dropped:
                log.info("%s: %d tenants saved and dropped", why, dropped)

        @app.on_partitions_revoked.connect
        async def on_revoked(sender: Any, revoked: set[TP], **kwargs: Any) -> None:
            membership.revoked(revoked)
            # Faust has waited for every event to be acked: all are saved. In memory, the tenants
            # go now. Cached on disk, they stay until the assignment, which names those that moved
            # (every partition is revoked at each rebalance, and most come back; no other process
            # consumes one in between): deleting them here made each rebalance restore every
            # tenant. A process that stops deletes its copies as it leaves.
            if stores.memory or (held is not None and held.stopping):
                await drop_others(f"partitions {sorted(tp.partition for tp in revoked)} revoked")

        @app.on_partitions_assigned.connect
        async def on_assigned(sender: Any, assigned: set[TP], **kwargs: Any) -> None:
            membership.assigned(assigned)
            if stores.held:  # any opened meanwhile for a partition that is not ours; cached on
                # disk, the copies of the tenants that moved away
                await drop_others("assignment")

    return app
