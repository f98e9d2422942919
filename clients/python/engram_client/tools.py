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

from engram_client.calls import Call, Calls, Kind
from engram_client.client import AsyncEngram, Engram
from engram_client.errors import EngramError
from engram_client.models import Accepted, Context, Recall


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
    label: str = Field(description="The entity or label to look up")
    memory_class: str | None = Field(None, description="Its class, if known")


class CheckPlanArgs(_Args):
    action: dict[str, Any] = Field(
        description='The proposed action, e.g. {"spend": {"platform": "meta", "amount": 8000, '
        '"currency": "USD", "period": "2026-12"}}'
    )


class DecisionArgs(_Args):
    decision: str = Field(description="What was decided")
    relied_on: list[str] | None = Field(None, description="Ids of the memories the decision relied on")


def _accepted(a: Accepted) -> dict[str, Any]:
    return {"memory_id": a.memory_id, "event_id": a.event_id, "position": a.position}


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
    provisional: bool = False

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
            "Is this entity or label already known? Ask before remembering something new.",
            RecognizeArgs,
            lambda c, a: c.recognize(a.label, memory_class=a.memory_class),
            _plain,
            provisional=True,
        ),
        ToolSpec(
            "justify",
            "Why a memory or status is believed: its source, who set it, every change and the rules.",
            MemoryIdArgs,
            lambda c, a: c.justify(a.memory_id),
            _plain,
            provisional=True,
        ),
        ToolSpec(
            "check_plan",
            "Before acting: the stored constraints a proposed action would breach or bring near their limit.",
            CheckPlanArgs,
            lambda c, a: c.check_plan(a.action),
            _plain,
            provisional=True,
        ),
        ToolSpec(
            "record_decision",
            "Record a decision you made, citing the memories it relied on.",
            DecisionArgs,
            lambda c, a: c.record_decision(a.decision, relied_on=a.relied_on),
            _accepted,
            provisional=True,
        ),
    ]
}
# The tools an adapter gives unless told otherwise: the verbs every engram server has. The
# provisional ones (recognize, justify, check_plan, record_decision) are there by name, for a
# server that has their routes (issue 24).
DEFAULT_TOOLS: tuple[str, ...] = tuple(name for name, spec in TOOLS.items() if not spec.provisional)


def specs(names: Sequence[str] | None = None) -> list[ToolSpec]:
    """The tool specs by name (``DEFAULT_TOOLS`` if none are named); an unknown name is an error."""
    chosen = DEFAULT_TOOLS if names is None else names
    unknown = [n for n in chosen if n not in TOOLS]
    if unknown:
        raise ValueError(f"no engram tool named {', '.join(unknown)}; there are {', '.join(TOOLS)}")
    return [TOOLS[n] for n in chosen]
