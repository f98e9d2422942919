"""Recall and context: what an agent asks for and what it gets back."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from engram.api.models.fields import (
    CLASS_PATTERN,
    NON_BLANK,
    EdgeModel,
    Float,
    Int,
    Kind,
    StatusValue,
    Timestamp,
)
from pydantic import (
    BaseModel,
    Field,
    StrictStr,
)

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
    bm25: float | None = Field(
        description="BM25 score of the query expanded by feedback (the best hits' words), if found"
    )
    vector: float | None = Field(description="Cosine similarity, if the vector index found it")
    recency: float = Field(description="0.5 ** (age in days / 30), from valid time")
    forgetting: float = Field(description="exp(-age / stability); stability doubles per importance tier")
    context: float | None = Field(
        None,
        description="Score lent by a top hit this memory sits next to (same conversation, adjacent in "
        "valid time): 0.2 of the hit's, halved per step away; null if none",
    )
    time: float | None = Field(
        None,
        description="Boost for a valid time inside what the query names (a date, a month, 'last week'), "
        "up to 0.2, falling to 0 three days outside it; null if the query names no time",
    )
    bm25_query: float | None = Field(
        None,
        description="BM25 score of the query's own words; `bm25` is the score once the query was expanded "
        "by pseudo-relevance feedback (the words of the best 3 hits); null if they do not match",
    )


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
        description="The read's moment: its time (to the millisecond), or its as_of time; as_of=now asks "
        "the same question again, with the same answer"
    )
    clock: str | None = Field(
        description="The clock recency and forgetting were computed against: the tenant's (its ClockTicked "
        "clock, else the latest valid time of its memories), never the server's; null for no tenant"
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
