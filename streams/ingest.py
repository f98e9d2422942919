"""``engram produce``: JSON lines in, events on the log out; a bad line never stops the good ones."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

from schemas.events import Event, InvalidEvent, event_from_json
from streams.producer import EventProducer, encode_checked

log = logging.getLogger(__name__)


@dataclass
class IngestReport:
    produced: int = 0
    failed: list[tuple[int, str]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failed


def parse_lines(lines: Iterable[str]) -> tuple[list[tuple[int, Event]], list[tuple[int, str]]]:
    """Events from the good lines and (line number, reason) for every bad one; blank lines are
    skipped. A good line passed every check a producer makes (domain rules, Avro, size), so
    producing it cannot fail on its content."""
    good: list[tuple[int, Event]] = []
    bad: list[tuple[int, str]] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            parsed = event_from_json(json.loads(line, object_pairs_hook=_unique_keys))
            encode_checked(parsed)  # the Avro schema and the log's size limit, before anything is sent
            good.append((number, parsed))
        except json.JSONDecodeError as exc:
            bad.append((number, f"not JSON: {exc.msg} at column {exc.colno}"))
        except InvalidEvent as exc:
            bad.append((number, str(exc)))
    return good, bad


def _unique_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    """A JSON object whose keys repeat says two things at once; refuse it rather than pick one."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        repeated = sorted({k for k, _ in pairs if k in seen or seen.add(k)})  # type: ignore[func-returns-value]
        raise InvalidEvent(f"repeated keys in a JSON object: {', '.join(repeated)}")
    return out


async def produce_lines(producer: EventProducer, lines: Iterable[str]) -> IngestReport:
    good, bad = parse_lines(lines)
    report = IngestReport(failed=bad)
    chunk = 1000
    for start in range(0, len(good), chunk):
        part = good[start : start + chunk]
        await producer.send_many(ev for _, ev in part)
        report.produced += len(part)
        log.info("produced %d/%d events", report.produced, len(good))
    return report
