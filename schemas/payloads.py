"""One frozen class per event payload; the Avro records in ``avro/`` stay the one definition.

The set of event types is the Envelope's ``payload`` union, read from ``Envelope.avsc``; a test
keeps every class's fields and defaults equal to its record's, and the enums to Avro's symbols.
Each class also says what Avro cannot (ranges, id shapes, which fields a revision may clear) in
``check``, which reads the payload as a mapping: it runs on untrusted JSON before a payload is
built, and on a decoded record before it is projected, with the same reasons.
"""

from __future__ import annotations

import json
import math
import types
import typing
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import MISSING, Field, dataclass, field, fields
from datetime import datetime
from enum import StrEnum
from functools import cache
from typing import Any, ClassVar, Self

from engram.schemas import ENVELOPE_FILE, avro_dir
from engram.schemas import vocabulary as v
from engram.schemas.checks import InvalidEvent, Problems, parse_time, show
from engram.schemas.periods import UNSPECIFIED

FLOAT32_MAX = 3.4028234663852886e38  # an Avro float; beyond it a component would be stored as inf
EVENT_ID_NAMESPACE = uuid.UUID("6f1c1a52-58a9-4f55-9d0e-0b1b8f4f2a11")


def envelope_union() -> tuple[str, ...]:
    """The event types, in the Envelope's order: the branches of its ``payload`` union."""
    envelope = json.loads((avro_dir() / ENVELOPE_FILE).read_text())
    (union,) = (f["type"] for f in envelope["fields"] if f["name"] == "payload")
    return tuple(name.removeprefix(f"{v.EVENT_NAMESPACE}.") for name in union)


EVENT_TYPES: tuple[str, ...] = envelope_union()

Properties = Mapping[str, bool | int | float | str | None]


def mint_memory_id(event_id: str) -> str:
    """A new memory's id follows from its event id, so producing the same event twice is safe."""
    return str(uuid.uuid5(EVENT_ID_NAMESPACE, f"memory:{event_id}"))


class Record:
    """A frozen Avro record: built from its record (defaults filled, values frozen) and back."""

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Self:
        """Build from an Avro record (or a checked JSON object): defaults filled, values frozen."""
        unknown = set(record) - {f.name for f in fields(cls)}  # type: ignore[arg-type]
        if unknown:
            raise InvalidEvent(f"unknown {cls.__name__} fields: {', '.join(sorted(map(str, unknown)))}")
        values = {}
        for f in fields(cls):  # type: ignore[arg-type]
            if f.name in record:
                values[f.name] = _freeze(_hints(cls)[f.name], record[f.name], f.name)
        try:
            return cls(**values)
        except TypeError as exc:  # a required field is absent
            missing = [f.name for f in fields(cls) if f.name not in values and _required(f)]  # type: ignore[arg-type]
            raise InvalidEvent(f"{cls.__name__} needs {', '.join(missing)}") from exc

    def to_record(self) -> dict[str, Any]:
        """The Avro record (plain dicts and lists), as the codec writes it and a digest reads it."""
        return {f.name: thaw(getattr(self, f.name)) for f in fields(self)}  # type: ignore[arg-type]


class Payload(Record):
    """An event's payload; its class name is the event type (a branch of the Envelope's union)."""

    @classmethod
    def check(cls, p: Mapping[str, Any], c: Problems) -> None:
        """Add every domain rule ``p`` breaks to ``c``; ``p`` may hold anything (untrusted JSON)."""

    @classmethod
    def json_defaults(cls, p: Mapping[str, Any], event_id: str) -> dict[str, Any]:
        """``p`` (the JSON form) with what a producer may leave out filled in; Avro's defaults aside."""
        return dict(p)


@dataclass(frozen=True, kw_only=True)
class MemoryEvent(Payload):
    """An event about one memory. What the projection does beside planning it is said here, once:
    ``reshapes`` (it sets the memory's fields, so its shapes are checked), ``reindexes`` (it changes
    what the search indexes hold of it)."""

    memory_id: str
    reshapes: ClassVar[bool] = False
    reindexes: ClassVar[bool] = False

    def property_names(self) -> Iterable[str]:
        """The class properties this event writes (each must be a name engram does not reserve)."""
        return ()

    @classmethod
    def check(cls, p: Mapping[str, Any], c: Problems) -> None:
        c.id(p.get("memory_id"), "memory_id")


def _required(f: Field[Any]) -> bool:
    return f.default is MISSING and f.default_factory is MISSING


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _freeze(hint: Any, value: Any, name: str) -> Any:
    """``value`` as the field's type holds it: enums, nested records, tuples, read-only maps."""
    if value is None:
        return None
    options = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    kind = next((t for t in options if t is not type(None)), hint)
    origin = typing.get_origin(kind) or kind
    if isinstance(origin, type) and issubclass(origin, StrEnum):
        return origin(value)
    if origin is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)  # one canonical form: 3 and 3.0 are the same double
    if origin is datetime:
        return parse_time(value, name)
    if isinstance(origin, type) and issubclass(origin, Record):
        return origin.from_record(value)
    if origin is tuple:
        return tuple(value)
    if origin is Mapping or origin is typing.Mapping:
        return types.MappingProxyType(dict(value))
    return value


def thaw(value: Any) -> Any:
    """A frozen value in its plain Avro form: enums as text, tuples as lists, maps as dicts."""
    if isinstance(value, StrEnum):
        return value.value
    if isinstance(value, Record):
        return value.to_record()
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, Mapping):
        return dict(value)
    return value


def _mapping(c: Problems, p: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    """``p[name]`` if it is an object (absent is an empty one); else a reason, and nothing to check."""
    value = p.get(name)
    if value is None:
        return {}
    c.require(isinstance(value, Mapping), f"{name} must be an object")
    return value if isinstance(value, Mapping) else {}


def _list(c: Problems, value: Any, what: str) -> list[Any]:
    if value is None:
        return []
    c.require(isinstance(value, list | tuple), f"{what} must be a list")
    return list(value) if isinstance(value, list | tuple) else []


def _check_properties(c: Problems, props: Mapping[str, Any]) -> None:
    for key, value in props.items():
        if c.name(key, "property name"):
            c.require(key not in v.MEMORY_PREDICATES, f"property name {key!r} is reserved by engram")
        if isinstance(value, str):
            c.require(
                len(value) <= v.PROPERTY_TEXT_MAX,
                f"property {key!r} must be at most {v.PROPERTY_TEXT_MAX} characters",
            )
        else:
            c.require(
                value is None or isinstance(value, bool | int | float),
                f"property {str(key)[:100]!r} must be a string, number, boolean or null, "
                f"not a {type(value).__name__}",
            )


@dataclass(frozen=True, kw_only=True)
class Stakeholders(Record):
    user_id: str | None = None
    team_ids: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Sealed(Record):
    """Where a memory event's personal parts are while on the log (see ``schemas.sealing``)."""

    key_id: str
    nonce: bytes
    ciphertext: bytes
    mac: bytes


@dataclass(frozen=True, kw_only=True)
class MemoryRemembered(MemoryEvent):
    reshapes: ClassVar[bool] = True
    reindexes: ClassVar[bool] = True

    label: str
    content: str
    kind: v.Kind
    scope: v.Scope
    stakeholders: Stakeholders
    importance: int
    confidence: float = 1.0
    expires_at: datetime | None = None
    memory_class: str = "Memory"
    properties: Properties = field(default_factory=lambda: types.MappingProxyType({}))
    embedding: tuple[float, ...] | None = None
    embedding_model: str | None = None
    replaces: str | None = None
    on_conflict: v.OnConflict = v.OnConflict.ASK
    sealed: Sealed | None = None

    def property_names(self) -> Iterable[str]:
        return self.properties.keys()

    @classmethod
    def check(cls, p: Mapping[str, Any], c: Problems) -> None:
        super().check(p, c)
        c.text(p.get("label"), "label", v.LABEL_MAX)
        c.text(p.get("content"), "content", v.CONTENT_MAX)
        c.one_of(p.get("kind"), v.Kind, "kind")
        c.one_of(p.get("scope"), v.Scope, "scope")
        c.importance(p.get("importance"))
        c.number(p.get("confidence", 1.0), "confidence", 0, 1)
        cls_name = p.get("memory_class", "Memory")
        c.require(
            v.full_match(v.CLASS_RE, cls_name) and v.valid_iri(v.class_iri(cls_name)),
            f"memory_class must be a class name such as PerformanceTargetMemory, got {show(cls_name)}",
        )
        if p.get("expires_at") is not None:
            c.time(p["expires_at"], "expires_at")
        holders = _mapping(c, p, "stakeholders")
        if holders.get("user_id") is not None:
            c.id(holders["user_id"], "stakeholders.user_id")
        for team in _list(c, holders.get("team_ids"), "stakeholders.team_ids"):
            c.id(team, "stakeholders.team_ids")
        if p.get("scope") == v.Scope.USER:
            c.require(bool(holders.get("user_id")), "a user-scoped memory needs stakeholders.user_id")
        if p.get("scope") == v.Scope.TEAM:
            c.require(bool(holders.get("team_ids")), "a team-scoped memory needs stakeholders.team_ids")
        _check_properties(c, _mapping(c, p, "properties"))
        if p.get("replaces") is not None:
            c.id(p["replaces"], "replaces")
            c.require(p.get("replaces") != p.get("memory_id"), "a memory cannot replace itself")
        c.one_of(p.get("on_conflict", v.OnConflict.ASK), v.OnConflict, "on_conflict")
        emb = p.get("embedding")
        if emb is not None and c.require(isinstance(emb, list | tuple), "embedding must be a list"):
            c.require(
                len(emb) > 0 and p.get("embedding_model") is not None,
                "an embedding needs a non-empty vector and embedding_model",
            )
            c.require(
                len(emb) <= v.EMBEDDING_MAX_DIM,
                f"an embedding has at most {v.EMBEDDING_MAX_DIM} dimensions",
            )
            c.require(
                all(isinstance(x, int | float) and math.isfinite(x) and abs(x) <= FLOAT32_MAX for x in emb),
                "an embedding's components must be finite 32-bit floats",
            )

    @classmethod
    def json_defaults(cls, p: Mapping[str, Any], event_id: str) -> dict[str, Any]:
        """The memory id minted from the event id, and no stakeholders, unless given."""
        return {"memory_id": mint_memory_id(event_id), "stakeholders": {}, **p}


# The shared fields a revision may set, and the ones it may clear (the others are required).
REVISABLE_FIELDS: tuple[str, ...] = ("label", "content", "kind", "importance", "confidence", "expires_at")
CLEARABLE_FIELDS: frozenset[str] = frozenset({"expires_at"})


@dataclass(frozen=True, kw_only=True)
class MemoryRevised(MemoryEvent):
    """Three states per field: a key absent is untouched, mapped to null is cleared, else set."""

    reshapes: ClassVar[bool] = True
    reindexes: ClassVar[bool] = True

    changes: Properties = field(default_factory=lambda: types.MappingProxyType({}))
    property_changes: Properties = field(default_factory=lambda: types.MappingProxyType({}))
    sealed: Sealed | None = None

    def property_names(self) -> Iterable[str]:
        return self.property_changes.keys()

    @classmethod
    def check(cls, p: Mapping[str, Any], c: Problems) -> None:
        super().check(p, c)
        changes, props = _mapping(c, p, "changes"), _mapping(c, p, "property_changes")
        c.require(  # an erased revision (its key destroyed) changed what can no longer be read
            bool(changes) or bool(props) or p.get("sealed") is not None,
            "a revision must change at least one field",
        )
        for name, value in changes.items():
            if not c.require(
                name in REVISABLE_FIELDS,
                f"field {show(name)} cannot be revised; one of {', '.join(REVISABLE_FIELDS)}",
            ):
                continue
            if value is None:
                c.require(name in CLEARABLE_FIELDS, f"field {name!r} is required and cannot be cleared")
                continue
            match name:
                case "label":
                    c.text(value, "label", v.LABEL_MAX)
                case "content":
                    c.text(value, "content", v.CONTENT_MAX)
                case "kind":
                    c.one_of(value, v.Kind, "kind")
                case "importance":
                    c.importance(value)
                case "confidence":
                    c.number(value, "confidence", 0, 1)
                case "expires_at":
                    c.time(value, "expires_at")
        _check_properties(c, props)


@dataclass(frozen=True, kw_only=True)
class MemorySuperseded(MemoryEvent):
    superseded_by: str

    @classmethod
    def check(cls, p: Mapping[str, Any], c: Problems) -> None:
        super().check(p, c)
        if c.id(p.get("superseded_by"), "superseded_by") and v.full_match(v.ID_RE, p.get("memory_id")):
            c.require(p["memory_id"] != p["superseded_by"], "a memory cannot supersede itself")


@dataclass(frozen=True, kw_only=True)
class MemoryRestored(MemoryEvent):
    """Undoes a supersession."""


@dataclass(frozen=True, kw_only=True)
class MemoryForgotten(MemoryEvent):
    reindexes: ClassVar[bool] = True  # its text and vector are erased

    reason: str | None = None


@dataclass(frozen=True, kw_only=True)
class KpiObserved(Payload):
    metric: str
    value: float
    period: str = UNSPECIFIED

    @classmethod
    def check(cls, p: Mapping[str, Any], c: Problems) -> None:
        c.name(p.get("metric"), "metric")
        c.number(p.get("value"), "value")
        c.period(p.get("period", UNSPECIFIED))


@dataclass(frozen=True, kw_only=True)
class SpendObserved(Payload):
    platform: str
    amount: float
    currency: str
    period: str = UNSPECIFIED

    @classmethod
    def check(cls, p: Mapping[str, Any], c: Problems) -> None:
        c.name(p.get("platform"), "platform")
        c.require(
            v.full_match(v.CURRENCY_RE, p.get("currency")), "currency must be an ISO-4217 code such as USD"
        )
        c.number(p.get("amount"), "amount", 0)
        c.period(p.get("period", UNSPECIFIED))


@dataclass(frozen=True, kw_only=True)
class ClockTicked(Payload):
    now: datetime

    @classmethod
    def check(cls, p: Mapping[str, Any], c: Problems) -> None:
        c.time(p.get("now"), "now")


@dataclass(frozen=True, kw_only=True)
class StakeholderChanged(Payload):
    user_id: str
    team_ids: tuple[str, ...] = ()
    role: str

    @classmethod
    def check(cls, p: Mapping[str, Any], c: Problems) -> None:
        c.id(p.get("user_id"), "user_id")
        for team in _list(c, p.get("team_ids"), "team_ids"):
            c.id(team, "team id")


@dataclass(frozen=True, kw_only=True)
class LegalHoldPlaced(MemoryEvent):
    """While a hold stands the memory may not be forgotten (a forget is refused as a conflict)."""

    reason: str | None = None


@dataclass(frozen=True, kw_only=True)
class LegalHoldReleased(MemoryEvent):
    reason: str | None = None


def mint_id(kind: str, event_id: str) -> str:
    """An agent node's id (a session, episode, tool call, decision, association) follows from its
    event id, as a memory's does, so producing the same event twice is safe."""
    return str(uuid.uuid5(EVENT_ID_NAMESPACE, f"{kind}:{event_id}"))


def parse_ref(ref: str) -> tuple[str, str]:
    """An association's end as (kind, id): ``episode:{id}``, ``decision:{id}``, else a memory id."""
    kind, sep, rest = ref.partition(":")
    return (kind, rest) if sep and kind in v.REF_KINDS else ("memory", ref)


def _check_ref(c: Problems, value: Any, what: str) -> None:
    if not isinstance(value, str):
        c.require(False, f"{what} must be a memory id, episode:{{id}} or decision:{{id}}, got {show(value)}")
        return
    _kind, ref_id = parse_ref(value)
    c.require(
        v.full_match(v.ID_RE, ref_id),
        f"{what} must be a memory id, episode:{{id}} or decision:{{id}}, got {show(value)}",
    )


def _check_cap_period(c: Problems, value: Any, what: str) -> None:
    """A planned period is a calendar period (2026-11, 2026-Q4, 2026-W49, …): what a cap of the same
    kind of period is compared against; ``unspecified`` is no period a cap can be judged on."""
    c.period(value)
    c.require(value != UNSPECIFIED, f"{what} must name a calendar period such as 2026-12")


class AgentEvent(Payload):
    """An event that records agent work (DESIGN §7): its node's id is minted from the event id when
    the producer leaves it out (``id_field``)."""

    id_field: ClassVar[str] = ""

    @classmethod
    def json_defaults(cls, p: Mapping[str, Any], event_id: str) -> dict[str, Any]:
        kind = cls.id_field.removesuffix("_id")
        return {cls.id_field: mint_id(kind, event_id), **p}


@dataclass(frozen=True, kw_only=True)
class SessionStarted(AgentEvent):
    id_field: ClassVar[str] = "session_id"

    session_id: str
    goal: str | None = None

    @classmethod
    def check(cls, p: Mapping[str, Any], c: Problems) -> None:
        c.id(p.get("session_id"), "session_id")
        if p.get("goal") is not None:
            c.text(p["goal"], "goal", v.SUMMARY_MAX)


@dataclass(frozen=True, kw_only=True)
class SessionEnded(Payload):
    session_id: str
    outcome: str | None = None

    @classmethod
    def check(cls, p: Mapping[str, Any], c: Problems) -> None:
        c.id(p.get("session_id"), "session_id")
        if p.get("outcome") is not None:
            c.text(p["outcome"], "outcome", v.SUMMARY_MAX)


@dataclass(frozen=True, kw_only=True)
class EpisodeRecorded(AgentEvent):
    id_field: ClassVar[str] = "episode_id"

    episode_id: str
    session_id: str
    summary: str

    @classmethod
    def check(cls, p: Mapping[str, Any], c: Problems) -> None:
        c.id(p.get("episode_id"), "episode_id")
        c.id(p.get("session_id"), "session_id")
        c.text(p.get("summary"), "summary", v.SUMMARY_MAX)


@dataclass(frozen=True, kw_only=True)
class ToolCalled(AgentEvent):
    id_field: ClassVar[str] = "call_id"

    call_id: str
    session_id: str
    episode_id: str | None = None
    tool: str
    arguments_digest: str
    outcome: str

    @classmethod
    def check(cls, p: Mapping[str, Any], c: Problems) -> None:
        c.id(p.get("call_id"), "call_id")
        c.id(p.get("session_id"), "session_id")
        if p.get("episode_id") is not None:
            c.id(p["episode_id"], "episode_id")
        c.name(p.get("tool"), "tool")
        c.require(
            v.full_match(v.DIGEST_RE, p.get("arguments_digest")),
            "arguments_digest must be sha256: and 64 lowercase hex digits, "
            f"got {show(p.get('arguments_digest'))}",
        )
        c.one_of(p.get("outcome"), v.ToolOutcome, "outcome")


@dataclass(frozen=True, kw_only=True)
class PlannedSpend(Record):
    platform: str
    amount: float
    currency: str
    period: str

    @classmethod
    def check(cls, p: Mapping[str, Any], c: Problems, what: str = "spend") -> None:
        c.name(p.get("platform"), f"{what}.platform")
        c.number(p.get("amount"), f"{what}.amount", 0)
        c.require(
            v.full_match(v.CURRENCY_RE, p.get("currency")),
            f"{what}.currency must be an ISO-4217 code such as USD",
        )
        _check_cap_period(c, p.get("period"), f"{what}.period")


@dataclass(frozen=True, kw_only=True)
class PlannedKpi(Record):
    metric: str
    value: float

    @classmethod
    def check(cls, p: Mapping[str, Any], c: Problems, what: str = "target_change") -> None:
        c.name(p.get("metric"), f"{what}.metric")
        c.number(p.get("value"), f"{what}.value")


@dataclass(frozen=True, kw_only=True)
class DecisionRecorded(AgentEvent):
    id_field: ClassVar[str] = "decision_id"

    decision_id: str
    session_id: str | None = None
    episode_id: str | None = None
    decision: str
    relied_on: tuple[str, ...] = ()
    live_data: tuple[str, ...] = ()
    spend: PlannedSpend | None = None
    target_change: PlannedKpi | None = None

    @classmethod
    def check(cls, p: Mapping[str, Any], c: Problems) -> None:
        c.id(p.get("decision_id"), "decision_id")
        for name in ("session_id", "episode_id"):
            if p.get(name) is not None:
                c.id(p[name], name)
        c.require(
            p.get("episode_id") is None or p.get("session_id") is not None,
            "a decision in an episode names its session_id too",
        )
        c.text(p.get("decision"), "decision", v.DECISION_MAX)
        cited = _list(c, p.get("relied_on"), "relied_on")
        data = _list(c, p.get("live_data"), "live_data")
        c.require(len(cited) <= v.CITED_MAX, f"relied_on names at most {v.CITED_MAX} memories")
        c.require(len(data) <= v.CITED_MAX, f"live_data names at most {v.CITED_MAX} observations")
        for memory_id in cited[: v.CITED_MAX]:
            c.id(memory_id, "relied_on")
        for ref in data[: v.CITED_MAX]:
            c.require(
                isinstance(ref, str) and observation_ref(ref) is not None,
                f"live_data names spend:{{platform}}:{{currency}}:{{period}} or kpi:{{metric}}:{{period}}, "
                f"got {show(ref)}",
            )
        if p.get("spend") is not None:
            PlannedSpend.check(_mapping(c, p, "spend"), c)
        if p.get("target_change") is not None:
            PlannedKpi.check(_mapping(c, p, "target_change"), c)


def observation_ref(ref: str) -> tuple[str, ...] | None:
    """A live-data reference's parts (``spend``, platform, currency, period or ``kpi``, metric,
    period), or None if it is not one; the periods are checked like an observation's."""
    parts = tuple(ref.split(":"))
    names_ok = all(v.full_match(v.NAME_RE, x) for x in parts[1:-1])
    if parts[0] == "spend" and len(parts) == 4:
        ok = names_ok and v.full_match(v.CURRENCY_RE, parts[2])
    elif parts[0] == "kpi" and len(parts) == 3:
        ok = names_ok
    else:
        return None
    probe = Problems()
    probe.period(parts[-1])
    return parts if ok and not probe.reasons else None


@dataclass(frozen=True, kw_only=True)
class MemoriesAssociated(AgentEvent):
    id_field: ClassVar[str] = "association_id"

    association_id: str
    from_ref: str
    to_ref: str
    relation: str

    @classmethod
    def check(cls, p: Mapping[str, Any], c: Problems) -> None:
        c.id(p.get("association_id"), "association_id")
        _check_ref(c, p.get("from_ref"), "from")
        _check_ref(c, p.get("to_ref"), "to")
        c.require(p.get("from_ref") != p.get("to_ref"), "an association links two different things")
        c.one_of(p.get("relation"), v.Relation, "relation")


def _subclasses(cls: type[Payload]) -> list[type[Payload]]:
    return [sub for direct in cls.__subclasses__() for sub in (direct, *_subclasses(direct))]


def _registry() -> dict[str, type[Payload]]:
    """Every event type's class, found by name: a new event type is its Avro file and its class."""
    classes = {cls.__name__: cls for cls in _subclasses(Payload)}
    missing = [name for name in EVENT_TYPES if name not in classes]
    if missing:  # fail at import, not on the first record of the new type
        raise ImportError(f"no payload class for the Envelope's {', '.join(missing)} (schemas/payloads.py)")
    return {name: classes[name] for name in EVENT_TYPES}


PAYLOADS: Mapping[str, type[Payload]] = types.MappingProxyType(_registry())


def payload_class(event_type: Any) -> type[Payload]:
    if not isinstance(event_type, str) or event_type not in PAYLOADS:
        raise InvalidEvent(f"unknown event type {show(event_type)}; one of: {', '.join(EVENT_TYPES)}")
    return PAYLOADS[event_type]
