"""Typed answers of the agent verbs (recognize, justify, resolve, summarise, plans, sessions and
decisions); ``engram_client.models`` re-exports them."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from engram_client.models import Accepted, Actor, Answer

# -- agent work: sessions, episodes, tool calls, decisions, associations --------------------------


class AgentAccepted(Accepted):
    """Where the log recorded a session, episode, tool call, decision or association; ``id`` is
    the node it records (the one given, or minted from the event id)."""

    id: str


# -- recognize ------------------------------------------------------------------------------------


class RecognizeMatch(Answer):
    """A known memory and why it matched: ``exact`` (the label), ``structural`` (the rules' conflict
    key, ``key``), ``similar`` (cosine ``score``)."""

    id: str
    reason: str
    label: str = ""
    memory_class: str = "Memory"
    kind: str = ""
    scope: str = ""
    active: bool = True
    score: float | None = None
    key: str | None = None


class Recognition(Answer):
    """``recognize``'s answer: ``known`` and the matches, strongest first."""

    known: bool
    matches: list[RecognizeMatch] = Field(default_factory=list)


# -- justify --------------------------------------------------------------------------------------


class LineageEvent(Answer):
    event_id: str
    partition: int | None = None
    offset: int | None = None


class Supersession(Answer):
    superseded_by: list[str] = Field(default_factory=list)
    supersedes: list[str] = Field(default_factory=list)


class Derivation(Answer):
    """One way a fact was derived: the rule (``file:line``), its sentence and the facts it used
    (each input's own derivations under ``because``)."""

    rule: str | None = None
    explanation: str | None = None
    inputs: list[dict[str, Any]] = Field(default_factory=list)


class DerivedFact(Answer):
    predicate: str
    value: str
    derivations: list[Derivation] = Field(default_factory=list)


class Justification(Answer):
    """Why a memory is believed: provenance, every event, the supersession chain, the derivations."""

    memory_id: str
    label: str | None = None
    memory_class: str = "Memory"
    active: bool = True
    forgotten: bool = False
    source: str | None = None
    actor: Actor = Field(default_factory=Actor)
    purpose: str | None = None
    valid_from: str | None = None
    valid_to: str | None = None
    recorded_at: str | None = None
    updated_at: str | None = None
    forgotten_at: str | None = None
    forgotten_reason: str | None = None
    events: list[LineageEvent] = Field(default_factory=list)
    supersession: Supersession = Field(default_factory=Supersession)
    evidence: dict[str, Any] | None = None  # an extracted memory's {conversation_id, turn_ids, text}
    proposal: dict[str, Any] | None = None  # a proposal's: proposes(_all), status, decided_by/for/at, reason
    pending_proposals: list[str] = Field(default_factory=list)  # pending proposals to replace it
    statuses: dict[str, Any] = Field(default_factory=dict)
    derived: list[DerivedFact] = Field(default_factory=list)
    as_of: str | None = None


# -- resolve --------------------------------------------------------------------------------------


class Superseded(Answer):
    memory_id: str
    superseded_by: str
    reason: str = ""
    event: Accepted | None = None  # the MemorySuperseded appended (apply=True)


class ResolvedSet(Answer):
    key: str
    scope: str = ""
    members: list[str] = Field(default_factory=list)
    winner: str
    superseded: list[Superseded] = Field(default_factory=list)


class Resolution(Answer):
    """``resolve``'s answer: per conflicting set, the winner and the losers; ``applied`` False for a
    dry run (nothing written)."""

    policy: str
    applied: bool
    sets: list[ResolvedSet] = Field(default_factory=list)


# -- summarise ------------------------------------------------------------------------------------


class SummaryItem(Answer):
    id: str
    label: str = ""
    content: str = ""
    kind: str = ""
    memory_class: str = "Memory"
    scope: str = ""
    importance: int = 0
    confidence: float = 1.0
    active: bool = True
    valid_from: str | None = None
    statuses: dict[str, Any] = Field(default_factory=dict)


class Summary(Answer):
    """A deterministic summary of a topic, a session's memories or every active memory; ``text``
    as markdown; ``as_of`` the system time asked for."""

    topic: str | None = None
    session: str | None = None
    as_of: str | None = None
    count: int = 0
    active: int = 0
    by_kind: dict[str, int] = Field(default_factory=dict)
    by_class: dict[str, int] = Field(default_factory=dict)
    by_scope: dict[str, int] = Field(default_factory=dict)
    by_importance: dict[str, int] = Field(default_factory=dict)
    statuses: dict[str, dict[str, int]] = Field(default_factory=dict)
    conflicts: list[list[str]] = Field(default_factory=list)
    top: list[SummaryItem] = Field(default_factory=list)
    text: str = ""


# -- plans ----------------------------------------------------------------------------------------


class Finding(Answer):
    """An active constraint the action would breach (``breach``) or bring near its limit
    (``near_limit``), with the rule and its sentence."""

    status: str
    memory_id: str
    rule: str = ""
    explanation: str | None = None
    values: dict[str, Any] = Field(default_factory=dict)


class PlanCheck(Answer):
    """``check_plan``'s answer: ``ok`` unless some constraint would be breached."""

    ok: bool
    findings: list[Finding] = Field(default_factory=list)

    @property
    def breaches(self) -> list[Finding]:
        return [f for f in self.findings if f.status == "breach"]


# -- sessions and decisions -----------------------------------------------------------------------


class StatusExplained(Answer):
    status: str
    explanation: str | None = None


class NarrativeItem(Answer):
    """One step of a session (``type``: ``episode``, ``tool_call`` or ``decision``), or a decision
    as ``get_decision`` answers it; the fields are those of its type."""

    type: str
    id: str
    actor: Actor = Field(default_factory=Actor)
    acting_for: str | None = None
    valid_from: str | None = None
    recorded_at: str | None = None
    offset: int | None = None
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
    statuses: list[StatusExplained] | None = None


class SessionNarrative(Answer):
    """``episodes_in``: the session and its episodes, tool calls and decisions in log order."""

    id: str
    actor: Actor = Field(default_factory=Actor)
    acting_for: str | None = None
    goal: str | None = None
    valid_from: str | None = None
    recorded_at: str | None = None
    offset: int | None = None
    ended_at: str | None = None
    outcome: str | None = None
    items: list[NarrativeItem] = Field(default_factory=list)


class DecisionReliedOn(Answer):
    memory_id: str
    label: str | None = None
    how: str = "cited"  # cited in relied_on, or associated as supports
    active: bool | None = None


class DecisionEvent(Answer):
    event_id: str
    type: str
    partition: int | None = None
    offset: int | None = None
    association_id: str | None = None
    relation: str | None = None


class DecisionJustification(Answer):
    """Why a decision was taken: who recorded it and for whom, its session and episode, the memories
    and live data it relied on, every event that touched it, and its statuses with their rule
    derivation trees."""

    decision_id: str
    decision: str | None = None
    source: str | None = None
    actor: Actor = Field(default_factory=Actor)
    acting_for: str | None = None
    purpose: str | None = None
    session_id: str | None = None
    episode_id: str | None = None
    valid_from: str | None = None
    recorded_at: str | None = None
    relied_on: list[DecisionReliedOn] = Field(default_factory=list)
    live_data: list[str] = Field(default_factory=list)
    spend: dict[str, Any] | None = None
    target_change: dict[str, Any] | None = None
    breaches: list[str] = Field(default_factory=list)
    events: list[DecisionEvent] = Field(default_factory=list)
    statuses: list[StatusExplained] = Field(default_factory=list)
    derived: list[DerivedFact] = Field(default_factory=list)
    as_of: str | None = None


class DecisionPage(Answer):
    """The decisions that relied on a memory, in log order."""

    data: list[NarrativeItem] = Field(default_factory=list)
    count: int = 0
