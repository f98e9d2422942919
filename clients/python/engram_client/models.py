"""The API's answers as pydantic models.

They mirror the server's response models (``engram.api.models``) without importing them: this
distribution must not need the server. Every model allows extra fields and gives most fields a
default, so a server newer than the client (a field added) still parses; what the client knows is
typed, what it does not is kept in ``model_extra``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Answer(BaseModel):
    """Any answer: known fields typed, unknown ones kept (``answer.model_extra``, or as attributes)."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)


class Accepted(Answer):
    """Where the log recorded a write (the 202). ``position`` is what a context read waits for."""

    event_id: str
    memory_id: str | None = None
    partition: int
    offset: int
    applied: bool = False

    @property
    def position(self) -> str | None:
        """``partition:offset``, or None for a retry the server answered without a position."""
        return f"{self.partition}:{self.offset}" if self.partition >= 0 and self.offset >= 0 else None


class Actor(Answer):
    id: str | None = None
    role: str | None = None


class Stakeholders(Answer):
    user_id: str | None = None
    team_ids: list[str] = Field(default_factory=list)


class DerivedInput(Answer):
    subject: str
    predicate: str
    object: str
    asserted: bool = True


class Derived(Answer):
    """An inferred fact about a memory, the rule that derived it and the facts it came from."""

    predicate: str
    value: str
    rule: str | None = None
    explanation: str | None = None
    inputs: list[DerivedInput] = Field(default_factory=list)


class Memory(Answer):
    """One memory as ``GET …/memories/{id}`` answers it."""

    id: str
    memory_class: str = "Memory"
    label: str = ""
    content: str = ""
    kind: str = ""
    scope: str = ""
    stakeholders: Stakeholders = Field(default_factory=Stakeholders)
    importance: int = 0
    importance_name: str | None = None
    confidence: float = 1.0
    expires_at: str | None = None
    properties: dict[str, Any] = Field(default_factory=dict)
    source: str | None = None
    actor: Actor = Field(default_factory=Actor)
    valid_from: str | None = None
    valid_to: str | None = None
    recorded_at: str | None = None
    updated_at: str | None = None
    superseded_by: str | None = None
    supersedes: list[str] = Field(default_factory=list)
    forgotten: bool = False
    active: bool = True
    legal_hold: str | None = None
    lineage: list[str] = Field(default_factory=list)
    classes: list[str] = Field(default_factory=list)
    statuses: dict[str, Any] = Field(default_factory=dict)
    conflicts_with: list[str] = Field(default_factory=list)
    derived: list[Derived] = Field(default_factory=list)


class MemoryPage(Answer):
    data: list[Memory]
    count: int


class Signals(Answer):
    bm25: float | None = None
    vector: float | None = None
    recency: float | None = None
    forgetting: float | None = None


class RecallHit(Answer):
    id: str
    label: str
    content: str
    kind: str = ""
    scope: str = ""
    importance: int = 0
    confidence: float = 1.0
    memory_class: str = "Memory"
    statuses: dict[str, Any] = Field(default_factory=dict)
    score: float = 0.0
    signals: Signals = Field(default_factory=Signals)
    tokens: int = 0


class Recall(Answer):
    """Recall hits, best first; ``tokens`` of them together; ``now`` the clock they were scored at."""

    data: list[RecallHit]
    tokens: int = 0
    now: str | None = None


class ContextItem(Answer):
    id: str
    label: str
    content: str
    kind: str = ""
    memory_class: str = "Memory"
    scope: str = ""
    owner: str | None = None
    importance: int = 0
    importance_name: str | None = None
    confidence: float = 1.0
    statuses: dict[str, Any] = Field(default_factory=dict)
    set_by: dict[str, Any] = Field(default_factory=dict)
    set_at: str | None = None
    valid_from: str | None = None
    similarity: float | None = None
    wins_over: list[str] = Field(default_factory=list)
    overridden_by: list[str] = Field(default_factory=list)


class ContextBlock(Answer):
    title: str
    items: list[ContextItem] = Field(default_factory=list)


class ContextConflict(Answer):
    winner: str
    overridden: str
    key: list[str] | None = None
    reason: str = ""
    looks_accidental: bool = False
    note: str | None = None


class Context(Answer):
    """What an agent pre-loads each turn; ``text`` is the bundle as markdown, ready for a prompt."""

    blocks: list[ContextBlock] = Field(default_factory=list)
    conflicts: list[ContextConflict] = Field(default_factory=list)
    snapshot: dict[str, Any] = Field(default_factory=dict)
    count: int = 0
    text: str = ""
    tokens: int = 0

    @property
    def items(self) -> list[ContextItem]:
        """Every item of every block, in order."""
        return [item for block in self.blocks for item in block.items]


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
    """A deterministic summary of a topic (or of every active memory); ``text`` as markdown."""

    topic: str | None = None
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
