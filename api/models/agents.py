"""Agent work at the edge: sessions, episodes, tool calls, decisions, associations, plan checks.

The limits are the events' own (``schemas.vocabulary``), so the edge refuses what an event would
with a 422 naming the field, before anything is produced; the domain rules Avro cannot say (a
planned period's shape, a live-data reference) are the payloads' ``check``, run by the command.
"""

from __future__ import annotations

from typing import Any, Literal

from engram.api.models.fields import NON_BLANK, EdgeModel, Float, Id, Source, anchored
from engram.api.models.memories import Accepted, Attribution
from engram.schemas import vocabulary as v
from pydantic import BaseModel, Field, StrictStr, model_validator
from pydantic_core import PydanticCustomError

Name = StrictStr  # a platform, metric or tool: NAME_RE, declared per field
_NAME = anchored(v.NAME_RE.pattern)
# an association's end: a memory id, episode:{id} or decision:{id}
REF_PATTERN = anchored(rf"(?:(?:{'|'.join(v.REF_KINDS)}):)?{v.ID_RE.pattern.strip('^$')}")
_Relation = Literal[tuple(r.value for r in v.Relation)]  # type: ignore[valid-type]
_Outcome = Literal[tuple(o.value for o in v.ToolOutcome)]  # type: ignore[valid-type]


class AgentWrite(Attribution):
    """Agent work is attributed like every write; its source defaults to ``agent``."""

    source: Source = v.Source.AGENT.value


class AgentAccepted(Accepted):
    """Where the log recorded the write, and the id of the node it records (minted if not given)."""

    id: str


class SessionStart(AgentWrite):
    session_id: Id | None = Field(None, description="Minted from the event id if absent.")
    goal: StrictStr | None = Field(None, max_length=v.SUMMARY_MAX, pattern=NON_BLANK)


class SessionEnd(AgentWrite):
    outcome: StrictStr | None = Field(None, max_length=v.SUMMARY_MAX, pattern=NON_BLANK)


class EpisodeCreate(AgentWrite):
    episode_id: Id | None = None
    summary: StrictStr = Field(min_length=1, max_length=v.SUMMARY_MAX, pattern=NON_BLANK)


class ToolCallCreate(AgentWrite):
    call_id: Id | None = None
    episode_id: Id | None = None
    tool: Name = Field(pattern=_NAME, examples=["check_plan"])
    arguments_digest: StrictStr = Field(
        pattern=anchored(v.DIGEST_RE.pattern),
        description="sha256: and the 64 hex digits of the arguments' digest; never the arguments",
    )
    outcome: _Outcome


class PlannedSpendIn(EdgeModel):
    platform: Name = Field(pattern=_NAME, examples=["meta"])
    amount: Float = Field(ge=0, le=1e15, examples=[8000])
    currency: StrictStr = Field(pattern=anchored(v.CURRENCY_RE.pattern), examples=["USD"])
    period: StrictStr = Field(
        min_length=1,
        max_length=32,
        examples=["2026-12"],
        description="A calendar period: 2026-12, 2026-Q4, 2026-W49",
    )


class PlannedKpiIn(EdgeModel):
    metric: Name = Field(pattern=_NAME, examples=["roas"])
    value: Float = Field(description="The metric's expected value if the action is taken")


class DecisionCreate(AgentWrite):
    decision_id: Id | None = None
    session_id: Id | None = None
    episode_id: Id | None = None
    decision: StrictStr = Field(min_length=1, max_length=v.DECISION_MAX, pattern=NON_BLANK)
    relied_on: list[Id] = Field(default_factory=list, max_length=v.CITED_MAX, description="memory ids")
    live_data: list[StrictStr] = Field(
        default_factory=list,
        max_length=v.CITED_MAX,
        description="observations: spend:{platform}:{currency}:{period}, kpi:{metric}:{period}",
    )
    spend: PlannedSpendIn | None = None
    target_change: PlannedKpiIn | None = None

    def payload(self) -> dict[str, Any]:
        return self.model_dump(
            include={
                "decision_id", "session_id", "episode_id", "decision", "relied_on", "live_data", "spend",
                "target_change",
            }
        )  # fmt: skip


class AssociationCreate(AgentWrite):
    association_id: Id | None = None
    from_: StrictStr = Field(alias="from", max_length=200, pattern=REF_PATTERN)
    to: StrictStr = Field(max_length=200, pattern=REF_PATTERN)
    relation: _Relation


class AssociationRemove(AgentWrite):
    reason: StrictStr | None = Field(None, max_length=v.REASON_MAX, pattern=NON_BLANK)


class PlanCheck(EdgeModel):
    """A proposed action in typed form: exactly one of ``spend`` or ``target_change``."""

    spend: PlannedSpendIn | None = None
    target_change: PlannedKpiIn | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> PlanCheck:
        if (self.spend is None) == (self.target_change is None):
            raise PydanticCustomError("plan", "a plan is exactly one of spend or target_change")
        return self


class Finding(BaseModel):
    status: Literal["breach", "near_limit"]
    memory_id: str
    rule: str
    explanation: str | None
    values: dict[str, int | float | str]


class PlanAnswer(BaseModel):
    ok: bool = Field(description="No active constraint would be breached")
    findings: list[Finding]


class Status(BaseModel):
    status: str
    explanation: str | None


class ActorOut(BaseModel):
    id: str | None
    role: str | None


class NarrativeItem(BaseModel):
    """One step of a session: an episode, a tool call or a decision (fields by ``type``)."""

    type: Literal["episode", "tool_call", "decision"]
    id: str
    actor: ActorOut
    acting_for: str | None
    valid_from: str | None
    recorded_at: str | None
    offset: int | None
    summary: str | None = None
    tool: str | None = None
    arguments_digest: str | None = None
    outcome: str | None = None
    episode_id: str | None = None
    session_id: str | None = None
    decision: str | None = None
    relied_on: list[str] | None = None
    live_data: list[str] | None = None
    spend: dict[str, Any] | None = None
    target_change: dict[str, Any] | None = None
    breaches: list[str] | None = None
    statuses: list[Status] | None = None


class SessionNarrative(BaseModel):
    id: str
    actor: ActorOut
    acting_for: str | None
    goal: str | None
    valid_from: str | None
    recorded_at: str | None
    offset: int | None
    ended_at: str | None
    outcome: str | None
    items: list[NarrativeItem]


class DecisionsPublic(BaseModel):
    data: list[NarrativeItem]
    count: int


class ReliedOn(BaseModel):
    memory_id: str
    label: str | None
    how: Literal["cited", "supports"] = Field(
        description="cited in the decision's relied_on, or associated as supporting it"
    )
    active: bool | None


class TouchingEvent(BaseModel):
    event_id: str
    type: Literal["DecisionRecorded", "MemoriesAssociated"]
    partition: int | None
    offset: int | None
    association_id: str | None = None
    relation: str | None = None


class DecisionJustification(BaseModel):
    """Why a decision was taken, in one answer (``GET …/decisions/{id}/justify``)."""

    decision_id: str
    decision: str | None
    source: str | None
    actor: ActorOut = Field(description="Who recorded it (the agent)")
    acting_for: str | None = Field(description="The user it was recorded for")
    purpose: str | None
    session_id: str | None
    episode_id: str | None
    valid_from: str | None
    recorded_at: str | None
    relied_on: list[ReliedOn] = Field(description="The memories it relied on that the caller may see")
    live_data: list[str] = Field(description="The observations it relied on (spend:…, kpi:…)")
    spend: dict[str, Any] | None
    target_change: dict[str, Any] | None
    breaches: list[str] = Field(description="The active constraints its action breaches")
    events: list[TouchingEvent] = Field(description="Every event that touched it, in log order")
    statuses: list[Status]
    derived: list[dict[str, Any]] = Field(
        description="Inferred facts about it (decisionStatus, basedOn, breaches: {predicate, value, "
        "derivations}), each derivation {rule, explanation, inputs} with inputs' own under ``because``"
    )
    as_of: str | None = Field(None, description="The system time asked for, if any")
