"""``engram produce``: JSON lines in, events on the log out; a bad line never stops the good ones."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from projections.knowledge import Knowledge
from projections.validation import check_property_names
from schemas import jsontext
from schemas.checks import InvalidEvent
from schemas.events import Event, event_from_json
from schemas.payloads import MemoryRemembered
from streams.embedder import Embedder, embedding_text
from streams.keystore import Keys, seal_event
from streams.producer import EventProducer, encode_checked

log = logging.getLogger(__name__)


@dataclass
class IngestReport:
    produced: int = 0
    failed: list[tuple[int, str]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failed


EMBED_BATCH = 64


NumberedObjects = list[tuple[int, Any]]  # (line number, a parsed JSON value)


def parse_lines(
    lines: Iterable[str],
    embedder: Embedder | None = None,
    knowledge: Knowledge | None = None,
    keys: Keys | None = None,
) -> tuple[list[tuple[int, Event]], list[tuple[int, str]]]:
    """Events from the good lines and (line number, reason) for every bad one; blank lines are
    skipped. A good line passed every check a producer makes (see ``prepare``)."""
    objects: NumberedObjects = []
    bad: list[tuple[int, str]] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            objects.append((number, jsontext.loads(line)))
        except jsontext.NotJson as exc:
            bad.append((number, str(exc)))
    good, refused = prepare(objects, embedder, knowledge, keys)
    return good, sorted([*bad, *((number, str(exc)) for number, exc in refused)])


def prepare(
    objects: NumberedObjects,
    embedder: Embedder | None = None,
    knowledge: Knowledge | None = None,
    keys: Keys | None = None,
) -> tuple[list[tuple[int, Event]], list[tuple[int, InvalidEvent]]]:
    """Events from JSON objects, each checked as every writer checks it (the domain rules, with
    ``knowledge`` the property names the rules reserve, the Avro schema, the log's size limit), so
    producing one cannot fail on its content. With an ``embedder``, a new memory without an
    embedding gets one (in batches), after its event id was derived from the object as written.
    With ``keys``, a memory event's personal parts are sealed (``streams.keystore``), embedding
    included. The API's commands and ``engram produce`` both use this."""
    built: list[tuple[int, Event]] = []
    bad: list[tuple[int, InvalidEvent]] = []
    for number, obj in objects:
        try:
            event = event_from_json(obj)
            if knowledge is not None:
                check_property_names(knowledge, event)
            built.append((number, event))
        except InvalidEvent as exc:
            bad.append((number, exc))
        except RecursionError:
            bad.append((number, InvalidEvent("the event is nested too deeply")))
    if embedder is not None:
        built = embed_missing(built, embedder)
    good: list[tuple[int, Event]] = []
    for number, event in built:
        try:
            if keys is not None:
                event = seal_event(event, keys)
            encode_checked(event)  # the Avro schema and the log's size limit, before anything is sent
            good.append((number, event))
        except InvalidEvent as exc:
            bad.append((number, exc))
    return good, bad


def embed_missing(events: list[tuple[int, Event]], embedder: Embedder) -> list[tuple[int, Event]]:
    """Every new memory without an embedding, embedded by ``embedder`` (so replay never embeds)."""
    todo = [
        (i, ev.payload)
        for i, (_, ev) in enumerate(events)
        if isinstance(ev.payload, MemoryRemembered) and ev.payload.embedding is None
    ]
    out = list(events)
    for start in range(0, len(todo), EMBED_BATCH):
        part = todo[start : start + EMBED_BATCH]
        texts = [embedding_text(memory.label, memory.content) for _, memory in part]
        for (i, memory), vector in zip(part, embedder.embed(texts), strict=True):
            number, ev = events[i]
            embedded = replace(
                memory, embedding=tuple(float(x) for x in vector), embedding_model=embedder.name
            )
            out[i] = (number, replace(ev, payload=embedded))
        if len(todo) > EMBED_BATCH:
            log.info("embedded %d/%d memories", min(start + EMBED_BATCH, len(todo)), len(todo))
    return out


async def produce_lines(
    producer: EventProducer,
    lines: Iterable[str],
    embedder: Embedder | None = None,
    knowledge: Knowledge | None = None,
    keys: Keys | None = None,
) -> IngestReport:
    good, bad = parse_lines(lines, embedder, knowledge, keys)
    report = IngestReport(failed=bad)
    chunk = 1000
    for start in range(0, len(good), chunk):
        part = good[start : start + chunk]
        await producer.send_many(ev for _, ev in part)
        report.produced += len(part)
        log.info("produced %d/%d events", report.produced, len(good))
    return report
