"""The read-side verbs an agent calls around its writes: recognize, justify, resolve, summarise.

Requests are strict like every body (``EdgeModel``); answers are plain models, so the SDK and the
MCP tools can take their JSON Schemas from here."""

from __future__ import annotations

from typing import Any, Literal

from engram.api.models.fields import (
    CLASS_PATTERN,
    NON_BLANK,
    EdgeModel,
    Float,
    Id,
    Int,
    PropertyName,
    PropertyValue,
    Scope,
    StatusValue,
)
from engram.api.models.memories import Accepted, ActorOut, Attribution
from engram.schemas import vocabulary as v
from pydantic import BaseModel, Field, StrictBool, StrictStr

# -- recognize ------------------------------------------------------------------------------------


class RecognizeRequest(EdgeModel):
    """A memory as it would be written, to ask whether it is already known."""

    label: StrictStr = Field(min_length=1, max_length=v.LABEL_MAX, pattern=NON_BLANK)
    content: StrictStr | None = Field(None, min_length=1, max_length=v.CONTENT_MAX, pattern=NON_BLANK)
    memory_class: StrictStr | None = Field(
        None,
        max_length=2048,
        pattern=CLASS_PATTERN,
        description="Its class: needed for the structural tier (the rules' conflict key is per class)",
    )
    scope: Scope | None = Field(
        None, description="Its scope; absent: every scope the caller has (company, its user, its teams)"
    )
    properties: dict[PropertyName, PropertyValue] = Field(
        default_factory=dict,
        max_length=64,
        json_schema_extra={"additionalProperties": False},
        description="What the key of a target (metric) or a budget (platform) is made of",
    )
    limit: Int = Field(10, ge=1, le=100)
    include_inactive: StrictBool = Field(False, description="Exact matches among superseded memories too")
    min_score: Float = Field(0.5, ge=-1, le=1, description="Least cosine similarity of a similar match")


class RecognizeMatch(BaseModel):
    id: str
    reason: Literal["exact", "structural", "similar"]
    label: str
    memory_class: str
    kind: str
    scope: str
    active: bool
    score: float | None = Field(None, description="Cosine similarity (similar only)")
    key: str | None = Field(None, description="The conflict key shared (structural only)")


class RecognizeAnswer(BaseModel):
    known: bool = Field(description="Whether any match was found")
    matches: list[RecognizeMatch]


# -- justify --------------------------------------------------------------------------------------


class LineageEvent(BaseModel):
    event_id: str
    partition: int | None
    offset: int | None


class Supersession(BaseModel):
    superseded_by: list[str] = Field(description="What replaced it, and what replaced that, nearest first")
    supersedes: list[str] = Field(description="What it replaced, nearest first")


class Evidence(BaseModel):
    conversation_id: str
    turn_ids: list[str]
    text: str = Field(description='"extracted from conversation C, turns t1, t2"')


class ProposalStanding(BaseModel):
    """A proposal's: the memory it would replace and how it was decided."""

    proposes: str | None = Field(
        description="The memory it would replace, the first of proposes_all (null: none the reader may see)"
    )
    proposes_all: list[str] = Field(
        default_factory=list, description="Every memory it would replace that the reader may see, by id"
    )
    status: str = Field(description="pending, accepted or rejected")
    decided_by: str | None = Field(description="Who accepted or rejected it (an agent's id if one did)")
    decided_by_role: str | None
    decided_for: str | None = Field(description="The user the decision was made for")
    decided_at: str | None
    reason: str | None


class Justification(BaseModel):
    memory_id: str
    label: str | None
    memory_class: str
    active: bool
    forgotten: bool
    source: str | None
    actor: ActorOut
    purpose: str | None
    valid_from: str | None
    valid_to: str | None
    recorded_at: str | None
    updated_at: str | None
    forgotten_at: str | None
    forgotten_reason: str | None
    events: list[LineageEvent] = Field(description="Every event that touched it, in log order")
    supersession: Supersession
    evidence: Evidence | None = Field(
        None, description="An extracted memory's conversation and turns; null for any other"
    )
    proposal: ProposalStanding | None = Field(None, description="Set when this memory is a proposal")
    pending_proposals: list[str] = Field(
        default_factory=list, description="Pending proposals to replace this memory, by id"
    )
    statuses: dict[str, StatusValue]
    derived: list[dict[str, Any]] = Field(
        description="Inferred facts about it ({predicate, value, derivations}), each derivation "
        "{rule, explanation, inputs} with inputs' own derivations under ``because``"
    )
    as_of: str | None = Field(None, description="The system time asked for, if any")


# -- resolve --------------------------------------------------------------------------------------

Policy = Literal["prefer_newer", "prefer_higher_confidence", "prefer_more_specific_scope", "prefer_human"]


class ResolveRequest(Attribution):
    policy: Policy
    memory_ids: list[Id] | None = Field(
        None,
        min_length=1,
        max_length=100,
        description="Only the conflicting sets that hold one of these; absent: every set the caller sees",
    )


class Superseded(BaseModel):
    memory_id: str
    superseded_by: str
    reason: str
    event: Accepted | None = Field(None, description="The MemorySuperseded appended (apply=true)")


class ResolvedSet(BaseModel):
    key: str = Field(description="The rules' conflict key the set shares")
    scope: str
    members: list[str]
    winner: str
    superseded: list[Superseded]


class ResolveAnswer(BaseModel):
    policy: Policy
    applied: bool = Field(description="false: a dry run, nothing was written")
    sets: list[ResolvedSet]


# -- summarise ------------------------------------------------------------------------------------


class SummaryItem(BaseModel):
    id: str
    label: str
    content: str
    kind: str
    memory_class: str
    scope: str
    importance: int
    confidence: float
    active: bool
    valid_from: str | None
    statuses: dict[str, StatusValue]


class SummaryAnswer(BaseModel):
    topic: str | None
    session: str | None = Field(None, description="The session whose memories these are")
    as_of: str | None = Field(None, description="The system time asked for: a log position or a UTC time")
    count: int
    active: int
    by_kind: dict[str, int]
    by_class: dict[str, int]
    by_scope: dict[str, int]
    by_importance: dict[str, int]
    statuses: dict[str, dict[str, int]] = Field(description="Per status (e.g. budgetStatus), counts by value")
    conflicts: list[list[str]] = Field(description="Conflicting sets among these memories")
    top: list[SummaryItem] = Field(description="Most important first")
    text: str = Field(description="The summary as markdown")
