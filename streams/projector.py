"""The Faust app and its agent ``project_tenant_events``: the log, projected into tenants' stores.

``handle_record`` is the whole of what happens to one record, shared by the live agent and by
replay, so a replayed store is built by exactly the code that built the live one. Errors are a
stream of their own: a record that cannot be decoded, validated or applied goes to the
dead-letter topic with its reason and the stream goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import faust
from aiokafka.errors import MessageSizeTooLargeError

from engram.settings import Settings
from projections.plan import no_facts
from projections.progress import Progress
from projections.stores import StoreLocked, TenantStores
from projections.tenant_graph import Outcome, Status
from projections.validation import PLAN_ERRORS, checked_plan, rejection_reason
from schemas import payloads as ev
from schemas import sealing
from schemas import vocabulary as v
from schemas.checks import InvalidEvent
from schemas.events import Event, Position, validate
from streams import codec, fetch_guard
from streams.indexer import Indexer
from streams.keystore import open_event
from streams.topics import DEAD_LETTER_MAX_BYTES, partition_count, partition_for

log = logging.getLogger(__name__)

Headers = Sequence[tuple[str, bytes]]
DeadLetterSink = Callable[[bytes | None, bytes | None, Headers, str], Awaitable[None]]


@dataclass(frozen=True)
class Record:
    """One Kafka record as the projector sees it."""

    key: bytes | None
    value: bytes | None
    headers: Headers
    position: Position


@dataclass(frozen=True)
class Result:
    tenant: str | None
    outcome: Outcome
    memory_ids: tuple[str, ...] = ()  # memories whose searchable text or vector the event changed


def reindexes(event: Event) -> str | None:
    """The memory whose searchable text or vector ``event`` changes, if any."""
    p = event.payload
    return p.memory_id if isinstance(p, ev.MemoryEvent) and p.reindexes else None


def record_tenant(key: bytes | None) -> str | None:
    """The tenant a record's key names, or None if the key is not a tenant id."""
    try:
        tenant = (key or b"").decode("utf-8")
    except UnicodeDecodeError:
        return None
    return tenant if v.full_match(v.TENANT_RE, tenant) else None


async def handle_record(
    record: Record, stores: TenantStores, dead_letter: DeadLetterSink, *, partitions: int
) -> Result:
    """Decode, validate and apply one record; dead-letter it with a reason if any step refuses.

    Every refusal here is deterministic (the same bytes against the same facts), so replay,
    which runs this same function, refuses the same records. A refused record never creates a
    tenant's store: only an event that applies does. ``partitions`` is the events topic's
    partition count: a tenant's events are on the one partition its key hashes to, the only one
    its replay reads, so a record anywhere else is refused live too (and leaves the tenant's
    checkpoint, which is a position on its own partition, alone).
    """
    tenant = record_tenant(record.key)
    home = tenant is not None and record.position.partition == partition_for(tenant, partitions)
    graph = stores.get(tenant) if home and tenant is not None else None
    if graph is not None and graph.already_applied(record.position):
        return Result(tenant, Outcome(Status.SKIPPED))

    headers = [(k, val) for k, val in record.headers if k != fetch_guard.UNREADABLE]

    async def refuse(reason: str) -> Result:
        if graph is not None:
            await dead_letter(record.key, record.value, headers, reason)
            graph.reject(record.position)
        elif not stores.refused_before(record.position):  # not dead-lettered before a crash
            await dead_letter(record.key, record.value, headers, reason)
            stores.note_refused(record.position)
        return Result(tenant, Outcome(Status.REJECTED, reason))

    if (unreadable := fetch_guard.unreadable_reason(record.headers)) is not None:
        return await refuse(unreadable)
    if tenant is None:
        return await refuse(f"record key is not a tenant id: {record.key!r:.100}")
    if not home:
        return await refuse(
            f"record of tenant {tenant!r} is on partition {record.position.partition}, not on "
            f"{partition_for(tenant, partitions)}, the one its key hashes to (its replay reads only that)"
        )
    try:
        event = open_event(codec.decode(record.value or b""), stores.keys)
        if event.tenant != tenant:
            raise InvalidEvent(f"event tenant {event.tenant!r:.100} differs from record key {tenant!r}")
        validate(event)
        if graph is None:  # a tenant's first event: only one that applies creates the store
            checked_plan(stores.knowledge, event, record.position, no_facts())
    except (codec.UndecodableEvent, *PLAN_ERRORS) as exc:
        return await refuse(rejection_reason(exc))

    graph = graph or stores.get(tenant, create=True)
    assert graph is not None
    erase = None
    if isinstance(forgotten := event.payload, ev.MemoryForgotten) and (keys := stores.keys) is not None:
        erase = functools.partial(keys.destroy, tenant, sealing.key_id(forgotten.memory_id))
    outcome = graph.apply(event, record.position, before_commit=erase)
    if outcome.status is Status.REJECTED:
        await dead_letter(record.key, record.value, headers, outcome.reason or "rejected")
    touched = reindexes(event) if outcome.status is Status.APPLIED else None
    return Result(tenant, outcome, (touched,) if touched else ())


MAX_ATTEMPTS = 5
LOCKED_RETRY_S = 5.0


async def handle_with_retries(
    record: Record, stores: TenantStores, sink: DeadLetterSink, *, partitions: int
) -> Result:
    """An unexpected error (disk, a bug) is retried with backoff before the record is given up
    on: dead-lettered with the error, and the tenant's position moved past it. A store another
    process holds is no fault of the record's: it is waited for, however long, and nothing is
    dead-lettered or skipped meanwhile."""
    attempt = 0
    while True:
        attempt += 1
        try:
            return await handle_record(record, stores, sink, partitions=partitions)
        except StoreLocked as exc:
            attempt = 0
            pos = record.position
            log.error("%s; the record at %d:%d waits for it", exc, pos.partition, pos.offset)
            await asyncio.sleep(LOCKED_RETRY_S)
            continue
        except Exception as exc:
            pos = record.position
            if attempt < MAX_ATTEMPTS:
                log.warning(
                    "projection failed at %d:%d (attempt %d): %s; retrying",
                    pos.partition,
                    pos.offset,
                    attempt,
                    exc,
                )
                await asyncio.sleep(min(0.1 * 2**attempt, 5.0))
                continue
            log.exception("projection failed at %d:%d; dead-lettering", pos.partition, pos.offset)
            reason = f"projection error after {attempt} attempts: {type(exc).__name__}: {exc}"
            await sink(record.key, record.value, record.headers, reason)
            tenant = record_tenant(record.key)
            with contextlib.suppress(Exception):
                if tenant is not None and (graph := stores.get(tenant)) is not None:
                    graph.reject(pos)
            return Result(None, Outcome(Status.REJECTED, reason))


DROPPED_HEADER = "dead-letter-dropped"


def too_large(exc: BaseException | None) -> bool:
    """Whether the broker or the client refused a record for its size, anywhere in the chain."""
    while exc is not None:
        if isinstance(exc, MessageSizeTooLargeError):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def create_app(settings: Settings, stores: TenantStores, progress: Progress, indexer: Indexer) -> faust.App:
    """The projector: one agent over the events topic, dead letters as a topic of their own.

    Each handled record is reported to ``progress`` (reads, readiness) at once, and goes to the
    indexer, which reports it again once its memories are also searchable.
    """
    fetch_guard.install()
    app = faust.App(
        settings.projector_group(),
        broker=f"kafka://{settings.kafka_bootstrap}",
        web_enabled=False,
        datadir=str(settings.data_dir / "faust"),
        store="memory://",
        key_serializer="raw",
        value_serializer="raw",
        consumer_auto_offset_reset="earliest",
        producer_acks=-1,
        producer_max_request_size=DEAD_LETTER_MAX_BYTES,
        topic_replication_factor=1,
        topic_partitions=settings.events_partitions,
        broker_commit_every=200,
        broker_commit_interval=1.0,
        # a worker that died (kill -9) leaves the group after this, not after Faust's 60 s default
        broker_session_timeout=10.0,
        broker_heartbeat_interval=2.0,
    )
    events = app.topic(settings.events_topic, internal=False)
    dead_letters = app.topic(settings.dead_letters_topic, internal=False)

    async def send_dead_letter(
        key: bytes | None, value: bytes | None, headers: Headers, reason: str, *, origin: Position
    ) -> None:
        extra = [
            (codec.HEADER_REASON, reason[:2000].encode("utf-8", "backslashreplace")),
            ("original-topic", settings.events_topic.encode()),
            ("original-partition", str(origin.partition).encode()),
            ("original-offset", str(origin.offset).encode()),
        ]
        kept = [(k, val) for k, val in headers if isinstance(k, str) and isinstance(val, bytes)]
        try:
            fut = await dead_letters.send(key=key, value=value, headers=[*kept, *extra])
            await fut  # durable before the position moves past the record
        except Exception as exc:
            if not too_large(exc):
                raise
            # a record at the broker's size limit plus our headers can exceed it (older topics
            # lack the larger dead-letter limit): keep the reason and where the bytes still are
            size = len(value or b"") + sum(len(val) for _, val in kept)
            dropped = (DROPPED_HEADER, f"{size} bytes of value and headers; read them at the origin".encode())
            fut = await dead_letters.send(
                key=key[:1024] if key else key, value=None, headers=[*extra, dropped]
            )
            await fut
        log.warning("dead-lettered %r@%d:%d: %s", key, origin.partition, origin.offset, reason[:500])

    @app.agent(events, name="project_tenant_events")
    async def project_tenant_events(stream: faust.StreamT) -> None:
        partitions = await partition_count(settings, settings.events_topic)
        async for item in stream.events():
            msg = item.message
            position = Position(msg.partition, msg.offset, round((msg.timestamp or 0) * 1000))
            raw_headers = msg.headers or []
            if isinstance(raw_headers, dict):
                raw_headers = raw_headers.items()
            record = Record(msg.key, msg.value, list(raw_headers), position)

            async def sink(
                key: bytes | None,
                value: bytes | None,
                headers: Headers,
                reason: str,
                _pos: Position = position,
            ) -> None:
                await send_dead_letter(key, value, headers, reason, origin=_pos)

            result = await handle_with_retries(record, stores, sink, partitions=partitions)
            progress.record(result.tenant, position.partition, position.offset, result.outcome)
            indexer.submit(result.tenant, position, result.outcome, result.memory_ids)

    return app
