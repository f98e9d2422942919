"""Events as immutable records, built from JSON at the edges and checked against the domain rules.

The Avro schemas in ``avro/`` say what an event *is*; this module adds what Avro cannot say
(ranges, id shapes, which fields a revision may clear) so the API, ``engram produce`` and the
projector all reject the same things with the same reasons.
"""

from __future__ import annotations

import hashlib
import json
import math
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

from schemas import vocabulary as v

EVENT_ID_NAMESPACE = uuid.UUID("6f1c1a52-58a9-4f55-9d0e-0b1b8f4f2a11")
MAX_EMBEDDING_DIM = 4096
FLOAT32_MAX = 3.4028234663852886e38  # an Avro float; beyond it a component would be stored as inf


class InvalidEvent(ValueError):
    """An event that breaks its contract; the message is the reason shown to the caller."""


class Conflict(InvalidEvent):
    """A valid event that contradicts what the log already holds (an id taken, an id reused)."""


@dataclass(frozen=True)
class Actor:
    id: str
    role: str


@dataclass(frozen=True)
class Event:
    """One immutable fact in the past tense. ``type`` is the payload's schema name."""

    event_id: str
    tenant: str
    occurred_at: datetime
    actor: Actor
    source: str
    type: str
    payload: Mapping[str, Any]
    purpose: str | None = None
    correlation_id: str | None = None

    @property
    def full_type(self) -> str:
        return f"{v.EVENT_NAMESPACE}.{self.type}"

    def to_avro(self) -> dict[str, Any]:
        return {
            "event_id": self.event_id,
            "tenant": self.tenant,
            "occurred_at": self.occurred_at,
            "actor": {"id": self.actor.id, "role": self.actor.role},
            "source": self.source,
            "purpose": self.purpose,
            "correlation_id": self.correlation_id,
            "payload": (self.full_type, dict(self.payload)),
        }

    @classmethod
    def from_avro(cls, record: Mapping[str, Any]) -> Event:
        name, payload = record["payload"]
        return cls(
            event_id=str(record["event_id"]),
            tenant=record["tenant"],
            occurred_at=record["occurred_at"],
            actor=Actor(**record["actor"]),
            source=record["source"],
            type=name.rsplit(".", 1)[-1],
            payload=MappingProxyType(dict(payload)),
            purpose=record.get("purpose"),
            correlation_id=record.get("correlation_id"),
        )


@dataclass(frozen=True)
class Position:
    """Where the log recorded an event: system time is the append timestamp and the offset."""

    partition: int
    offset: int
    timestamp_ms: int = field(default=0, compare=False)


def parse_time(value: Any, what: str) -> datetime:
    """A UTC-aware time at millisecond precision, the precision Avro keeps."""
    parsed = _parse_time(value, what)
    return parsed.replace(microsecond=parsed.microsecond // 1000 * 1000)


def _parse_time(value: Any, what: str) -> datetime:
    try:
        parsed = _parse_any_time(value, what)
        parsed.astimezone(UTC).timestamp()  # representable as UTC and as Avro timestamp-millis
    except InvalidEvent:
        raise
    except (OverflowError, OSError, ValueError) as exc:
        raise InvalidEvent(f"{what}: time out of range: {value!r}") from exc
    return parsed


def _parse_any_time(value: Any, what: str) -> datetime:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return datetime.fromtimestamp(value / 1000, UTC)
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError as exc:
            raise InvalidEvent(f"{what}: not an ISO-8601 time: {value!r}") from exc
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    raise InvalidEvent(f"{what}: expected an ISO-8601 time, got {type(value).__name__}")


def mint_memory_id(event_id: str) -> str:
    """A new memory's id follows from its event id, so producing the same event twice is safe."""
    return str(uuid.uuid5(EVENT_ID_NAMESPACE, f"memory:{event_id}"))


def event_from_json(obj: Any) -> Event:
    """Build an event from its JSON form (the shape ``engram produce`` reads, one per line).

    ``event_id`` defaults to a uuid5 of the line's content, ``occurred_at`` to now and a new
    memory's ``memory_id`` to one derived from the event id.
    """
    if not isinstance(obj, dict):
        raise InvalidEvent("an event must be a JSON object")
    unknown = set(obj) - {
        "type",
        "tenant",
        "source",
        "actor",
        "payload",
        "event_id",
        "occurred_at",
        "purpose",
        "correlation_id",
    }
    if unknown:
        raise InvalidEvent(f"unknown envelope fields: {', '.join(sorted(unknown))}")
    for key in ("type", "tenant", "source", "actor", "payload"):
        if key not in obj:
            raise InvalidEvent(f"missing envelope field {key!r}")
    etype = obj["type"]
    if etype not in v.EVENT_TYPES:
        raise InvalidEvent(f"unknown event type {_show(etype)}; one of: {', '.join(v.EVENT_TYPES)}")
    actor = obj["actor"]
    if not (
        isinstance(actor, dict)
        and set(actor) == {"id", "role"}
        and all(isinstance(x, str) for x in actor.values())
    ):
        raise InvalidEvent("actor must be an object with string 'id' and 'role' (and nothing else)")
    payload = obj["payload"]
    if not isinstance(payload, dict):
        raise InvalidEvent("payload must be a JSON object")
    for key in ("tenant", "source", "event_id", "purpose", "correlation_id"):
        if obj.get(key) is not None and not isinstance(obj[key], str):
            raise InvalidEvent(f"{key} must be a string, got {type(obj[key]).__name__}")
    hostile = list(_hostile_values(obj, "event"))
    if hostile:
        raise InvalidEvent("; ".join(hostile))
    event_id = obj.get("event_id") or str(
        uuid.uuid5(EVENT_ID_NAMESPACE, json.dumps(obj, sort_keys=True, default=str))
    )
    try:
        event_id = str(uuid.UUID(event_id))  # one event, one id: the canonical lowercase form
    except ValueError as exc:
        raise InvalidEvent(f"event_id must be a UUID, got {_show(event_id)}") from exc
    payload = _payload_from_json(etype, dict(payload), event_id)
    occurred = obj.get("occurred_at")
    event = Event(
        event_id=event_id,
        tenant=obj["tenant"],
        occurred_at=parse_time(occurred or datetime.now(UTC), "occurred_at"),
        actor=Actor(id=actor["id"], role=actor["role"]),
        source=obj["source"],
        type=etype,
        payload=MappingProxyType(payload),
        purpose=obj.get("purpose"),
        correlation_id=obj.get("correlation_id"),
    )
    validate(event)
    return event


def _payload_from_json(etype: str, payload: dict[str, Any], event_id: str) -> dict[str, Any]:
    if etype == "MemoryRemembered":
        payload.setdefault("memory_id", mint_memory_id(event_id))
        payload.setdefault("stakeholders", {"user_id": None, "team_ids": []})
        if isinstance(payload["stakeholders"], dict):
            payload["stakeholders"] = {"user_id": None, "team_ids": [], **payload["stakeholders"]}
        if payload.get("expires_at") is not None:
            payload["expires_at"] = parse_time(payload["expires_at"], "expires_at")
    if etype == "ClockTicked" and "now" in payload:
        payload["now"] = parse_time(payload["now"], "now")
    return payload


class _Problems:
    """Every broken rule of one event, so a caller fixes a line once rather than once per rule."""

    def __init__(self) -> None:
        self.reasons: list[str] = []

    def require(self, cond: bool, reason: str) -> bool:
        if not cond:
            self.reasons.append(reason)
        return cond

    def id(self, value: Any, what: str) -> bool:
        return self.require(
            v.full_match(v.ID_RE, value), f"{what} must match {v.ID_RE.pattern}, got {_show(value)}"
        )

    def name(self, value: Any, what: str) -> bool:
        return self.require(
            v.full_match(v.NAME_RE, value), f"{what} must match {v.NAME_RE.pattern}, got {_show(value)}"
        )

    def importance(self, value: Any) -> None:
        self.require(
            isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 5,
            f"importance must be an integer 1-5, got {_show(value)}",
        )

    def number(self, value: Any, what: str, low: float | None = None, high: float | None = None) -> bool:
        ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        ok = ok and (low is None or value >= low) and (high is None or value <= high)
        bounds = "" if low is None else f" {low:g}-{high:g}" if high is not None else f" >= {low:g}"
        return self.require(ok, f"{what} must be a finite number{bounds}, got {_show(value)}")

    def text(self, value: Any, what: str, limit: int) -> None:
        self.require(
            isinstance(value, str) and value.strip() != "" and len(value) <= limit,
            f"{what} must be a non-empty string of at most {limit} characters",
        )

    def raise_if_any(self) -> None:
        if self.reasons:
            raise InvalidEvent("; ".join(dict.fromkeys(self.reasons)))


def _show(value: Any) -> str:
    """A value in a reason, cut short: reasons travel in headers and HTTP bodies."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _hostile_values(value: Any, where: str) -> Iterator[str]:
    """Non-finite numbers, integers Avro's long cannot hold (a union would turn them into doubles)
    and strings that are not valid Unicode (lone surrogates), anywhere."""
    if isinstance(value, float) and not math.isfinite(value):
        yield f"{where}: numbers must be finite, got {value!r}"
    elif isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**63:
        yield f"{where}: integers must fit in 64 bits, got {_show(value)}"
    elif isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            yield f"{where}: text must be valid Unicode (no lone surrogates)"
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _hostile_values(key, where)
            yield from _hostile_values(item, f"{where}.{key}" if isinstance(key, str) else where)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _hostile_values(item, where)


def validate(event: Event) -> None:
    """Raise :class:`InvalidEvent` naming every broken domain rule; Avro checks the types."""
    c = _Problems()
    for field_name in ("event_id", "tenant", "source", "purpose", "correlation_id"):
        c.reasons.extend(_hostile_values(getattr(event, field_name), field_name))
    c.reasons.extend(_hostile_values([event.actor.id, event.actor.role], "actor"))
    c.reasons.extend(_hostile_values(event.payload, "payload"))
    c.raise_if_any()  # nothing below may see a value that cannot become a literal
    c.require(
        v.full_match(v.TENANT_RE, event.tenant),
        f"tenant must match {v.TENANT_RE.pattern}, got {_show(event.tenant)}",
    )
    c.require(event.source in v.SOURCES, f"source must be one of {', '.join(v.SOURCES)}")
    c.require(
        isinstance(event.actor.id, str)
        and isinstance(event.actor.role, str)
        and bool(event.actor.id.strip())
        and bool(event.actor.role.strip()),
        "actor id and role are required",
    )
    try:
        canonical_id = str(uuid.UUID(event.event_id))
    except (TypeError, ValueError, AttributeError):
        canonical_id = None
    c.require(
        canonical_id == event.event_id,
        f"event_id must be a UUID in canonical form, got {_show(event.event_id)}",
    )
    p = event.payload
    match event.type:
        case "MemoryRemembered":
            _validate_remembered(c, p)
        case "MemoryRevised":
            _validate_revised(c, p)
        case "MemorySuperseded":
            if c.id(p.get("memory_id"), "memory_id") & c.id(p.get("superseded_by"), "superseded_by"):
                c.require(p["memory_id"] != p["superseded_by"], "a memory cannot supersede itself")
        case "MemoryRestored" | "MemoryForgotten":
            c.id(p.get("memory_id"), "memory_id")
        case "KpiObserved":
            c.name(p.get("metric"), "metric")
            c.number(p.get("value"), "value")
        case "SpendObserved":
            c.name(p.get("platform"), "platform")
            c.require(
                v.full_match(v.CURRENCY_RE, p.get("currency")),
                "currency must be an ISO-4217 code such as USD",
            )
            c.number(p.get("amount"), "amount", 0)
        case "StakeholderChanged":
            c.id(p.get("user_id"), "user_id")
            for team in p.get("team_ids") or []:
                c.id(team, "team id")
        case _:
            pass
    c.raise_if_any()


def _validate_remembered(c: _Problems, p: Mapping[str, Any]) -> None:
    c.id(p.get("memory_id"), "memory_id")
    c.text(p.get("label"), "label", 512)
    c.text(p.get("content"), "content", 32_768)
    c.require(p.get("kind") in v.KINDS, f"kind must be one of {', '.join(v.KINDS)}")
    c.require(p.get("scope") in v.SCOPES, f"scope must be one of {', '.join(v.SCOPES)}")
    c.importance(p.get("importance"))
    c.number(p.get("confidence", 1.0), "confidence", 0, 1)
    cls = p.get("memory_class", "Memory")
    c.require(
        v.full_match(v.CLASS_RE, cls) and v.valid_iri(v.class_iri(cls)),
        f"memory_class must be a class name such as PerformanceTargetMemory, got {_show(cls)}",
    )
    holders = p.get("stakeholders") or {}
    if holders.get("user_id") is not None:
        c.id(holders["user_id"], "stakeholders.user_id")
    for team in holders.get("team_ids") or []:
        c.id(team, "stakeholders.team_ids")
    if p.get("scope") == "user":
        c.require(bool(holders.get("user_id")), "a user-scoped memory needs stakeholders.user_id")
    if p.get("scope") == "team":
        c.require(bool(holders.get("team_ids")), "a team-scoped memory needs stakeholders.team_ids")
    _check_properties(c, p.get("properties") or {})
    if p.get("replaces") is not None:
        c.id(p["replaces"], "replaces")
        c.require(p.get("replaces") != p.get("memory_id"), "a memory cannot replace itself")
    c.require(
        p.get("on_conflict", "ask") in v.ON_CONFLICT, f"on_conflict must be one of {', '.join(v.ON_CONFLICT)}"
    )
    emb = p.get("embedding")
    if emb is not None:
        c.require(
            len(emb) > 0 and p.get("embedding_model") is not None,
            "an embedding needs a non-empty vector and embedding_model",
        )
        c.require(len(emb) <= MAX_EMBEDDING_DIM, f"an embedding has at most {MAX_EMBEDDING_DIM} dimensions")
        c.require(
            all(isinstance(x, int | float) and math.isfinite(x) and abs(x) <= FLOAT32_MAX for x in emb),
            "an embedding's components must be finite 32-bit floats",
        )


def _validate_revised(c: _Problems, p: Mapping[str, Any]) -> None:
    c.id(p.get("memory_id"), "memory_id")
    changes = p.get("changes") or {}
    props = p.get("property_changes") or {}
    c.require(bool(changes) or bool(props), "a revision must change at least one field")
    for name, value in changes.items():
        if not c.require(
            name in v.REVISABLE_FIELDS,
            f"field {_show(name)} cannot be revised; one of {', '.join(v.REVISABLE_FIELDS)}",
        ):
            continue
        if value is None:
            c.require(name in v.CLEARABLE_FIELDS, f"field {name!r} is required and cannot be cleared")
            continue
        match name:
            case "label":
                c.text(value, "label", 512)
            case "content":
                c.text(value, "content", 32_768)
            case "kind":
                c.require(value in v.KINDS, f"kind must be one of {', '.join(v.KINDS)}")
            case "importance":
                c.importance(value)
            case "confidence":
                c.number(value, "confidence", 0, 1)
            case "expires_at":
                try:
                    parse_time(value, "expires_at")
                except InvalidEvent as exc:
                    c.reasons.append(str(exc))
    _check_properties(c, props)


def _check_properties(c: _Problems, props: Mapping[str, Any]) -> None:
    for key, value in props.items():
        if c.name(key, "property name"):
            c.require(key not in v.RESERVED_PROPERTIES, f"property name {key!r} is reserved by engram")
        if isinstance(value, str):
            c.require(len(value) <= 32_768, f"property {key!r} must be at most 32768 characters")


def content_digest(event: Event) -> str:
    """What an event says, for telling a retry (same id, same content) from a reused id.

    ``occurred_at`` is left out: a client that retries without one gets a new "now", and the same
    ``engram produce`` line produced twice has the same id but a later default time.
    """
    record = event.to_avro()
    record.pop("occurred_at")
    text = json.dumps(record, sort_keys=True, default=_json_default, ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat(timespec="milliseconds")
    if isinstance(value, Mapping):
        return dict(value)
    return str(value)
