"""``engram produce``: JSON lines in, events on the log out; a bad line never stops the good ones."""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from types import MappingProxyType

from schemas.events import Event, InvalidEvent, event_from_json
from streams.embedder import Embedder, embedding_text
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


def parse_lines(
    lines: Iterable[str], embedder: Embedder | None = None
) -> tuple[list[tuple[int, Event]], list[tuple[int, str]]]:
    """Events from the good lines and (line number, reason) for every bad one; blank lines are
    skipped. A good line passed every check a producer makes (domain rules, Avro, size), so
    producing it cannot fail on its content. With an ``embedder``, a new memory without an
    embedding gets one (in batches), after its event id was derived from the line as written."""
    parsed_lines: list[tuple[int, Event]] = []
    bad: list[tuple[int, str]] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            parsed_lines.append((number, event_from_json(json.loads(line, object_pairs_hook=_unique_keys))))
        except json.JSONDecodeError as exc:
            bad.append((number, f"not JSON: {exc.msg} at column {exc.colno}"))
        except InvalidEvent as exc:
            bad.append((number, str(exc)))
    if embedder is not None:
        parsed_lines = embed_missing(parsed_lines, embedder)
    good: list[tuple[int, Event]] = []
    for number, event in parsed_lines:
        try:
            encode_checked(event)  # the Avro schema and the log's size limit, before anything is sent
            good.append((number, event))
        except InvalidEvent as exc:
            bad.append((number, str(exc)))
    bad.sort()
    return good, bad


def embed_missing(events: list[tuple[int, Event]], embedder: Embedder) -> list[tuple[int, Event]]:
    """Every new memory without an embedding, embedded by ``embedder`` (so replay never embeds)."""
    todo = [
        i
        for i, (_, ev) in enumerate(events)
        if ev.type == "MemoryRemembered" and ev.payload.get("embedding") is None
    ]
    out = list(events)
    for start in range(0, len(todo), EMBED_BATCH):
        part = todo[start : start + EMBED_BATCH]
        texts = [embedding_text(events[i][1].payload["label"], events[i][1].payload["content"]) for i in part]
        for i, vector in zip(part, embedder.embed(texts), strict=True):
            number, ev = events[i]
            payload = {
                **ev.payload,
                "embedding": [float(x) for x in vector],
                "embedding_model": embedder.name,
            }
            out[i] = (number, dataclasses.replace(ev, payload=MappingProxyType(payload)))
        if len(todo) > EMBED_BATCH:
            log.info("embedded %d/%d memories", min(start + EMBED_BATCH, len(todo)), len(todo))
    return out


def _unique_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    """A JSON object whose keys repeat says two things at once; refuse it rather than pick one."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        repeated = sorted({k for k, _ in pairs if k in seen or seen.add(k)})  # type: ignore[func-returns-value]
        raise InvalidEvent(f"repeated keys in a JSON object: {', '.join(repeated)}")
    return out


async def produce_lines(
    producer: EventProducer, lines: Iterable[str], embedder: Embedder | None = None
) -> IngestReport:
    good, bad = parse_lines(lines, embedder)
    report = IngestReport(failed=bad)
    chunk = 1000
    for start in range(0, len(good), chunk):
        part = good[start : start + chunk]
        await producer.send_many(ev for _, ev in part)
        report.produced += len(part)
        log.info("produced %d/%d events", report.produced, len(good))
    return report
