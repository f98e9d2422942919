"""The conversations topic, projected: the Faust agent ``store_conversation_turns`` applies each
record to the conversation store (``projections.conversations``) and tells capture what changed.

A record is decoded and opened by the pipeline (``streams.pipeline.read_record``), checked as the
projector checks an event (its key is its tenant; what its actor's role alone refuses) and applied;
a record that is refused goes to the dead-letter topic with its reason and the stream goes on.
After each applied record an injected ``on_applied(tenant, conversation_id, applied)`` is called
(the extraction workflow's trigger: streams do not import the command layer that composes it).

Also here, because they hold the keys: :func:`read_turns` (a conversation's turns, unsealed, as
the extractors' ``Turn``) and :class:`ConversationLog`, the extraction workflow's writer of its
durable progress (``TurnsExtracted``) and of the dead letters of ranges it gave up on.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import faust
from aiokafka import AIOKafkaProducer
from engram.projections import governance
from engram.projections.batch import Outcome, Status
from engram.projections.conversation_rows import Applied
from engram.projections.conversations import ConversationStore
from engram.projections.progress import Progress
from engram.projections.seams import Keys
from engram.projections.validation import PLAN_ERRORS, rejection_reason
from engram.schemas import payloads as ev
from engram.schemas import vocabulary as v
from engram.schemas.checks import InvalidEvent
from engram.schemas.events import Actor, Position, event_from_json
from engram.streams import codec, fetch_guard
from engram.streams.dead_letters import send_dead_letter
from engram.streams.extraction.extractor import Turn
from engram.streams.faust_app import faust_app
from engram.streams.pipeline import Pipeline, open_event, read_record
from engram.streams.producer import back_off_failed_metadata
from engram.streams.projector import Record, record_tenant
from engram.streams.projector_app import as_record
from engram.streams.topics import DEAD_LETTER_MAX_BYTES

from engram.settings import Settings

log = logging.getLogger(__name__)

OnApplied = Callable[[str, str, Applied], Awaitable[None]]
DeadLetter = Callable[[Record, str], Awaitable[None]]
PROGRESS_NAMESPACE = uuid.UUID("0c9b7f52-3c1e-5a8d-b2f4-7e6a1d9c4b20")
EXTRACTOR_ACTOR = Actor("extractor", v.Role.PIPELINE.value)


def read_turns(
    store: ConversationStore, keys: Keys | None, tenant: str, conversation_id: str, after_seq: int = 0
) -> list[Turn]:
    """The conversation's turns after ``after_seq``, unsealed with their keys (a destroyed key reads
    as erased), as the extractors take them."""
    out = []
    for stored in store.turns(tenant, conversation_id, after_seq):
        event = open_event(stored.event, keys)
        p = event.payload
        assert isinstance(p, ev.ConversationTurn)
        out.append(
            Turn(
                conversation_id=p.conversation_id,
                turn_id=p.turn_id,
                seq=stored.seq,
                speaker=p.speaker,
                role=p.role.value,
                text=p.text,
                at=event.occurred_at,
            )
        )
    return out


async def handle_conversation_record(
    record: Record, store: ConversationStore, keys: Keys | None, dead_letter: DeadLetter
) -> tuple[str | None, Applied]:
    """Decode, check and apply one record of the conversations topic; a refused one is
    dead-lettered with its reason (once: a redelivered record at or below the checkpoint is
    skipped before anything else)."""
    tenant = record_tenant(record.key)
    if tenant is not None and store.checkpoint(tenant, record.position.partition) >= record.position.offset:
        return tenant, Applied(None, 0, False, False, Outcome(Status.SKIPPED))
    try:
        if (unreadable := fetch_guard.unreadable_reason(record.headers)) is not None:
            raise InvalidEvent(unreadable)
        if tenant is None:
            raise InvalidEvent(f"record key is not a tenant id: {record.key!r:.100}")
        event = read_record(record.value or b"", keys)
        if event.tenant != tenant:
            raise InvalidEvent(f"event tenant {event.tenant!r:.100} differs from record key {tenant!r}")
        reason = governance.role_refusal(event)
        if reason is not None:
            raise governance.Forbidden(reason)
    except (codec.UndecodableEvent, *PLAN_ERRORS) as exc:
        reason = rejection_reason(exc)
        await dead_letter(record, reason)
        if tenant is not None:  # the position moves past it, as the projector's does
            store.advance(tenant, record.position)
        return tenant, Applied(None, 0, False, False, Outcome(Status.REJECTED, reason))
    applied = store.apply(tenant, event, record.position)
    if applied.outcome.status is Status.REJECTED:
        await dead_letter(record, applied.outcome.reason or "rejected")
    return tenant, applied


def create_conversations_app(
    settings: Settings,
    store: ConversationStore,
    keys: Keys | None,
    *,
    on_applied: OnApplied | None = None,
    progress: Progress | None = None,
) -> faust.App:
    """The conversations agent, its own consumer group (``<projector group>-conversations``).
    ``progress`` hears of every handled record (``?wait=true`` on a turn); ``on_applied`` of every
    applied one (capture's trigger; its failure is logged, never stops the stream)."""
    app = faust_app(settings, settings.projector_group() + "-conversations", "faust-conversations")
    conversations = app.topic(settings.conversations_topic, internal=False)
    dead_letters = app.topic(settings.dead_letters_topic, internal=False)

    async def sink(record: Record, reason: str) -> None:
        await send_dead_letter(
            dead_letters,
            settings.conversations_topic,
            record.key,
            record.value,
            record.headers,
            reason,
            origin=record.position,
        )

    @app.agent(conversations, name="store_conversation_turns")
    async def store_conversation_turns(stream: faust.StreamT) -> None:
        async for event in stream.events():
            record = as_record(event.message)
            tenant, applied = await handle_conversation_record(record, store, keys, sink)
            if progress is not None:
                progress.record(tenant, record.position.partition, record.position.offset, applied.outcome)
            if (
                on_applied is not None
                and tenant is not None
                and applied.conversation_id is not None
                and applied.outcome.status is Status.APPLIED
            ):
                try:
                    await on_applied(tenant, applied.conversation_id, applied)
                except Exception:  # capture's trouble is not the store's: the stream goes on
                    log.exception("on_applied failed for %s/%s", tenant, applied.conversation_id)

    return app


@dataclass
class _DeadLetters:
    """``send_dead_letter``'s topic, over a plain producer."""

    producer: AIOKafkaProducer
    topic: str

    async def send(self, *, key: bytes | None, value: bytes | None, headers: Sequence[Any]) -> Any:
        return await self.producer.send(self.topic, key=key, value=value, headers=list(headers))


class ConversationLog:
    """The extraction workflow's durable outcomes: ``TurnsExtracted`` on the conversations topic
    (its progress; the store reads it back) and dead letters of the ranges it gave up on. Both are
    awaited until the log holds them. ``store`` names the turn a progress record ends at."""

    def __init__(self, settings: Settings, store: ConversationStore | None = None) -> None:
        self.settings = settings
        self.store = store
        self._producer = AIOKafkaProducer(
            bootstrap_servers=settings.kafka_bootstrap,
            enable_idempotence=True,
            acks="all",
            max_request_size=DEAD_LETTER_MAX_BYTES,
        )
        back_off_failed_metadata(self._producer.client)  # its records wait out an outage too

    async def start(self) -> None:
        await self._producer.start()

    async def stop(self) -> None:
        await self._producer.stop()

    async def extracted(
        self,
        tenant: str,
        conversation_id: str,
        *,
        through_seq: int,
        memory_ids: Sequence[str],
        extractor: str,
        failed_reason: str | None = None,
        through_turn_id: str | None = None,
    ) -> Position:
        """Append the progress record (its event id follows from the range: a re-run's is the same)."""
        turn_id = through_turn_id or self._turn_id(tenant, conversation_id, through_seq)
        name = f"{tenant}\x00{conversation_id}\x00{through_seq}"
        event = event_from_json(
            {
                "type": "TurnsExtracted",
                "tenant": tenant,
                "source": v.Source.EXTRACTION.value,
                "actor": EXTRACTOR_ACTOR.to_avro(),
                "event_id": str(uuid.uuid5(PROGRESS_NAMESPACE, name)),
                "payload": {
                    "conversation_id": conversation_id,
                    "through_seq": through_seq,
                    "through_turn_id": turn_id,
                    "memory_ids": list(memory_ids),
                    "extractor": extractor,
                    "failed_reason": failed_reason[:4096] if failed_reason else None,
                },
            }
        )
        framed = Pipeline().frame(event)
        meta = await (
            await self._producer.send(
                self.settings.conversations_topic,
                key=framed.key,
                value=framed.value,
                headers=framed.headers(),
            )
        )
        return Position(meta.partition, meta.offset, meta.timestamp)

    def _turn_id(self, tenant: str, conversation_id: str, seq: int) -> str:
        if self.store is not None:
            found = self.store.turns(tenant, conversation_id, after_seq=seq - 1)
            if found and found[0].seq == seq:
                return found[0].turn_id
        return f"seq-{seq}"

    async def dead_letter(
        self, tenant: str, conversation_id: str, first_seq: int, through_seq: int, reason: str
    ) -> None:
        """A dead letter naming the tenant, conversation and turn range, with the reason."""
        note = f"extraction of {tenant}/{conversation_id} turns {first_seq}-{through_seq} failed: {reason}"
        await send_dead_letter(
            _DeadLetters(self._producer, self.settings.dead_letters_topic),
            self.settings.conversations_topic,
            tenant.encode(),
            None,
            [
                ("conversation-id", conversation_id.encode()),
                ("turn-range", f"{first_seq}-{through_seq}".encode()),
            ],
            note,
            origin=Position(-1, -1),
        )
