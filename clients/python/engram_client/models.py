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


class ItemAnswer(Answer):
    """One item of a ``remember_many``, in the caller's order (``index`` counts across chunks):
    accepted (``status`` 202, with where the log holds it) or what a request with that item alone
    would have been answered (403, 404, 409, 413, 422, 503, 504) and why (``reason``). A refused
    item is an answer, not an exception: the batch's other items were still written."""

    index: int
    status: int
    outcome: str  # accepted, invalid, refused, not_found, conflict, too_large, unavailable, not_in_time
    event_id: str | None = None
    memory_id: str | None = None
    partition: int | None = None
    offset: int | None = None
    applied: bool | None = None
    reason: str | None = None

    @property
    def accepted(self) -> bool:
        return self.status == 202

    @property
    def position(self) -> str | None:
        """``partition:offset`` of an accepted item, None otherwise (or when the server gave none)."""
        if self.partition is None or self.offset is None or self.partition < 0 or self.offset < 0:
            return None
        return f"{self.partition}:{self.offset}"


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
    proposes: str | None = None  # a proposal's: the memory it would replace (the first of proposes_all)
    proposes_all: list[str] = Field(default_factory=list)  # every memory it would replace, by id
    proposal_status: str | None = None
    legal_hold: str | None = None
    lineage: list[str] = Field(default_factory=list)
    classes: list[str] = Field(default_factory=list)
    statuses: dict[str, Any] = Field(default_factory=dict)
    conflicts_with: list[str] = Field(default_factory=list)
    derived: list[Derived] = Field(default_factory=list)


class MemoryPage(Answer):
    data: list[Memory]
    count: int


class Proposal(Answer):
    """A pending proposal: an extracted memory (``proposal``, inactive) that would replace a
    person's (``replaces``; every one in ``replaces_all``, when it contradicts several) once a
    person accepts it."""

    id: str
    proposal: Memory
    replaces: Memory
    replaces_all: list[Memory] = Field(default_factory=list)
    reason: str | None = None
    proposed_at: str | None = None


class ProposalPage(Answer):
    data: list[Proposal]
    count: int


class Signals(Answer):
    bm25: float | None = None
    vector: float | None = None
    recency: float | None = None
    forgetting: float | None = None
    context: float | None = None
    time: float | None = None
    bm25_query: float | None = None


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


class Onboarded(Answer):
    """Where the log recorded each onboarding slot's memory (None: not in that request)."""

    objective: Accepted | None = None
    fact: Accepted | None = None
    preference: Accepted | None = None


class OnboardingPresent(Answer):
    objective: list[str] = Field(default_factory=list)
    fact: list[str] = Field(default_factory=list)
    preference: list[str] = Field(default_factory=list)


class OnboardingStatus(Answer):
    """A tenant's onboarding: the active onboarding memories by slot and the slots still missing."""

    present: OnboardingPresent = Field(default_factory=OnboardingPresent)
    missing: list[str] = Field(default_factory=list)
    complete: bool = False


# The agent verbs' answers live in their own module, built on the classes above; re-exported here.
from engram_client.verb_models import (  # noqa: E402, F401
    AgentAccepted,
    DecisionEvent,
    DecisionJustification,
    DecisionPage,
    DecisionReliedOn,
    Derivation,
    DerivedFact,
    Finding,
    Justification,
    LineageEvent,
    NarrativeItem,
    PlanCheck,
    Recognition,
    RecognizeMatch,
    Resolution,
    ResolvedSet,
    SessionNarrative,
    StatusExplained,
    Summary,
    SummaryItem,
    Superseded,
    Supersession,
)
