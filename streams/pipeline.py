"""The one way between a write and the log's bytes, and back: the ``eventsourcing`` mapper's job.

A write (an HTTP request's fields or a JSON line) becomes a :class:`Framed`: checked as every
writer checks it, embedded, sealed once (``schemas.sealing``, under keys from ``streams.keystore``)
and encoded once (``streams.codec``), with the event the projector will read back from those bytes
beside them, so the API decides on that event and appends the same bytes, and nothing is encoded,
decoded or unsealed again on the way. Bytes become an event here too (:meth:`Pipeline.read`),
for the projector and the log's readers. :meth:`Pipeline.precheck` is the projector's own decision
(``projections.validation.checked_plan``, governance first) for a writer with the tenant's facts,
and :meth:`Pipeline.precheck_offline` the part of it that needs none, for ``engram produce``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence, Set
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from engram.projections import governance
from engram.projections.batch import Overlay
from engram.projections.knowledge import Knowledge
from engram.projections.plan import no_facts
from engram.projections.seams import Keys
from engram.projections.tenant_graph import TenantGraph
from engram.projections.validation import PLAN_ERRORS, check_property_names, checked_plan, rejection_reason
from engram.schemas import jsontext, sealing
from engram.schemas import payloads as ev
from engram.schemas.checks import InvalidEvent
from engram.schemas.events import Event, Position, event_from_json, validate
from engram.streams import codec
from engram.streams.embedder import Embedder, embedding_text
from engram.streams.keystore import KeyErased, KeyStore

log = logging.getLogger(__name__)

# aiokafka's max_request_size and the broker's message.max.bytes are both about 1 MiB; an event
# must leave room for the key, the headers and the batch framing around it.
MAX_EVENT_BYTES = 1_000_000
EMBED_BATCH = 64
NOWHERE = Position(0, 0)  # where a pre-checked event is planned: the log has not placed it yet

NumberedObjects = Sequence[tuple[int, Any]]  # (line number, a parsed JSON value)


class EventTooLarge(InvalidEvent):
    """An event whose encoding the log would refuse: the writer's fault, not the log's."""


@dataclass(frozen=True)
class Framed:
    """An event and its bytes, made together: ``value`` is what the log will hold (sealed), ``event``
    what the projector will read back from it (plaintext, at Avro's precision)."""

    event: Event
    value: bytes

    @property
    def key(self) -> bytes:
        return self.event.tenant.encode()

    def headers(self) -> list[tuple[str, bytes]]:
        return codec.headers(self.event)


class Pipeline:
    """Check, embed, seal and encode writes; decode and open records. ``knowledge`` adds the
    property names the loaded rules reserve; without ``keys`` nothing is sealed (and a sealed
    record reads as erased); without an ``embedder`` a memory keeps the vector it was sent with."""

    def __init__(
        self, knowledge: Knowledge | None = None, keys: Keys | None = None, embedder: Embedder | None = None
    ) -> None:
        self.knowledge = knowledge
        self.keys = keys
        self.embedder = embedder

    # -- a write into bytes ------------------------------------------------------------------
    def write(self, obj: Any) -> Framed:
        """One write (an event's JSON form), framed; raises InvalidEvent with every reason."""
        good, bad = self.write_many([(0, obj)])
        if bad:
            raise bad[0][1]
        return good[0][1]

    def write_many(
        self, objects: NumberedObjects
    ) -> tuple[list[tuple[int, Framed]], list[tuple[int, InvalidEvent]]]:
        """Frames of the good objects, and (number, reason) for every bad one: ``draft_many`` then
        ``finish_many``. A good one passed every check a writer makes (the domain rules, the reserved
        names, the Avro schema, the log's size limit), so producing it cannot fail on its content."""
        drafts, bad = self.draft_many(objects)
        good: list[tuple[int, Framed]] = []
        for (number, _), done in zip(drafts, self.finish_many([d for _, d in drafts]), strict=True):
            if isinstance(done, Framed):
                good.append((number, done))
            else:
                bad.append((number, done))
        return good, bad

    def draft(self, obj: Any) -> Event:
        """One write (an event's JSON form) as the event the projector will read, before anything
        costly: not embedded, not sealed, not encoded (``finish_many``). Raises InvalidEvent."""
        drafts, bad = self.draft_many([(0, obj)])
        if bad:
            raise bad[0][1]
        return drafts[0][1]

    def draft_many(
        self, objects: NumberedObjects
    ) -> tuple[list[tuple[int, Event]], list[tuple[int, InvalidEvent]]]:
        """Events of the good objects, checked by the domain rules and the reserved names, at the
        log's precision (``as_read``), and (number, reason) for every bad one. Cheap: what a write
        is decided on (authorised, pre-checked) before it costs an embedding or a key."""
        built: list[tuple[int, Event]] = []
        bad: list[tuple[int, InvalidEvent]] = []
        for number, obj in objects:
            try:
                event = event_from_json(obj)
                if self.knowledge is not None:
                    check_property_names(self.knowledge, event)
                built.append((number, as_read(event)))
            except InvalidEvent as exc:
                bad.append((number, exc))
            except RecursionError:
                bad.append((number, InvalidEvent("the event is nested too deeply")))
        return built, bad

    def finish_many(self, events: Sequence[Event]) -> list[Framed | InvalidEvent]:
        """Each event embedded if it is a new memory without a vector (in batches, after its event
        id was derived from the object as written), sealed and encoded (``frame``), or the reason
        the log would refuse it. Native work that releases the GIL: run it off the event loop."""
        numbered = list(enumerate(events))
        if self.embedder is not None:
            numbered = embed_missing(numbered, self.embedder)
        if self.keys is not None:
            make_keys(self.keys, events)
        out: list[Framed | InvalidEvent] = []
        for _, event in numbered:
            try:
                out.append(self.frame(event))
            except InvalidEvent as exc:
                out.append(exc)
        return out

    def frame(self, event: Event) -> Framed:
        """``event`` sealed (if it is not yet) and encoded, once; raises InvalidEvent (EventTooLarge)
        for what the Avro schema or the log would refuse."""
        if self.keys is not None:
            event = seal(event, self.keys)
        value = codec.encode(event)
        if len(value) > MAX_EVENT_BYTES:
            raise EventTooLarge(
                f"the event is {len(value):,} bytes encoded; the limit is {MAX_EVENT_BYTES:,}"
            )
        return Framed(as_read(event), value)

    # -- bytes into an event -----------------------------------------------------------------
    def read(self, data: bytes) -> Event:
        """A record's value as an event, opened and checked as the projector checks it: raises
        ``codec.UndecodableEvent`` or InvalidEvent with the reason it is refused."""
        return read_record(data, self.keys)

    # -- the projector's decision, before the log ---------------------------------------------
    def precheck(self, event: Event, graph: TenantGraph | None, teams: Set[str] | None = None) -> None:
        """What the projection would decide for ``event`` now, against the tenant's ``graph`` (None:
        a tenant with no events yet), before it is appended to the log: the projector's own
        ``checked_plan``, governance first. Raises ``AlreadyApplied`` for a retry of an applied
        event, ``Conflict`` for a taken memory id or a reused event id, and another of
        ``PLAN_ERRORS`` for an event it would reject. With a token's ``teams``, the governance
        check is made with them first."""
        if teams is not None:
            governance.check(event, Overlay(graph.store) if graph is not None else no_facts(), teams)
        if graph is not None:
            graph.prepare(event, NOWHERE)
        else:
            assert self.knowledge is not None, "a pre-check needs the loaded knowledge"
            checked_plan(self.knowledge, event, NOWHERE, no_facts())

    def precheck_offline(self, event: Event) -> None:
        """The part of the projection's decision that needs no tenant facts, for a writer that holds
        none (``engram produce``): what the actor's role refuses, and (with the loaded knowledge) for
        an event that names no existing memory, the whole decision (scope, reserved names, derived
        classes, shapes) against a tenant with no facts. A refusal here is one against any facts."""
        reason = governance.role_refusal(event)
        if reason is not None:
            raise governance.Forbidden(reason)
        if ev.on_conversations_topic(event.payload):  # the conversation store decides the rest
            return
        if self.knowledge is not None and not governance.references(event.payload):
            self.precheck(event, None)


def read_record(data: bytes, keys: Keys | None) -> Event:
    """``Pipeline.read`` for a reader that holds only keys (the projector, the log's readers)."""
    event = open_event(codec.decode(data), keys)
    validate(event)
    return event


def seal(event: Event, keys: Keys) -> Event:
    """``event`` with a memory payload's (or a turn's) personal parts sealed under its key (made on
    first use). Raises InvalidEvent for a key that was destroyed (its memory was forgotten, its
    conversation erased)."""
    p = event.payload
    if not isinstance(p, sealing.SealablePayload) or p.sealed is not None:
        return event
    try:
        key = keys.data_key(event.tenant, sealing.key_of(p), create=True)
    except KeyErased as exc:
        if isinstance(p, ev.ConversationTurn):
            raise InvalidEvent(
                f"turn {p.turn_id} of conversation {p.conversation_id} was erased; it is not written again"
            ) from exc
        raise InvalidEvent(f"memory {p.memory_id} was forgotten; nothing more is written about it") from exc
    assert key is not None
    return replace(event, payload=sealing.seal(p, key, sealing.aad_of(event.tenant, event.event_id, p)))


def make_keys(keys: Keys, events: Sequence[Event]) -> None:
    """The data keys a batch will be sealed with that do not exist yet, made together before any
    is sealed (``KeyStore.make_many``: their fsyncs overlap), not one after another."""
    if isinstance(keys, KeyStore):
        keys.make_many(
            (e.tenant, sealing.key_of(e.payload))
            for e in events
            if isinstance(e.payload, sealing.SealablePayload) and e.payload.sealed is None
        )


def open_event(event: Event, keys: Keys | None) -> Event:
    """``event`` with its personal parts readable, or erased when the key is gone (or no key store)."""
    p = event.payload
    if not isinstance(p, sealing.SealablePayload) or p.sealed is None:
        return event
    if p.sealed.key_id != sealing.key_of(p):
        raise InvalidEvent(f"sealed with key {p.sealed.key_id!r:.100}, not {sealing.key_of(p)!r:.100}")
    key = keys.data_key(event.tenant, p.sealed.key_id) if keys is not None else None
    return replace(event, payload=sealing.unseal(p, key, sealing.aad_of(event.tenant, event.event_id, p)))


def as_read(event: Event) -> Event:
    """``event`` as decoding its encoding (and unsealing it with its key) gives it back: times in UTC
    at millisecond precision, a vector's components as a float32 holds them. The rest already is:
    the builder fills Avro's defaults and freezes what Avro would, and sealing keeps the plaintext
    (``tests/streams/test_pipeline.py`` holds the two equal for every event type)."""
    p = event.payload
    if isinstance(p, ev.MemoryRemembered):
        p = replace(
            p,
            expires_at=_millis(p.expires_at) if p.expires_at is not None else None,
            embedding=sealing.float32s(p.embedding) if p.embedding is not None else None,
        )
    elif isinstance(p, ev.ClockTicked):
        p = replace(p, now=_millis(p.now))
    return replace(event, occurred_at=_millis(event.occurred_at), payload=p)


def _millis(t: datetime) -> datetime:
    return t.astimezone(UTC).replace(microsecond=t.microsecond // 1000 * 1000)


def needs_embedding(event: Event) -> bool:
    """A new memory written without a vector: the writer embeds it (so replay never embeds)."""
    return isinstance(event.payload, ev.MemoryRemembered) and event.payload.embedding is None


def embed_missing(events: list[tuple[int, Event]], embedder: Embedder) -> list[tuple[int, Event]]:
    """Every new memory without an embedding, embedded by ``embedder`` (so replay never embeds)."""
    todo = [(i, e.payload) for i, (_, e) in enumerate(events) if needs_embedding(e)]
    out = list(events)
    for start in range(0, len(todo), EMBED_BATCH):
        part = todo[start : start + EMBED_BATCH]
        texts = [embedding_text(memory.label, memory.content) for _, memory in part]
        for (i, memory), vector in zip(part, embedder.embed(texts), strict=True):
            number, e = events[i]
            embedded = replace(memory, embedding=tuple(vector.tolist()), embedding_model=embedder.name)
            out[i] = (number, replace(e, payload=embedded))
        if len(todo) > EMBED_BATCH:
            log.info("embedded %d/%d memories", min(start + EMBED_BATCH, len(todo)), len(todo))
    return out


def parse_lines(
    lines: Iterable[str], pipeline: Pipeline | None = None, *, offline_check: bool = False
) -> tuple[list[tuple[int, Framed]], list[tuple[int, str]]]:
    """Frames of the good lines and (line number, reason) for every bad one, in line order; blank
    lines are skipped. With ``offline_check``, a line the projector would refuse whatever the
    tenant's facts (``Pipeline.precheck_offline``) is a bad line too."""
    pipeline = pipeline or Pipeline()
    objects: list[tuple[int, Any]] = []
    bad: list[tuple[int, str]] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            objects.append((number, jsontext.loads(line)))
        except jsontext.NotJson as exc:
            bad.append((number, str(exc)))
    framed, refused_writes = pipeline.write_many(objects)
    good: list[tuple[int, Framed]] = []
    refused: list[tuple[int, BaseException]] = [*refused_writes]
    for number, f in framed:
        try:
            if offline_check:
                pipeline.precheck_offline(f.event)
            good.append((number, f))
        except PLAN_ERRORS as exc:
            refused.append((number, exc))
    return good, sorted([*bad, *((number, rejection_reason(exc)) for number, exc in refused)])
