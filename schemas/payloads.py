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
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar

from engram.schemas import ENVELOPE_FILE, avro_dir
from engram.schemas import vocabulary as v
from engram.schemas.checks import InvalidEvent, Problems, finite_floats, show
from engram.schemas.periods import UNSPECIFIED
from engram.schemas.records import (  # re-exported: the payload classes build on these
    MemoryEvent,
    Payload,
    Record,
    _check_properties,
    _list,
    _mapping,
    thaw,  # noqa: F401
)

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
class Evidence(Record):
    """What an extracted memory rests on: the conversation and the turns in it that said it."""

    conversation_id: str
    turn_ids: tuple[str, ...] = ()


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
    proposes: str | None = None
    sealed: Sealed | None = None
    evidence: Evidence | None = None
    also_proposes: tuple[str, ...] = ()

    def property_names(self) -> Iterable[str]:
        return self.properties.keys()

    @property
    def proposed(self) -> tuple[str, ...]:
        """Every memory a proposal would replace (``proposes``, then ``also_proposes``); none for a
        memory that is no proposal."""
        return (self.proposes, *self.also_proposes) if self.proposes else ()

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
        if p.get("evidence") is not None:
            _check_evidence(c, _mapping(c, p, "evidence"))
        if p.get("proposes") is not None:
            c.id(p["proposes"], "proposes")
            c.require(p.get("proposes") != p.get("memory_id"), "a memory cannot propose to replace itself")
            c.require(
                p.get("replaces") is None,
                "a proposal replaces nothing until accepted: not both proposes and replaces",
            )
        others = _list(c, p.get("also_proposes", []), "also_proposes")
        if others:
            c.require(
                p.get("proposes") is not None, "also_proposes needs proposes: name the first in proposes"
            )
            c.require(
                len(others) < v.PROPOSED_MAX, f"a proposal names at most {v.PROPOSED_MAX} memories to replace"
            )
            named = [p.get("proposes") if isinstance(p.get("proposes"), str) else ""]
            named += [o for o in others if c.id(o, "also_proposes")]
            c.require(p.get("memory_id") not in named[1:], "a memory cannot propose to replace itself")
            c.require(len(set(named)) == len(named), "a proposal names each memory it would replace once")
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
                finite_floats(emb, FLOAT32_MAX)  # the usual vector, decided at once; else one by one
                or all(
                    isinstance(x, int | float) and math.isfinite(x) and abs(x) <= FLOAT32_MAX for x in emb
                ),
                "an embedding's components must be finite 32-bit floats",
            )

    @classmethod
    def json_defaults(cls, p: Mapping[str, Any], event_id: str) -> dict[str, Any]:
        """The memory id minted from the event id, and no stakeholders, unless given."""
        return {"memory_id": mint_memory_id(event_id), "stakeholders": {}, **p}


# The shared fields a revision may set, and the ones it may clear (the others are required).
REVISABLE_FIELDS: tuple[str, ...] = ("label", "content", "kind", "importance", "confidence", "expires_at")
CLEARABLE_FIELDS: frozenset[str] = frozenset({"expires_at"})


def _check_evidence(c: Problems, evidence: Mapping[str, Any]) -> None:
    """An extracted memory names the conversation and at least one of its turns, a bounded few."""
    c.id(evidence.get("conversation_id"), "evidence.conversation_id")
    turns = _list(c, evidence.get("turn_ids"), "evidence.turn_ids")
    c.require(
        0 < len(turns) <= v.EVIDENCE_TURNS_MAX,
        f"evidence.turn_ids must name 1 to {v.EVIDENCE_TURNS_MAX} turns, got {len(turns)}",
    )
    for turn in turns[: v.EVIDENCE_TURNS_MAX]:
        c.id(turn, "evidence.turn_ids")


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


@dataclass(frozen=True, kw_only=True)
class ProposalDecided(MemoryEvent):
    """A person's answer to a pending proposal (``memory_id``): accepted, it supersedes the memory
    it proposed to replace; rejected, it stays inactive."""

    decision: v.ProposalDecision
    reason: str | None = None

    @classmethod
    def check(cls, p: Mapping[str, Any], c: Problems) -> None:
        super().check(p, c)
        c.one_of(p.get("decision"), v.ProposalDecision, "decision")
        if p.get("reason") is not None:
            c.text(p["reason"], "reason", v.REASON_MAX)


# The payloads of agent work live in their own module, which builds on the classes above; they
# are re-exported here, so every event type's class is found in this one namespace.
from engram.schemas.agent_payloads import (  # noqa: E402, F401
    AgentEvent,
    AssociationRemoved,
    DecisionRecorded,
    EpisodeRecorded,
    MemoriesAssociated,
    PlannedKpi,
    PlannedSpend,
    SessionEnded,
    SessionStarted,
    ToolCalled,
    mint_id,
    observation_ref,
    parse_ref,
)
from engram.schemas.conversation_payloads import (  # noqa: E402, F401
    ConversationErased,
    ConversationEvent,
    ConversationTurn,
    TurnsExtracted,
    derive_turn_id,
    on_conversations_topic,
    turn_event_id,
)


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
