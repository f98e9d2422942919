"""Request and response models at the HTTP edge; limits are declared on the fields."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal
from uuid import UUID, uuid4

from pydantic import BaseModel, ConfigDict, Field

from schemas import vocabulary as v

Kind = Literal["preference", "fact", "objective", "context"]
Scope = Literal["user", "team", "company"]
Source = Literal["agent", "extraction", "operator", "onboarding", "pipeline", "system"]
PropertyValue = bool | int | float | str | None


class ActorIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str = Field(min_length=1, max_length=128)
    role: str = Field(min_length=1, max_length=64)


class Stakeholders(BaseModel):
    model_config = ConfigDict(extra="forbid")
    user_id: str | None = Field(None, max_length=128)
    team_ids: list[str] = Field(default_factory=list, max_length=64)


class Attribution(BaseModel):
    """Who writes and from where: every write is attributable."""

    model_config = ConfigDict(extra="forbid")
    event_id: UUID | None = Field(None, description="Idempotency key; a fresh UUID if absent.")
    source: Source
    actor: ActorIn
    occurred_at: datetime | None = Field(None, description="Valid time; defaults to now.")
    purpose: str | None = Field(None, max_length=256)
    correlation_id: str | None = Field(None, max_length=128)

    def envelope(self, event_type: str, tenant: str, payload: dict[str, Any]) -> dict[str, Any]:
        env = self.model_dump(
            include={"source", "actor", "occurred_at", "purpose", "correlation_id"}, exclude_none=True
        )
        event_id = str(self.event_id or uuid4())
        return {"type": event_type, "tenant": tenant, "payload": payload, "event_id": event_id, **env}


class MemoryCreate(Attribution):
    memory_id: str | None = Field(None, pattern=v.ID_RE.pattern, description="Minted if absent.")
    label: str = Field(min_length=1, max_length=512)
    content: str = Field(min_length=1, max_length=32_768)
    kind: Kind
    scope: Scope = "company"
    stakeholders: Stakeholders = Field(default_factory=Stakeholders)
    importance: int = Field(ge=1, le=5, description="1 Disabled, 2 Low, 3 Medium, 4 High, 5 Critical")
    confidence: float = Field(1.0, ge=0, le=1)
    expires_at: datetime | None = None
    memory_class: str = Field("Memory", pattern=v.CLASS_RE.pattern)
    properties: dict[str, PropertyValue] = Field(default_factory=dict, max_length=64)
    embedding: list[float] | None = Field(None, max_length=4096)
    embedding_model: str | None = Field(None, max_length=128)
    replaces: str | None = Field(None, pattern=v.ID_RE.pattern)
    on_conflict: Literal["ask", "replace", "keep_both"] = "ask"

    def payload(self) -> dict[str, Any]:
        return self.model_dump(
            exclude={"event_id", "source", "actor", "occurred_at", "purpose", "correlation_id"},
            exclude_none=True,
        )


class KpiCreate(Attribution):
    metric: str = Field(pattern=v.NAME_RE.pattern, examples=["roas"])
    value: float
    period: str = Field(min_length=1, max_length=32, examples=["2026-12"])


class Accepted(BaseModel):
    """Where the log recorded a write; ``applied`` once the projection has it (``?wait=true``)."""

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
    stakeholders: Stakeholders
    importance: int
    importance_name: str
    confidence: float
    expires_at: str | None
    properties: dict[str, PropertyValue]
    source: str
    actor: ActorOut
    valid_from: str | None
    recorded_at: str | None
    updated_at: str | None
    superseded_by: str | None
    supersedes: list[str]
    forgotten: bool
    active: bool
    lineage: list[str]
    classes: list[str] = Field(default_factory=list, description="Asserted and inferred classes")
    statuses: dict[str, str] = Field(default_factory=dict, description="targetStatus, budgetStatus, ...")
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
    reason: str | None = None
