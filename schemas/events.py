"""Events as immutable records: an envelope (who, when, for which tenant) around a typed payload.

Built from JSON at the edges (``event_from_json``) or from Avro by the codec, and checked by
``validate`` against what Avro cannot say, so the API, ``engram produce`` and the projector all
reject the same things with the same reasons.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from engram.schemas import ENVELOPE_FILE, avro_dir, sealing
from engram.schemas import vocabulary as v
from engram.schemas.checks import InvalidEvent, Problems, hostile_values, parse_time, show
from engram.schemas.conversation_payloads import natural_event_id
from engram.schemas.payloads import EVENT_ID_NAMESPACE, Payload, payload_class

DERIVED_FIELDS = frozenset({"occurred_at_given"})  # set by the builder, never written in JSON
# The JSON form: the Envelope's fields, with the payload's ``type`` beside it.
ENVELOPE_FIELDS = (
    "type",
    *(
        f["name"]
        for f in json.loads((avro_dir() / ENVELOPE_FILE).read_text())["fields"]
        if f["name"] not in DERIVED_FIELDS
    ),
)


def _record_schemas() -> dict[str, dict[str, Any]]:
    """Every named Avro record, by full name: its fields' defaults and its fields of record type."""
    out: dict[str, dict[str, Any]] = {}
    for path in avro_dir().glob("*.avsc"):
        schema = json.loads(path.read_text())
        if schema.get("type") != "record":
            continue
        name = f"{schema['namespace']}.{schema['name']}"
        out[name] = {
            "defaults": {f["name"]: f["default"] for f in schema["fields"] if "default" in f},
            "records": {f["name"]: f["type"] for f in schema["fields"] if isinstance(f["type"], str)},
        }
    return out


_RECORDS = _record_schemas()
REQUIRED_FIELDS = ("type", "tenant", "source", "actor", "payload")


@dataclass(frozen=True)
class Actor:
    """Who caused an event; an agent names the user it acts for (``on_behalf_of``)."""

    id: str
    role: str
    on_behalf_of: str | None = None

    def to_avro(self) -> dict[str, Any]:
        # on_behalf_of only when set: the JSON envelope's actor holds strings only (the digest
        # leaves a field at its default out either way)
        extra = {} if self.on_behalf_of is None else {"on_behalf_of": self.on_behalf_of}
        return {"id": self.id, "role": self.role, **extra}

    @property
    def acting_user(self) -> str:
        """The user the change is made for: an agent's principal, anyone else themselves."""
        return self.on_behalf_of or self.id


@dataclass(frozen=True)
class Event:
    """One immutable fact in the past tense; its type is its payload's class."""

    event_id: str
    tenant: str
    occurred_at: datetime
    actor: Actor
    source: str
    payload: Payload
    purpose: str | None = None
    correlation_id: str | None = None
    occurred_at_given: bool = False  # False: occurred_at is when the event was built, not the writer's

    @property
    def type(self) -> str:
        return type(self.payload).__name__

    @property
    def full_type(self) -> str:
        return f"{v.EVENT_NAMESPACE}.{self.type}"

    def to_avro(self) -> dict[str, Any]:
        """The record the log holds: a sealed payload's personal parts only as ciphertext."""
        return {
            "event_id": self.event_id,
            "tenant": self.tenant,
            "occurred_at": self.occurred_at,
            "actor": self.actor.to_avro(),
            "source": self.source,
            "purpose": self.purpose,
            "correlation_id": self.correlation_id,
            "occurred_at_given": self.occurred_at_given,
            "payload": (self.full_type, sealing.wire(self.payload).to_record()),
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
            payload=payload_class(name.rsplit(".", 1)[-1]).from_record(payload),
            purpose=record.get("purpose"),
            correlation_id=record.get("correlation_id"),
            occurred_at_given=bool(record.get("occurred_at_given", False)),
        )


@dataclass(frozen=True)
class Position:
    """Where the log recorded an event: system time is the append timestamp and the offset."""

    partition: int
    offset: int
    timestamp_ms: int = field(default=0, compare=False)


def event_from_json(obj: Any) -> Event:
    """Build an event from its JSON form (the shape ``engram produce`` reads, one per line).

    ``event_id`` defaults to a uuid5 of the line's content, ``occurred_at`` to now and a new
    memory's ``memory_id`` to one derived from the event id. Every broken rule of the envelope
    and the payload is named at once, before anything is built from them.
    """
    if not isinstance(obj, dict):
        raise InvalidEvent("an event must be a JSON object")
    unknown = set(obj) - set(ENVELOPE_FIELDS)
    if unknown:
        raise InvalidEvent(f"unknown envelope fields: {', '.join(sorted(map(str, unknown)))}")
    for key in REQUIRED_FIELDS:
        if key not in obj:
            raise InvalidEvent(f"missing envelope field {key!r}")
    cls = payload_class(obj["type"])
    actor = obj["actor"]
    if not (
        isinstance(actor, dict)
        and {"id", "role"} <= set(actor) <= {"id", "role", "on_behalf_of"}
        and all(isinstance(x, str) for x in actor.values())
    ):
        raise InvalidEvent(
            "actor must be an object with string 'id' and 'role' (and, for an agent, 'on_behalf_of')"
        )
    payload = obj["payload"]
    if not isinstance(payload, dict):
        raise InvalidEvent("payload must be a JSON object")
    if "sealed" in payload:
        raise InvalidEvent("payload.sealed is made by engram when it writes an event, not sent")
    for key in ("tenant", "source", "event_id", "purpose", "correlation_id"):
        if obj.get(key) is not None and not isinstance(obj[key], str):
            raise InvalidEvent(f"{key} must be a string, got {type(obj[key]).__name__}")
    hostile = list(hostile_values(obj, "event"))
    if hostile:
        raise InvalidEvent("; ".join(hostile))
    event_id = (
        obj.get("event_id")
        or natural_event_id(obj["tenant"], payload, obj["type"])
        or str(uuid.uuid5(EVENT_ID_NAMESPACE, json.dumps(obj, sort_keys=True, default=str)))
    )
    try:
        event_id = str(uuid.UUID(event_id))  # one event, one id: the canonical lowercase form
    except ValueError as exc:
        raise InvalidEvent(f"event_id must be a UUID, got {show(event_id)}") from exc
    payload = cls.json_defaults(payload, event_id)
    c = Problems()
    who = Actor(actor["id"], actor["role"], actor.get("on_behalf_of"))
    _check_envelope(c, obj["tenant"], obj["source"], who, event_id)
    cls.check(payload, c)
    _check_natural_id(c, obj["tenant"], payload, obj["type"], event_id)
    c.raise_if_any()
    return Event(
        event_id=event_id,
        tenant=obj["tenant"],
        occurred_at=parse_time(obj.get("occurred_at") or datetime.now(UTC), "occurred_at"),
        actor=who,
        source=obj["source"],
        payload=cls.from_record(payload),
        purpose=obj.get("purpose"),
        correlation_id=obj.get("correlation_id"),
        occurred_at_given=obj.get("occurred_at") is not None,
    )


def _check_envelope(c: Problems, tenant: Any, source: Any, actor: Actor, event_id: Any) -> None:
    c.require(
        v.full_match(v.TENANT_RE, tenant), f"tenant must match {v.TENANT_RE.pattern}, got {show(tenant)}"
    )
    c.one_of(source, v.Source, "source")
    c.require(
        isinstance(actor.id, str)
        and isinstance(actor.role, str)
        and bool(actor.id.strip())
        and bool(actor.role.strip()),
        "actor id and role are required",
    )
    if actor.on_behalf_of is not None:
        c.id(actor.on_behalf_of, "actor.on_behalf_of")
    try:
        canonical_id = str(uuid.UUID(event_id))
    except (TypeError, ValueError, AttributeError):
        canonical_id = None
    c.require(canonical_id == event_id, f"event_id must be a UUID in canonical form, got {show(event_id)}")


HOSTILE_CHECKED = ("event_id", "tenant", "source", "purpose", "correlation_id")  # and actor, payload


def validate(event: Event) -> None:
    """Raise :class:`InvalidEvent` naming every broken domain rule; Avro checks the types."""
    c = Problems()
    record = event.payload.to_record()
    actor = [event.actor.id, event.actor.role, event.actor.on_behalf_of]
    envelope = [getattr(event, field_name) for field_name in HOSTILE_CHECKED]
    if next(hostile_values([*envelope, actor, record], ""), None) is not None:  # one pass, then reasons
        for field_name, value in zip(HOSTILE_CHECKED, envelope, strict=True):
            c.reasons.extend(hostile_values(value, field_name))
        c.reasons.extend(hostile_values(actor, "actor"))
        c.reasons.extend(hostile_values(record, "payload"))
    c.raise_if_any()  # nothing below may see a value that cannot become a literal
    _check_envelope(c, event.tenant, event.source, event.actor, event.event_id)
    type(event.payload).check(record, c)
    _check_natural_id(c, event.tenant, record, event.type, event.event_id)
    c.raise_if_any()


def _check_natural_id(
    c: Problems, tenant: Any, payload: Mapping[str, Any], event_type: str, event_id: str
) -> None:
    """An event whose id follows from its content (a turn's) carries exactly that id, so sending it
    again, by any path, is the same event."""
    natural = natural_event_id(tenant, payload, event_type)
    c.require(
        natural is None or natural == event_id,
        f"a {event_type}'s event_id is derived from its tenant, conversation and turn ids"
        f" ({natural}); leave it out",
    )


def content_digest(event: Event) -> str:
    """What an event says, for telling a retry (same id, same content) from a reused id.

    ``occurred_at`` counts only when the writer named it: a client that retries without one gets
    a new "now", and so does the same ``engram produce`` line produced twice. A field at its Avro
    default is left out, so adding a field with a default to a schema leaves the digests of the
    events written before it (and so their retries) as they were.
    """
    record = _without_defaults(event.to_avro(), f"{v.EVENT_NAMESPACE}.Envelope")
    if not event.occurred_at_given:
        record.pop("occurred_at")
    sealed = record["payload"][1].get("sealed")
    if sealed is not None:  # its mac stands for the plaintext, with or without the key
        record["payload"][1]["sealed"] = {"key_id": sealed["key_id"], "mac": sealed["mac"].hex()}
    text = json.dumps(record, sort_keys=True, default=_json_default, ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


def _without_defaults(record: Mapping[str, Any], name: str) -> dict[str, Any]:
    schema = _RECORDS[name]
    out: dict[str, Any] = {}
    for key, value in record.items():
        if key in schema["defaults"] and value == schema["defaults"][key]:
            continue
        if isinstance(value, tuple) and len(value) == 2 and value[0] in _RECORDS:  # a union branch
            value = (value[0], _without_defaults(value[1], value[0]))
        elif key in schema["records"] and schema["records"][key] in _RECORDS and isinstance(value, Mapping):
            value = _without_defaults(value, schema["records"][key])
        out[key] = value
    return out


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat(timespec="milliseconds")
    if isinstance(value, Mapping):
        return dict(value)
    return str(value)
