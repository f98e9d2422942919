"""One tenant's events read back from the log, a page at a time: for audit and for the events route.

The log is the truth (DESIGN §2), so an auditor reads it, not a projection: every event of the
tenant in log order, bounded by system time (the record's log-append timestamp) or by log
position (``partition:offset``), optionally of some types only. A tenant's events are all on the
one partition its key hashes to, so a position is an offset on that partition and a page's
``next`` cursor is simply where the scan stopped.

Records are read as the projector screens them (``streams.projector._screen``): one that cannot
be parsed, decoded, unsealed or validated, or whose envelope names another tenant, is counted in
``skipped`` and passed over, never raised. Memory content is unsealed with the key store; a
forgotten memory's key is gone, so its content reads as erased, as it does everywhere else.

Reading is split so that :func:`fetch_records` ("records of partition p from offset o") is the
only place that touches Kafka's records: reading archived segments below Kafka's earliest offset
belongs there, and nothing above it has to change.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from engram.projections.seams import Keys
from engram.schemas import vocabulary as v
from engram.schemas.checks import InvalidEvent, parse_time, show
from engram.schemas.events import Event, validate
from engram.schemas.payloads import EVENT_TYPES, PAYLOADS, thaw
from engram.streams import codec, fetch_guard
from engram.streams.keystore import KeyStore, ReadOnlyKeys
from engram.streams.pipeline import open_event
from engram.streams.topics import partition_count, partition_for

from engram.settings import Settings

log = logging.getLogger(__name__)

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
# Records looked at per page, the tenant's and its partition neighbours' alike: a narrow filter
# over a long log answers a short (even empty) page with a ``next`` instead of scanning it all.
SCAN_BUDGET = 10_000
FETCH_TIMEOUT_MS = 1000
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
POSITION_RE = re.compile(r"([0-9]{1,9}):([0-9]{1,18})")


class EventLogQueryError(ValueError):
    """A query the log cannot answer as asked; ``param`` names the query parameter at fault."""

    def __init__(self, param: str, reason: str) -> None:
        super().__init__(reason)
        self.param = param


@dataclass(frozen=True)
class LogRecord:
    """A record as the log holds it: where, when, and its bytes (from Kafka or, later, an archive)."""

    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: Sequence[tuple[str, bytes | None]] = ()


@dataclass(frozen=True)
class EventPage:
    """A page of a tenant's events in log order; ``next`` continues it (None: nothing after)."""

    events: list[dict[str, Any]]
    next: str | None
    skipped: int = 0  # records of the tenant passed over: unreadable, undecodable or invalid


@dataclass(frozen=True)
class _Bound:
    """A ``from``/``to`` as given: a log time (ms) or an offset on the tenant's partition."""

    time_ms: int | None = None
    offset: int | None = None


@dataclass
class _Scan:
    events: list[dict[str, Any]] = field(default_factory=list)
    skipped: int = 0


def position(partition: int, offset: int) -> str:
    return f"{partition}:{offset}"


def iso_ms(value: datetime | int) -> str:
    """A time as the API writes times: UTC, milliseconds, ``Z``."""
    if isinstance(value, int):
        value = datetime.fromtimestamp(value / 1000, UTC)
    return value.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def check_types(types: Sequence[str]) -> frozenset[str]:
    """The event type names asked for; an unknown one is refused with the known ones listed."""
    for name in types:
        if not isinstance(name, str) or name not in PAYLOADS:
            raise EventLogQueryError(
                "type", f"unknown event type {show(name)}; one of: {', '.join(EVENT_TYPES)}"
            )
    return frozenset(types)


def check_limit(limit: Any) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise EventLogQueryError(
            "limit", f"limit must be an integer from 1 to {MAX_LIMIT}, got {show(limit)}"
        )
    return limit


def parse_position(text: str, param: str, partition: int | None) -> int:
    """The offset of a ``partition:offset`` on the tenant's partition (another's is refused; None:
    any partition, to check the syntax before the log is asked which partition is the tenant's)."""
    found = POSITION_RE.fullmatch(text)
    if found is None:
        raise EventLogQueryError(param, f"{param}: not a partition:offset position: {show(text)}")
    if partition is not None and int(found.group(1)) != partition:
        raise EventLogQueryError(
            param,
            f"{param}: position {text} is on partition {found.group(1)}; "
            f"this tenant's events are on partition {partition}",
        )
    return int(found.group(2))


def parse_bound(text: str | None, param: str, partition: int | None) -> _Bound | None:
    """``text`` as a position when it starts like one (digits and a colon), else as an ISO-8601 time."""
    if text is None:
        return None
    if re.match(r"[0-9]+:", text):
        return _Bound(offset=parse_position(text, param, partition))
    try:
        when = parse_time(text, param)
    except InvalidEvent as exc:
        hint = " (a '+' in a URL is a space: send it as %2B, or use Z)" if " " in text else ""
        raise EventLogQueryError(
            param, f"{param}: neither an ISO-8601 time nor a partition:offset position: {show(text)}{hint}"
        ) from exc
    return _Bound(time_ms=max(0, (when - EPOCH) // timedelta(milliseconds=1)))  # exact, no float


async def read_events(
    settings: Settings,
    tenant: str,
    *,
    start: str | None = None,
    end: str | None = None,
    types: Sequence[str] = (),
    limit: int = DEFAULT_LIMIT,
    cursor: str | None = None,
    keys: Keys | None = None,
    vectors: bool = False,
) -> EventPage:
    """A page of ``tenant``'s events, in log order, from ``start`` (inclusive) to ``end`` (exclusive).

    ``start``/``end`` are each an ISO-8601 time (compared with the log-append time) or a
    ``partition:offset``; ``cursor`` is a previous page's ``next`` (give the same bounds and types
    again). ``types`` keeps only those event types. A page may hold fewer than ``limit`` events,
    even none, and still have a ``next``: each page looks at no more than ``SCAN_BUDGET`` records.
    ``vectors`` keeps embedding vectors (left out by default: hundreds of numbers no auditor
    reads; ``embedding_dim`` says how many there were). Raises :class:`EventLogQueryError` (a
    ValueError) for a query that cannot be answered, LookupError when the events topic does not
    exist, TimeoutError or aiokafka's errors when the broker does not answer.
    """
    if not v.full_match(v.TENANT_RE, tenant):
        raise EventLogQueryError(
            "tenant", f"not a tenant id: {show(tenant)} (must match {v.TENANT_RE.pattern})"
        )
    wanted = check_types(types)
    limit = check_limit(limit)
    # the syntax first, so a bad query costs no trip to the broker (the partition is checked below)
    if _inverted(parse_bound(start, "from", None), parse_bound(end, "to", None)):
        raise EventLogQueryError("from", f"from ({start}) is after to ({end})")
    if cursor is not None:
        parse_position(cursor, "cursor", None)
    fetch_guard.install()  # an unparseable record is handed on (and skipped), not raised forever
    keys = keys if keys is not None else ReadOnlyKeys(KeyStore(settings.key_store_dir))
    topic = settings.events_topic
    tp = TopicPartition(topic, partition_for(tenant, await partition_count(settings, topic)))
    first, last = parse_bound(start, "from", tp.partition), parse_bound(end, "to", tp.partition)
    after = parse_position(cursor, "cursor", tp.partition) if cursor is not None else None
    consumer = AIOKafkaConsumer(
        bootstrap_servers=settings.kafka_bootstrap,
        enable_auto_commit=False,
        group_id=None,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    try:
        source = KafkaRecords(consumer, tp)
        lo, hi = await _range(consumer, tp, first, last)
        offset, budget, key, scan = max(lo, after or 0), SCAN_BUDGET, tenant.encode(), _Scan()
        while offset < hi and budget > 0 and len(scan.events) < limit:
            for record in await source.fetch(offset, hi, min(budget, 2000)):
                budget -= 1
                offset = record.offset + 1
                if record.key == key and _in_time(record, first, last):
                    _take(record, tenant, wanted, keys, vectors, scan)
                    if len(scan.events) >= limit:
                        break
            else:
                offset = max(offset, source.next_offset)  # past a gap the log may have
        return EventPage(scan.events, position(tp.partition, offset) if offset < hi else None, scan.skipped)
    finally:
        await consumer.stop()


def _inverted(first: _Bound | None, last: _Bound | None) -> bool:
    """``from`` after ``to``, when both are times or both positions (mixed ones cannot be told
    apart without the log, and an empty range is then the answer)."""
    if first is None or last is None:
        return False
    if first.time_ms is not None and last.time_ms is not None:
        return first.time_ms > last.time_ms
    return first.offset is not None and last.offset is not None and first.offset > last.offset


async def _range(
    consumer: AIOKafkaConsumer, tp: TopicPartition, first: _Bound | None, last: _Bound | None
) -> tuple[int, int]:
    """The offsets to read, ``[lo, hi)``: the bounds resolved (a time by ``offsets_for_times``, so
    a late ``from`` does not scan from zero) within what Kafka holds now."""
    earliest = (await consumer.beginning_offsets([tp]))[tp]
    log_end = (await consumer.end_offsets([tp]))[tp]
    lo = max(earliest, await _offset(consumer, tp, first, log_end) if first is not None else 0)
    hi = min(log_end, await _offset(consumer, tp, last, log_end) if last is not None else log_end)
    return lo, hi


async def _offset(consumer: AIOKafkaConsumer, tp: TopicPartition, bound: _Bound, log_end: int) -> int:
    """The first offset at or after ``bound``: the offset itself, or the first record appended at
    or after the time (the log's end when there is none)."""
    if bound.offset is not None:
        return bound.offset
    assert bound.time_ms is not None
    found = (await consumer.offsets_for_times({tp: bound.time_ms}))[tp]
    return log_end if found is None else int(found.offset)


class KafkaRecords:
    """Records of one partition as Kafka holds them. ``fetch`` is the one place records come from:
    archived segments older than Kafka's earliest offset would be read there, by offset."""

    STALLS = 10  # empty fetches in a row (of FETCH_TIMEOUT_MS each) before the broker is given up on

    def __init__(self, consumer: AIOKafkaConsumer, tp: TopicPartition) -> None:
        self.consumer, self.tp = consumer, tp
        self.consumer.assign([tp])
        self.next_offset = -1  # where the consumer stands: a seek there would drop what it prefetched

    async def fetch(self, offset: int, end: int, max_records: int) -> list[LogRecord]:
        """Records of the partition from ``offset`` and before ``end``, at most ``max_records``
        (at least one, unless there is a gap at ``offset``); ``next_offset`` is where they end."""
        for _ in range(self.STALLS):
            if offset != self.next_offset:
                self.consumer.seek(self.tp, offset)
            got = await self.consumer.getmany(self.tp, timeout_ms=FETCH_TIMEOUT_MS, max_records=max_records)
            self.next_offset = await self.consumer.position(self.tp)
            records = [
                LogRecord(m.partition, m.offset, m.timestamp, m.key, m.value, list(m.headers))
                for m in got.get(self.tp, [])
                if offset <= m.offset < end
            ]
            if records or self.next_offset > offset:
                return records
        raise TimeoutError(f"no records from {self.tp.topic}:{self.tp.partition} at offset {offset}")


def _in_time(record: LogRecord, first: _Bound | None, last: _Bound | None) -> bool:
    """Time bounds hold per record too: ``offsets_for_times`` assumes append times never go back."""
    if first is not None and first.time_ms is not None and record.timestamp_ms < first.time_ms:
        return False
    return not (last is not None and last.time_ms is not None and record.timestamp_ms >= last.time_ms)


def _take(
    record: LogRecord, tenant: str, wanted: frozenset[str], keys: Keys, vectors: bool, scan: _Scan
) -> None:
    """Add the record's event to the page if it is of a wanted type; count it if it is poison."""
    try:
        if (reason := fetch_guard.unreadable_reason(record.headers)) is not None:
            raise InvalidEvent(reason)
        event = codec.decode(record.value or b"")
        if wanted and event.type not in wanted:
            return  # not unsealed, not validated: nothing of it is shown
        event = open_event(event, keys)
        if event.tenant != tenant:
            raise InvalidEvent(f"event tenant {event.tenant!r:.100} differs from record key {tenant!r}")
        validate(event)
    except Exception as exc:  # poison of any kind (a bad key file too): skipped and counted, never raised
        log.debug("event log of %s: skipped %d:%d: %s", tenant, record.partition, record.offset, exc)
        scan.skipped += 1
        return
    scan.events.append(event_json(event, record, vectors=vectors))


def event_json(event: Event, record: LogRecord, *, vectors: bool = False) -> dict[str, Any]:
    """An event as JSON: its envelope, where and when the log recorded it, and its payload (the
    seal left out: its plaintext, or the erased form, is what the payload shows)."""
    payload = {k: _jsonable(val) for k, val in event.payload.to_record().items() if k != "sealed"}
    if not vectors and "embedding" in payload:
        vector = payload.pop("embedding")
        payload["embedding_dim"] = len(vector) if vector is not None else None
    return {
        "position": position(record.partition, record.offset),
        "partition": record.partition,
        "offset": record.offset,
        "recorded_at": iso_ms(record.timestamp_ms),
        "event_id": event.event_id,
        "type": event.type,
        "tenant": event.tenant,
        "occurred_at": iso_ms(event.occurred_at),
        "actor": {"id": event.actor.id, "role": event.actor.role, "on_behalf_of": event.actor.on_behalf_of},
        "source": event.source,
        "purpose": event.purpose,
        "correlation_id": event.correlation_id,
        "payload": payload,
    }


def _jsonable(value: Any) -> Any:
    value = thaw(value)
    if isinstance(value, datetime):
        return iso_ms(value)
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, Mapping):
        return {str(k): _jsonable(x) for k, x in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(x) for x in value]
    return value
