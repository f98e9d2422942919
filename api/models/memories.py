"""Memories and business data: the write requests (with who is writing) and the memory read."""

from __future__ import annotations

from typing import Any, Literal
from uuid import UUID

from engram.api.models.fields import (
    CLASS_PATTERN,
    NON_BLANK,
    EdgeModel,
    Float,
    Id,
    Int,
    Kind,
    OnConflict,
    PropertyName,
    PropertyValue,
    Scope,
    Source,
    StatusValue,
    Timestamp,
    anchored,
)
from engram.commands import writes
from engram.schemas import vocabulary as v
from engram.schemas.events import Actor
from engram.schemas.payloads import REVISABLE_FIELDS
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictStr,
    model_validator,
)
from pydantic_core import PydanticCustomError


class ActorIn(EdgeModel):
    id: StrictStr = Field(min_length=1, max_length=128, pattern=NON_BLANK)
    role: StrictStr = Field(min_length=1, max_length=64, pattern=NON_BLANK)


class Stakeholders(EdgeModel):
    user_id: Id | None = None
    team_ids: list[Id] = Field(default_factory=list, max_length=64)


class EvidenceIn(EdgeModel):
    """The conversation and turns an extracted memory rests on (``justify`` shows them)."""

    conversation_id: Id
    turn_ids: list[Id] = Field(min_length=1, max_length=v.EVIDENCE_TURNS_MAX)


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
    evidence: EvidenceIn | None = Field(
        None,
        description="The conversation and turns it was extracted from: with source extraction only "
        "(justify says 'extracted from conversation C, turns ...', a claim no other source makes)",
    )
    proposes: Id | None = Field(
        None,
        description="A proposal: the memory this would replace once a person accepts it "
        "(GET …/proposals); inactive until then. An extracted memory that would replace a person's "
        "becomes one without asking.",
    )
    also_proposes: list[Id] = Field(
        default_factory=list,
        max_length=v.PROPOSED_MAX - 1,
        description="A proposal against several memories: the others it would replace besides "
        "proposes (accepting it supersedes them all). An extracted memory that contradicts several "
        "a person entered proposes against them all without asking.",
    )

    @model_validator(mode="after")
    def _embedding_has_a_model(self) -> MemoryCreate:
        if self.embedding is not None and self.embedding_model is None:
            raise PydanticCustomError("missing", "an embedding needs embedding_model")
        return self

    @model_validator(mode="after")
    def _evidence_is_extracted(self) -> MemoryCreate:
        if self.evidence is not None and self.source != v.Source.EXTRACTION:
            raise PydanticCustomError(
                "value_error", "evidence is only for source extraction (a memory from a conversation)"
            )
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


MOST_PER_BATCH = 1000


class MemoriesCreate(EdgeModel):
    """Many memories in one request (``POST …/memories:batch``): each item is a MemoryCreate body,
    checked on its own, so one bad item is answered as such and the others are written."""

    memories: list[dict[str, Any]] = Field(
        min_length=1,
        max_length=MOST_PER_BATCH,
        description="Up to 1,000 MemoryCreate bodies; an item's event_id makes it idempotent, as an "
        "Idempotency-Key header does for every item (item i's event id derived from the key and i)",
    )
    source: Source | None = Field(None, description="The source of every item that names none")


class ItemAnswer(BaseModel):
    """One item's outcome, in the request's order: what a request with that item alone would have
    been answered (``status``), with where the log put it or why it was not written."""

    index: int
    status: int = Field(description="202 accepted; else the status the item alone would have got")
    outcome: Literal[
        "accepted", "invalid", "refused", "not_found", "conflict", "too_large", "unavailable", "not_in_time"
    ]
    event_id: str | None = None
    memory_id: str | None = None
    partition: int | None = None
    offset: int | None = None
    applied: bool | None = None
    reason: str | None = None


class BatchAccepted(BaseModel):
    accepted: int = Field(description="How many items were accepted")
    results: list[ItemAnswer]


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
    proposes: str | None = Field(
        None, description="A proposal's: the memory it would replace (the first of proposes_all)"
    )
    proposes_all: list[str] = Field(
        default_factory=list,
        description="A proposal's: every memory it would replace (accepting supersedes them all), by id",
    )
    proposal_status: str | None = Field(
        None, description="A proposal's: pending, accepted or rejected (only an accepted one is active)"
    )
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
    behind: int = Field(0, description="Unhandled records of the partitions this process projects")
    max_lag: int = Field(0, description="Most it may be behind and be ready (ENGRAM_READY_MAX_LAG)")
    partitions: list[int] = Field(
        default_factory=list, description="The partitions counted: this process's, or all before it has any"
    )
    handled: dict[str, int] = Field(default_factory=dict, description="Outcomes since start")
    batches: dict[str, int] = Field(
        default_factory=dict, description="The projector's batches since start, by size (records)"
    )
    reason: str | None = None
