"""Events as immutable records, built from JSON at the edges and checked against the domain rules.

The Avro schemas in ``avro/`` say what an event *is*; this module adds what Avro cannot say
(ranges, id shapes, which fields a revision may clear) so the API, ``engram produce`` and the
projector all reject the same things with the same reasons.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

from schemas import vocabulary as v

EVENT_ID_NAMESPACE = uuid.UUID("6f1c1a52-58a9-4f55-9d0e-0b1b8f4f2a11")


class InvalidEvent(ValueError):
    """An event that breaks its contract; the message is the reason shown to the caller."""


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
        raise InvalidEvent(f"unknown event type {etype!r}; one of: {', '.join(v.EVENT_TYPES)}")
    actor = obj["actor"]
    if not isinstance(actor, dict) or not {"id", "role"} <= set(actor):
        raise InvalidEvent("actor must be an object with 'id' and 'role'")
    payload = obj["payload"]
    if not isinstance(payload, dict):
        raise InvalidEvent("payload must be a JSON object")
    event_id = obj.get("event_id") or str(
        uuid.uuid5(EVENT_ID_NAMESPACE, json.dumps(obj, sort_keys=True, default=str))
    )
    payload = _payload_from_json(etype, dict(payload), event_id)
    occurred = obj.get("occurred_at")
    event = Event(
        event_id=str(event_id),
        tenant=obj["tenant"],
        occurred_at=parse_time(occurred or datetime.now(UTC), "occurred_at"),
        actor=Actor(id=str(actor["id"]), role=str(actor["role"])),
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


def _require(cond: bool, reason: str) -> None:
    if not cond:
        raise InvalidEvent(reason)


def _check_id(value: Any, what: str) -> None:
    _require(
        isinstance(value, str) and bool(v.ID_RE.match(value)),
        f"{what} must match {v.ID_RE.pattern}, got {value!r}",
    )


def _check_importance(value: Any) -> None:
    _require(
        isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 5,
        f"importance must be an integer 1-5, got {value!r}",
    )


def _check_confidence(value: Any) -> None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value <= 1
    _require(ok, f"confidence must be a number 0-1, got {value!r}")


def _check_text(value: Any, what: str, limit: int) -> None:
    _require(
        isinstance(value, str) and value.strip() != "" and len(value) <= limit,
        f"{what} must be a non-empty string of at most {limit} characters",
    )


def validate(event: Event) -> None:
    """Raise :class:`InvalidEvent` with the first broken domain rule; Avro checks types."""
    _require(
        isinstance(event.tenant, str) and bool(v.TENANT_RE.match(event.tenant)),
        f"tenant must match {v.TENANT_RE.pattern}, got {event.tenant!r}",
    )
    _require(event.source in v.SOURCES, f"source must be one of {', '.join(v.SOURCES)}")
    _require(bool(event.actor.id) and bool(event.actor.role), "actor id and role are required")
    try:
        uuid.UUID(event.event_id)
    except ValueError as exc:
        raise InvalidEvent(f"event_id must be a UUID, got {event.event_id!r}") from exc
    p = event.payload
    match event.type:
        case "MemoryRemembered":
            _validate_remembered(p)
        case "MemoryRevised":
            _validate_revised(p)
        case "MemorySuperseded":
            _check_id(p.get("memory_id"), "memory_id")
            _check_id(p.get("superseded_by"), "superseded_by")
            _require(p["memory_id"] != p["superseded_by"], "a memory cannot supersede itself")
        case "MemoryRestored" | "MemoryForgotten":
            _check_id(p.get("memory_id"), "memory_id")
        case "KpiObserved":
            _require(
                bool(v.NAME_RE.match(str(p.get("metric", "")))), f"metric must match {v.NAME_RE.pattern}"
            )
        case "SpendObserved":
            _require(
                bool(v.NAME_RE.match(str(p.get("platform", "")))), f"platform must match {v.NAME_RE.pattern}"
            )
            _require(
                bool(v.CURRENCY_RE.match(str(p.get("currency", "")))),
                "currency must be an ISO-4217 code such as USD",
            )
            _require(
                isinstance(p.get("amount"), int | float) and p["amount"] >= 0, "amount must be a number >= 0"
            )
        case "StakeholderChanged":
            _check_id(p.get("user_id"), "user_id")
        case _:
            pass


def _validate_remembered(p: Mapping[str, Any]) -> None:
    _check_id(p.get("memory_id"), "memory_id")
    _check_text(p.get("label"), "label", 512)
    _check_text(p.get("content"), "content", 32_768)
    _require(p.get("kind") in v.KINDS, f"kind must be one of {', '.join(v.KINDS)}")
    _require(p.get("scope") in v.SCOPES, f"scope must be one of {', '.join(v.SCOPES)}")
    _check_importance(p.get("importance"))
    _check_confidence(p.get("confidence", 1.0))
    cls = p.get("memory_class", "Memory")
    _require(
        isinstance(cls, str) and bool(v.CLASS_RE.match(cls)) and v.valid_iri(v.class_iri(cls)),
        f"memory_class must be a class name such as PerformanceTargetMemory, got {cls!r}",
    )
    holders = p.get("stakeholders") or {}
    if p["scope"] == "user":
        _require(bool(holders.get("user_id")), "a user-scoped memory needs stakeholders.user_id")
    if p["scope"] == "team":
        _require(bool(holders.get("team_ids")), "a team-scoped memory needs stakeholders.team_ids")
    _check_property_names(p.get("properties") or {})
    if p.get("replaces") is not None:
        _check_id(p["replaces"], "replaces")
    _require(
        p.get("on_conflict", "ask") in v.ON_CONFLICT, f"on_conflict must be one of {', '.join(v.ON_CONFLICT)}"
    )
    emb = p.get("embedding")
    if emb is not None:
        _require(
            len(emb) > 0 and p.get("embedding_model") is not None,
            "an embedding needs a non-empty vector and embedding_model",
        )


def _validate_revised(p: Mapping[str, Any]) -> None:
    _check_id(p.get("memory_id"), "memory_id")
    changes = p.get("changes") or {}
    props = p.get("property_changes") or {}
    _require(bool(changes) or bool(props), "a revision must change at least one field")
    for name, value in changes.items():
        _require(
            name in v.REVISABLE_FIELDS,
            f"field {name!r} cannot be revised; one of {', '.join(v.REVISABLE_FIELDS)}",
        )
        if value is None:
            _require(name in v.CLEARABLE_FIELDS, f"field {name!r} is required and cannot be cleared")
            continue
        match name:
            case "label":
                _check_text(value, "label", 512)
            case "content":
                _check_text(value, "content", 32_768)
            case "kind":
                _require(value in v.KINDS, f"kind must be one of {', '.join(v.KINDS)}")
            case "importance":
                _check_importance(value)
            case "confidence":
                _check_confidence(value)
            case "expires_at":
                parse_time(value, "expires_at")
    _check_property_names(props)


def _check_property_names(props: Mapping[str, Any]) -> None:
    for key in props:
        _require(bool(v.NAME_RE.match(key)), f"property name {key!r} must match {v.NAME_RE.pattern}")
        _require(key not in v.RESERVED_PROPERTIES, f"property name {key!r} is reserved by engram")
