"""Request and response models at the HTTP edge; limits are declared on the fields.

Requests are strict: JSON types are not coerced (``true`` is not 1, ``"0.5"`` is not a number),
numbers must be finite (no NaN, Infinity or 1e309) and no string may hold a lone surrogate. Those
rules live on :class:`EdgeModel` and the types below, so every request model inherits them.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Annotated, Any, Literal
from uuid import UUID

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    StrictBool,
    StrictInt,
    StrictStr,
    model_validator,
)
from pydantic_core import PydanticCustomError

from commands import writes
from schemas import vocabulary as v
from schemas.checks import InvalidEvent, parse_time
from schemas.events import Actor
from schemas.payloads import REVISABLE_FIELDS


def anchored(regex: str) -> str:
    """``regex`` as a full match in every engine that reads it (pydantic's and JSON Schema's)."""
    core = regex.removeprefix("\\A").removeprefix("^")
    for end in ("\\Z", "\\z", "$"):
        core = core.removesuffix(end)
    return f"^(?:{core})$"


def _time_text(value: Any) -> datetime:
    """A time read by the events' own parser, so the edge refuses exactly what an event would
    (an instant past year 9999 or before year 1 in UTC included) with the same reason, as a 422."""
    if not isinstance(value, str | datetime):
        raise PydanticCustomError("datetime_type", "Input should be an ISO-8601 date-time string")
    try:
        return parse_time(value, "time")
    except InvalidEvent as exc:
        raise PydanticCustomError("datetime_parsing", str(exc).removeprefix("time: ")) from None


# IRIs at the edge: no white space, control characters or delimiters, and every % an escape.
# Non-ASCII only where RFC 3987 allows it outside a query: no C1 controls, private use or
# noncharacters, and no code point beyond the BMP.
_IRI_TAIL = (
    r'(?:[^\x00-\x20<>"{}|^`\\%\x7f-\x9f\ue000-\uf8ff\ufdd0-\ufdef\ufff0-\uffff\U00010000-\U0010ffff]'
    r"|%[0-9A-Fa-f]{2})"
)
IRI_PATTERN = rf"^[A-Za-z][A-Za-z0-9+.-]*:{_IRI_TAIL}*$"
CLASS_PATTERN = rf"^(?::?[A-Z][A-Za-z0-9_]{{0,127}}|https?://{_IRI_TAIL}+)$"


def _json_integer(value: Any) -> Any:
    """An integer as JSON Schema means it: 3 or 3.0, never true or "3"."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


Int = Annotated[StrictInt, BeforeValidator(_json_integer)]
Float = Annotated[float, Strict()]  # a JSON number (integers included), never a bool or a string
Timestamp = Annotated[datetime, BeforeValidator(_time_text)]  # a string, never a number of seconds
Id = Annotated[StrictStr, Field(pattern=anchored(v.ID_RE.pattern))]
Long = Annotated[StrictInt, Field(ge=v.LONG_MIN, le=v.LONG_MAX)]  # what Avro's long holds


def _one_of(enum: type[v.StrEnum]) -> Any:
    """The enum's values as a ``Literal``: the wire keeps plain strings (and a ``literal_error``)."""
    return Literal[tuple(member.value for member in enum)]  # type: ignore[valid-type]


Kind = _one_of(v.Kind)
Scope = _one_of(v.Scope)
Source = _one_of(v.Source)
OnConflict = _one_of(v.OnConflict)


def _long_if_integer(value: Any) -> Any:
    """An integer property is a 64-bit long (as ``engram produce`` holds it), not a rounded double."""
    if isinstance(value, int) and not isinstance(value, bool) and not v.LONG_MIN <= value <= v.LONG_MAX:
        raise PydanticCustomError("int_too_big", "integers must fit in 64 bits")
    return value


PropertyValue = Annotated[
    StrictBool | Long | Float | Annotated[StrictStr, Field(max_length=v.PROPERTY_TEXT_MAX)] | None,
    BeforeValidator(_long_if_integer),
]
PropertyName = Annotated[StrictStr, Field(pattern=anchored(v.NAME_RE.pattern))]
StatusValue = StrictInt | float | StrictStr


def _surrogates(value: Any, where: str) -> Iterator[str]:
    """Where ``value`` holds a string with a lone surrogate (not Unicode, cannot be stored)."""
    if isinstance(value, str):
        if any("\ud800" <= ch <= "\udfff" for ch in value):
            yield where or "body"
    elif isinstance(value, dict):
        for key, item in value.items():
            shown = str(key).encode("utf-8", "backslashreplace").decode()[:64]
            yield from _surrogates(key, f"{where}.{shown} (name)".lstrip("."))
            yield from _surrogates(item, f"{where}.{shown}".lstrip("."))
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            yield from _surrogates(item, f"{where}[{i}]")


class EdgeModel(BaseModel):
    """A request body: unknown fields refused, numbers finite, strings valid Unicode."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _valid_unicode(cls, data: Any) -> Any:
        for where in _surrogates(data, ""):
            raise PydanticCustomError(
                "string_unicode", "{where}: text must be valid Unicode (no lone surrogates)", {"where": where}
            )
        return data


# At least one character Python's str.strip() keeps, read the same by pydantic's and JSON Schema's
# regex engines (\x1c-\x1f and \x85 are white space to Python only, \ufeff to ECMAScript only).
NON_BLANK = r"[^\s\x1c-\x1f\x85]|\uFEFF"


class ActorIn(EdgeModel):
    id: StrictStr = Field(min_length=1, max_length=128, pattern=NON_BLANK)
    role: StrictStr = Field(min_length=1, max_length=64, pattern=NON_BLANK)


class Stakeholders(EdgeModel):
    user_id: Id | None = None
    team_ids: list[Id] = Field(default_factory=list, max_length=64)


class StakeholdersOut(BaseModel):
    user_id: str | None = None
    team_ids: list[str] = Field(default_factory=list)


class Attribution(EdgeModel):
    """Who writes and from where: every write is attributable."""

    event_id: UUID | None = Field(
        None, description="Idempotency key (or the Idempotency-Key header); a fresh UUID if absent."
    )
    source: Source
    actor: ActorIn | None = Field(
        None, description="The bearer token's subject and role; if given, it must be the same"
    )
    occurred_at: Timestamp | None = Field(None, description="Valid time; defaults to now.")
    purpose: StrictStr | None = Field(None, max_length=256)
    correlation_id: StrictStr | None = Field(None, max_length=128)

    def attribution(self, actor: Actor, event_id: UUID | None) -> writes.Attribution:
        """Who writes (the token's actor), with the event id the route settled on (the
        Idempotency-Key, the body's, or minted)."""
        return writes.Attribution(
            source=self.source,
            actor=actor,
            event_id=event_id,
            occurred_at=self.occurred_at,
            purpose=self.purpose,
            correlation_id=self.correlation_id,
        )


class MemoryCreate(Attribution):
    model_config = ConfigDict(json_schema_extra={"dependentRequired": {"embedding": ["embedding_model"]}})

    memory_id: Id | None = Field(None, description="Minted if absent.")
    label: StrictStr = Field(min_length=1, max_length=v.LABEL_MAX, pattern=NON_BLANK)
    content: StrictStr = Field(min_length=1, max_length=v.CONTENT_MAX, pattern=NON_BLANK)
    kind: Kind
    scope: Scope = v.Scope.COMPANY.value
    stakeholders: Stakeholders = Field(default_factory=Stakeholders)
    importance: Int = Field(
        ge=min(v.Importance),
        le=max(v.Importance),
        description="1 Disabled, 2 Low, 3 Medium, 4 High, 5 Critical",
    )
    confidence: Float = Field(1.0, ge=0, le=1)
    expires_at: Timestamp | None = None
    memory_class: StrictStr = Field(
        "Memory",
        max_length=2048,
        pattern=CLASS_PATTERN,
        description="A class of the ontology, by name (PerformanceTargetMemory) or IRI",
    )
    properties: dict[PropertyName, PropertyValue] = Field(
        default_factory=dict,
        max_length=64,
        json_schema_extra={"additionalProperties": False},  # a name off the pattern is refused
    )
    embedding: list[Float] | None = Field(None, min_length=1, max_length=v.EMBEDDING_MAX_DIM)
    embedding_model: StrictStr | None = Field(None, min_length=1, max_length=128)
    replaces: Id | None = None
    on_conflict: OnConflict = v.OnConflict.ASK.value

    @model_validator(mode="after")
    def _embedding_has_a_model(self) -> MemoryCreate:
        if self.embedding is not None and self.embedding_model is None:
            raise PydanticCustomError("missing", "an embedding needs embedding_model")
        return self

    def payload(self) -> dict[str, Any]:
        return self.model_dump(
            exclude={"event_id", "source", "actor", "occurred_at", "purpose", "correlation_id"},
            exclude_none=True,
        )


class MemoryPatch(Attribution):
    """A revision with three states per field: absent is untouched, ``null`` is cleared (only
    ``expires_at`` and properties may be), a value is set; ``properties`` likewise per name."""

    label: StrictStr | None = Field(None, min_length=1, max_length=v.LABEL_MAX, pattern=NON_BLANK)
    content: StrictStr | None = Field(None, min_length=1, max_length=v.CONTENT_MAX, pattern=NON_BLANK)
    kind: Kind | None = None
    importance: Int | None = Field(None, ge=min(v.Importance), le=max(v.Importance))
    confidence: Float | None = Field(None, ge=0, le=1)
    expires_at: Timestamp | None = None
    properties: dict[PropertyName, PropertyValue] = Field(
        default_factory=dict, max_length=64, json_schema_extra={"additionalProperties": False}
    )

    def changes(self) -> dict[str, Any]:
        """The shared fields the request names (``null`` included: a clear), as the event wants them."""
        named = self.model_fields_set & set(REVISABLE_FIELDS)
        out = self.model_dump(include=named, mode="json")
        return out


class LegalHoldRequest(Attribution):
    memory_id: Id
    reason: StrictStr | None = Field(None, max_length=1024, description="Why (a case number, say)")


class SupersedeRequest(Attribution):
    superseded_by: Id = Field(description="The memory that replaces this one (it must exist)")


class ForgetRequest(Attribution):
    reason: StrictStr | None = Field(None, max_length=1024, description="Why, kept in the lineage")


class SpendCreate(Attribution):
    platform: StrictStr = Field(pattern=anchored(v.NAME_RE.pattern), examples=["meta"])
    amount: Float = Field(ge=0)
    currency: StrictStr = Field(pattern=anchored(v.CURRENCY_RE.pattern), examples=["USD"])
    period: StrictStr = Field(min_length=1, max_length=32, examples=["2026-12"])


class ClockTick(Attribution):
    now: Timestamp = Field(description="The graph's clock: expiry is decided by the rules against it")


class KpiCreate(Attribution):
    metric: StrictStr = Field(pattern=anchored(v.NAME_RE.pattern), examples=["roas"])
    value: Float
    period: StrictStr = Field(min_length=1, max_length=32, examples=["2026-12"])


class Accepted(BaseModel):
    """Where the log recorded a write; ``applied`` once the projection has it (``?wait=true``)."""

    model_config = ConfigDict(from_attributes=True)

    event_id: str
    memory_id: str | None = None
    partition: int
    offset: int
    applied: bool


class ActorOut(BaseModel):
    id: str | None
    role: str | None


class MemoryPublic(BaseModel):
    id: str
    memory_class: str
    label: str
    content: str
    kind: str
    scope: str
    stakeholders: StakeholdersOut
    importance: int
    importance_name: str
    confidence: float
    expires_at: str | None
    properties: dict[str, PropertyValue]
    source: str
    actor: ActorOut
    valid_from: str | None = Field(description="Valid time: when the belief began to hold")
    valid_to: str | None = Field(description="When it stopped holding: its superseder's valid_from")
    recorded_at: str | None
    updated_at: str | None
    superseded_by: str | None
    supersedes: list[str]
    forgotten: bool
    active: bool
    legal_hold: str | None = Field(None, description="The reason of the legal hold that stands, if any")
    lineage: list[str]
    classes: list[str] = Field(default_factory=list, description="Asserted and inferred classes")
    statuses: dict[str, StatusValue] = Field(
        default_factory=dict,
        description="Every :DerivedStatus of the ontology the rules concluded, by name: targetStatus and "
        "budgetStatus (strings), budgetSpend, budgetPercent and liveRank (numbers)",
    )
    conflicts_with: list[str] = Field(default_factory=list)
    derived: list[Derived] = Field(default_factory=list)


class DerivedInput(BaseModel):
    subject: str
    predicate: str
    object: str
    asserted: bool


class Derived(BaseModel):
    """An inferred fact about the memory, the rule that derived it and from what."""

    predicate: str
    value: str
    rule: str | None
    explanation: str | None
    inputs: list[DerivedInput]


class MemoriesPublic(BaseModel):
    data: list[MemoryPublic]
    count: int


class Readiness(BaseModel):
    ready: bool
    broker: bool
    lag: dict[int, int] = Field(default_factory=dict, description="Unhandled records per partition")
    handled: dict[str, int] = Field(default_factory=dict, description="Outcomes since start")
    batches: dict[str, int] = Field(
        default_factory=dict, description="The projector's batches since start, by size (records)"
    )
    reason: str | None = None


# -- recall and context -------------------------------------------------------------------------
QUERY_MAX = 4096  # characters of a recall or context query
Fusion = Literal["default", "bm25", "vector", "rrf", "minmax", "zscore"]
ClassName = Annotated[StrictStr, Field(max_length=1024, pattern=CLASS_PATTERN)]


class RecallRequest(EdgeModel):
    """What to recall; ``GET …/recall`` takes the same fields as query parameters."""

    q: StrictStr = Field(min_length=1, max_length=QUERY_MAX, pattern=NON_BLANK, description="The query text")
    limit: Int = Field(10, ge=1, le=100)
    budget_tokens: Int | None = Field(
        None, ge=1, le=1_000_000, description="Pack the best results into this many tokens (label + content)"
    )
    kind: list[Kind] = Field(default_factory=list, max_length=4)
    memory_class: list[ClassName] = Field(
        default_factory=list, alias="class", max_length=32, description="Classes; subclasses match too"
    )
    min_importance: Int = Field(2, ge=1, le=5, description="Least importance tier (default Low)")
    min_confidence: Float = Field(0.0, ge=0, le=1)
    valid_at: Timestamp | None = Field(
        None, description="Valid time: recall among the memories that held then (superseded since or not)"
    )
    fusion: Fusion = Field(
        "default",
        description="default: min-max fused BM25 + vector, blended with recency and forgetting, x confidence "
        "x class weight; bm25, vector, rrf, minmax, zscore: a single signal or plain fusion, for measurement",
    )


class Signals(BaseModel):
    bm25: float | None = Field(description="BM25 score, if the text index found it")
    vector: float | None = Field(description="Cosine similarity, if the vector index found it")
    recency: float = Field(description="0.5 ** (age in days / 30), from valid time")
    forgetting: float = Field(description="exp(-age / stability); stability doubles per importance tier")


class RecallHit(BaseModel):
    id: str
    label: str
    content: str
    kind: str
    scope: str
    importance: int
    confidence: float
    memory_class: str
    statuses: dict[str, StatusValue]
    score: float
    signals: Signals
    tokens: int = Field(description="Tokens of label + content by the embedder's tokenizer")


class RecallAnswer(BaseModel):
    data: list[RecallHit]
    tokens: int = Field(description="Tokens of the results together")
    now: str = Field(
        description="The clock recency and forgetting were computed against: the read's time (to the "
        "millisecond), or its as_of time; as_of=now asks the same question again, with the same answer"
    )


class ContextItem(BaseModel):
    id: str
    label: str
    content: str
    kind: str
    memory_class: str
    scope: str
    owner: str = Field(description="company, user:<id> or team:<ids>")
    importance: int
    importance_name: str
    confidence: float
    statuses: dict[str, dict[str, Any]] = Field(
        description="One block per :statusGroup of the ontology, fields by :statusField: "
        "target: {status, metric, goal}; budget: {status, spend, cap, currency, percent}"
    )
    set_by: dict[str, str | None] = Field(description="source, actor and role of the write")
    set_at: str | None = Field(description="When the log recorded it")
    valid_from: str | None
    similarity: float | None = Field(description="Cosine similarity to q, when q is given")
    wins_over: list[str] = Field(default_factory=list)
    overridden_by: list[str] = Field(default_factory=list)


class ContextBlock(BaseModel):
    title: str
    items: list[ContextItem]


class ContextConflict(BaseModel):
    winner: str
    overridden: str
    key: list[str] | None
    reason: str
    looks_accidental: bool
    note: str | None


class ContextAnswer(BaseModel):
    blocks: list[ContextBlock]
    conflicts: list[ContextConflict]
    snapshot: dict[str, Any] = Field(description="kpis, spend and the clock")
    count: int
    text: str = Field(description="The whole bundle as markdown, ready to paste into a prompt")
    tokens: int = Field(description="Tokens of text by the embedder's tokenizer")


# -- the event log ------------------------------------------------------------------------------
class LogActor(BaseModel):
    id: str
    role: str
    on_behalf_of: str | None = Field(None, description="An agent's: the user it acted for")


class LogEvent(BaseModel):
    """One event as the log holds it, its memory content unsealed (or erased, once forgotten)."""

    position: str = Field(description="partition:offset, usable as from, to or cursor")
    partition: int
    offset: int
    recorded_at: str = Field(description="System time: when the log appended it (UTC, ms)")
    event_id: str
    type: str
    tenant: str
    occurred_at: str = Field(description="Valid time, as the writer gave it (else when it was written)")
    actor: LogActor
    source: str
    purpose: str | None
    correlation_id: str | None
    payload: dict[str, Any] = Field(description="The payload's fields; an embedding as embedding_dim")


class EventLogPage(BaseModel):
    data: list[LogEvent]
    next: str | None = Field(
        description="Pass as cursor (with the same filters) for the next page; null: no more"
    )
    skipped: int = Field(
        description="Records of the tenant in this page's range that are not readable events"
    )


class SnapshotOut(BaseModel):
    """A tenant snapshot: its store at the checkpoint ``partition:offset`` (``{key}.tar`` and
    ``{key}.json`` in the object store)."""

    key: str
    tenant: str
    partition: int
    offset: int
    timestamp_ms: int = Field(description="When the log appended the checkpoint's event")
    handled: int = Field(description="Events the tenant's projection had handled")
    bytes: int
    sha256: str = Field(description="Of the tar; empty for a directory (RocksDB checksums its files)")
    format: str = Field(description="tar (an object store) or dir (a local directory of hard links)")


class SnapshotsOut(BaseModel):
    data: list[SnapshotOut]
