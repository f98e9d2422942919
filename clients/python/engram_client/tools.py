"""The verbs as model-facing tools, defined once for every framework adapter.

A tool is a name, a description a model reads, a pydantic model of its arguments (whose JSON
Schema the framework hands the model) and a function from the arguments to a :class:`Call`. The
adapters only wrap these in their framework's tool type, so LangChain and Pydantic AI agents see
the same tools with the same schemas. A refusal is returned to the model as
``{"error", "status", "reason"}`` rather than raised: the model can read "memory m1 not found" or
"conflicts with active memories …" and act on it, and the agent loop does not crash.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from engram_client.calls import Call, Calls, Kind, Outcome, Policy, Relation
from engram_client.client import AsyncEngram, Engram
from engram_client.errors import EngramError
from engram_client.models import Accepted, AgentAccepted, Context, Recall


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RecallArgs(_Args):
    query: str = Field(description="What to look for, in words")
    limit: int = Field(5, ge=1, le=50, description="At most this many memories")
    kind: list[Kind] | None = Field(None, description="Only these kinds")


class ContextArgs(_Args):
    query: str | None = Field(None, description="Orders the bundle by relevance to this, if given")


class RememberArgs(_Args):
    label: str = Field(description="A short name for the memory")
    content: str = Field(description="The memory itself, one self-contained statement")
    kind: Kind = Field("fact", description="preference, fact, objective or context")
    importance: int = Field(3, ge=1, le=5, description="1 Disabled, 2 Low, 3 Medium, 4 High, 5 Critical")
    memory_class: str | None = Field(None, description="A class of the ontology, e.g. BudgetConstraintMemory")
    properties: dict[str, Any] | None = Field(None, description="The class's properties, by name")


class MemoryIdArgs(_Args):
    memory_id: str = Field(description="The memory's id")


class SupersedeArgs(_Args):
    memory_id: str = Field(description="The memory that no longer holds")
    superseded_by: str = Field(description="The (existing) memory that replaces it")


class RecognizeArgs(_Args):
    label: str = Field(description="The label the memory would be written with")
    content: str | None = Field(None, description="Its content, for the similarity match")
    memory_class: str | None = Field(
        None, description="Its class (needed for the structural match), e.g. BudgetConstraintMemory"
    )
    properties: dict[str, Any] | None = Field(
        None, description="Its properties; a target's metric or a budget's platform is part of its key"
    )


class JustifyArgs(_Args):
    memory_id: str = Field(description="The memory's id")
    status: str | None = Field(None, description="Only this derived fact, e.g. budgetStatus or targetStatus")


class Spend(_Args):
    platform: str = Field(description="The ad platform, e.g. meta")
    amount: float = Field(ge=0, description="The amount to spend")
    currency: str = Field(description="ISO 4217, e.g. USD")
    period: str = Field(description="The calendar period it falls in: 2026-11, 2026-Q4, 2026-W49")


class TargetChange(_Args):
    metric: str = Field(description="The KPI, e.g. roas")
    value: float = Field(description="Its expected value if the action is taken")


class CheckPlanArgs(_Args):
    spend: Spend | None = Field(None, description="A planned spend (give this or target_change)")
    target_change: TargetChange | None = Field(
        None, description="A planned change of a KPI (give this or spend)"
    )


class DecisionArgs(_Args):
    decision: str = Field(description="What was decided")
    relied_on: list[str] | None = Field(None, description="Ids of the memories the decision relied on")
    live_data: list[str] | None = Field(
        None,
        description="Observations it relied on: spend:{platform}:{currency}:{period}, kpi:{metric}:{period}",
    )
    spend: Spend | None = Field(None, description="The spend decided on, if any")
    target_change: TargetChange | None = Field(None, description="The KPI change decided on, if any")
    session_id: str | None = Field(None, description="The session it was made in")


class AssociateArgs(_Args):
    from_ref: str = Field(description="A memory id, episode:{id} or decision:{id}")
    to_ref: str = Field(description="A memory id, episode:{id} or decision:{id}")
    relation: Relation = Field(description="How from_ref relates to to_ref")


class ResolveArgs(_Args):
    policy: Policy = Field(description="Which memory of a conflicting set stays")
    memory_ids: list[str] | None = Field(None, description="Only the sets holding one of these")
    apply: bool = Field(False, description="false: a dry run, nothing written; true: supersede the losers")


class SummariseArgs(_Args):
    topic: str | None = Field(None, description="What to summarise; absent: every active memory")
    session_id: str | None = Field(None, description="A session whose memories to summarise")
    top: int = Field(10, ge=0, le=100, description="How many of the most important to show")


class SessionIdArgs(_Args):
    session_id: str = Field(description="The session's id")


class StartSessionArgs(_Args):
    goal: str | None = Field(None, description="What the session is for")


class EndSessionArgs(_Args):
    session_id: str = Field(description="The session's id")
    outcome: str | None = Field(None, description="How it ended")


class ToolCallArgs(_Args):
    session_id: str = Field(description="The session's id")
    tool: str = Field(description="The tool that was called")
    arguments: dict[str, Any] = Field(description="Its arguments (only their SHA-256 digest is recorded)")
    outcome: Outcome = Field(description="ok, error, refused or timeout")


class ReliedOnArgs(_Args):
    memory_id: str = Field(description="The memory (e.g. a constraint) decisions may have relied on")


def _dump(model: BaseModel | None) -> dict[str, Any] | None:
    return model.model_dump() if model is not None else None


def _accepted(a: Accepted) -> dict[str, Any]:
    return {"memory_id": a.memory_id, "event_id": a.event_id, "position": a.position}


def _recorded(a: AgentAccepted) -> dict[str, Any]:
    return {"id": a.id, "event_id": a.event_id, "position": a.position}


def _recall(r: Recall) -> list[dict[str, Any]]:
    return [
        {"id": h.id, "label": h.label, "content": h.content, "kind": h.kind, "score": round(h.score, 4)}
        | ({"statuses": h.statuses} if h.statuses else {})
        for h in r.data
    ]


def _context(c: Context) -> str:
    return c.text


def _plain(answer: BaseModel) -> dict[str, Any]:
    return answer.model_dump(mode="json", by_alias=True)


@dataclass(frozen=True)
class ToolSpec:
    """One tool: what the model is told, what it may pass, and the call it makes."""

    name: str
    description: str
    args: type[BaseModel]
    build: Callable[[Calls, Any], Call[Any]]
    render: Callable[[Any], Any]

    def parse(self, arguments: dict[str, Any]) -> Any:
        return self.args.model_validate(arguments)

    def run(self, client: Engram, arguments: dict[str, Any]) -> Any:
        """Call the tool on a sync client; a refusal comes back as an error dict."""
        try:
            return self.render(client.send(self.build(client.calls, self.parse(arguments))))
        except EngramError as exc:
            return refusal(exc)

    async def arun(self, client: AsyncEngram, arguments: dict[str, Any]) -> Any:
        """Call the tool on an async client; a refusal comes back as an error dict."""
        try:
            return self.render(await client.send(self.build(client.calls, self.parse(arguments))))
        except EngramError as exc:
            return refusal(exc)

    def json_schema(self) -> dict[str, Any]:
        return self.args.model_json_schema()


def refusal(exc: EngramError) -> dict[str, Any]:
    """What a model is told when a call is refused: the status, the API's error code and why."""
    return {"error": exc.type or type(exc).__name__, "status": exc.status, "reason": exc.reason}


TOOLS: dict[str, ToolSpec] = {
    spec.name: spec
    for spec in [
        ToolSpec(
            "recall",
            "Search the organisation's memory for what is relevant to a query; best first.",
            RecallArgs,
            lambda c, a: c.recall(a.query, limit=a.limit, kind=a.kind),
            _recall,
        ),
        ToolSpec(
            "get_context",
            "The memory to keep in mind this turn: goals, constraints with their live status, "
            "preferences and conflicts, as markdown. It includes anything you just remembered.",
            ContextArgs,
            lambda c, a: c.context(a.query),
            _context,
        ),
        ToolSpec(
            "remember",
            "Store one durable memory (a fact, preference, objective or context) for later turns. "
            "A statement that contradicts an active memory is refused with the rival named.",
            RememberArgs,
            lambda c, a: c.remember(
                a.label,
                a.content,
                kind=a.kind,
                importance=a.importance,
                memory_class=a.memory_class,
                properties=a.properties,
            ),
            _accepted,
        ),
        ToolSpec(
            "get_memory",
            "One memory by id: its content, statuses, what superseded it and the facts derived about it.",
            MemoryIdArgs,
            lambda c, a: c.get_memory(a.memory_id),
            _plain,
        ),
        ToolSpec(
            "supersede",
            "Mark a memory as no longer holding, replaced by another (existing) memory.",
            SupersedeArgs,
            lambda c, a: c.supersede(a.memory_id, a.superseded_by),
            _accepted,
        ),
        ToolSpec(
            "recognize",
            "Is this already known? Ask before remembering something new: the known memories "
            "that match, each with why (the same label, the same key under the rules, similar).",
            RecognizeArgs,
            lambda c, a: c.recognize(
                a.label, content=a.content, memory_class=a.memory_class, properties=a.properties
            ),
            _plain,
        ),
        ToolSpec(
            "justify",
            "Why a memory is believed: its source, who set it, every change, what superseded it "
            "and the rule derivation of each of its statuses.",
            JustifyArgs,
            lambda c, a: c.justify(a.memory_id, status=a.status),
            _plain,
        ),
        ToolSpec(
            "check_plan",
            "Before acting: the stored constraints a proposed spend or KPI change would breach or "
            "bring near their limit, each explained. ok is false if any would be breached.",
            CheckPlanArgs,
            lambda c, a: c.check_plan(spend=_dump(a.spend), target_change=_dump(a.target_change)),
            _plain,
        ),
        ToolSpec(
            "record_decision",
            "Record a decision you made, citing the memories and live data it relied on and the "
            "action decided on (checked against the constraints by the rules).",
            DecisionArgs,
            lambda c, a: c.record_decision(
                a.decision,
                relied_on=a.relied_on,
                live_data=a.live_data,
                spend=_dump(a.spend),
                target_change=_dump(a.target_change),
                session_id=a.session_id,
            ),
            _recorded,
        ),
        ToolSpec(
            "summarise",
            "A summary of what is known about a topic, a session or everything: counts, statuses, "
            "conflicts and the most important memories, as markdown.",
            SummariseArgs,
            lambda c, a: c.summarise(a.topic, session=a.session_id, top=a.top),
            lambda s: s.text,
        ),
        ToolSpec(
            "associate",
            "Link two memories (or a memory and an episode:{id} or decision:{id}) with a typed relation.",
            AssociateArgs,
            lambda c, a: c.associate(a.from_ref, a.to_ref, a.relation),
            _recorded,
        ),
        ToolSpec(
            "resolve",
            "Settle conflicting memories by a policy: a dry run unless apply is true.",
            ResolveArgs,
            lambda c, a: c.resolve(a.policy, memory_ids=a.memory_ids, apply=a.apply),
            _plain,
        ),
        ToolSpec(
            "decisions_relying_on",
            "The decisions that relied on a memory (e.g. a budget constraint), in order.",
            ReliedOnArgs,
            lambda c, a: c.decisions(a.memory_id),
            _plain,
        ),
        ToolSpec(
            "start_session",
            "Start a session of agent work; answers its id.",
            StartSessionArgs,
            lambda c, a: c.start_session(a.goal),
            _recorded,
        ),
        ToolSpec(
            "end_session",
            "End a session, with its outcome.",
            EndSessionArgs,
            lambda c, a: c.end_session(a.session_id, a.outcome),
            _recorded,
        ),
        ToolSpec(
            "record_tool_call",
            "Record a tool call in a session: the tool, its outcome and a digest of its arguments.",
            ToolCallArgs,
            lambda c, a: c.record_tool_call(a.session_id, a.tool, a.outcome, arguments=a.arguments),
            _recorded,
        ),
        ToolSpec(
            "episodes_in",
            "A session's narrative: its episodes, tool calls and decisions, in order.",
            SessionIdArgs,
            lambda c, a: c.episodes_in(a.session_id),
            _plain,
        ),
    ]
}
# The tools an adapter gives unless told otherwise: what a model needs in a turn. The rest
# (associate, resolve, decisions_relying_on and the session bookkeeping, usually the host's job)
# are there by name (``names=[…]``).
DEFAULT_TOOLS: tuple[str, ...] = (
    "recall",
    "get_context",
    "remember",
    "get_memory",
    "supersede",
    "recognize",
    "justify",
    "check_plan",
    "record_decision",
    "summarise",
)


def specs(names: Sequence[str] | None = None) -> list[ToolSpec]:
    """The tool specs by name (``DEFAULT_TOOLS`` if none are named); an unknown name is an error."""
    chosen = DEFAULT_TOOLS if names is None else names
    unknown = [n for n in chosen if n not in TOOLS]
    if unknown:
        raise ValueError(f"no engram tool named {', '.join(unknown)}; there are {', '.join(TOOLS)}")
    return [TOOLS[n] for n in chosen]
