"""Recall, the per-turn context, and the memory tool an agent writes with."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Annotated, Any

from engram.api.deps import CurrentRuntime, Moment, SearchAsOf, TenantId, ValidAt, get_principal
from engram.api.errors import problem, responses
from engram.api.models import (
    CLASS_PATTERN,
    QUERY_MAX,
    ContextAnswer,
    Fusion,
    Kind,
    RecallAnswer,
    RecallHit,
    RecallRequest,
    Signals,
    anchored,
)
from engram.projections.context import ContextOptions, build_context
from engram.projections.memory_tool import memory_tool
from engram.projections.read import memory_statuses
from engram.projections.recall import RecallQuery, class_weights, clock_of, recall
from engram.schemas import vocabulary as v
from fastapi import APIRouter, Depends, Query, Response
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

router = APIRouter(
    prefix="/v1/tenants/{tenant}",
    tags=["recall"],
    dependencies=[Depends(get_principal)],
    responses=responses(401, 404, 429),
)


def _timing(response: Response, **phases: float) -> None:
    """Where the time went, as a standard Server-Timing header (milliseconds)."""
    response.headers["Server-Timing"] = ", ".join(f"{k};dur={ms:.2f}" for k, ms in phases.items())


def _stamp(when: datetime) -> str:
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


async def _recall(at: Moment, body: RecallRequest, response: Response) -> RecallAnswer:
    runtime, tenant, as_of, who = at.runtime, at.tenant, at.as_of, at.who
    graph, stores = (await at.view()).graph, await at.stores()
    indexes = stores.indexes(tenant) if graph is not None else None
    # the read's moment: the as_of time when there is one, else now (to the millisecond, as the
    # log's times are), so a read asked again with as_of=now is answered the same
    ms = as_of.time_ms if as_of is not None and as_of.time_ms is not None else time.time_ns() // 1_000_000
    stamp = _stamp(datetime.fromtimestamp(ms // 1000, UTC).replace(microsecond=ms % 1000 * 1000))
    if indexes is None:
        return RecallAnswer(data=[], tokens=0, now=stamp, clock=None)
    # the ranking's clock is the tenant's (its clock node, else its latest valid time), read from
    # the graph the answer comes from, never the server's: an old history is not all "zero
    # recency", and an as_of read ranks as the live read did then
    clock = clock_of(indexes)
    started = time.perf_counter()
    vector = runtime.query_vector(body.q if body.fusion != "bm25" else None)
    query = RecallQuery(
        q=body.q,
        limit=body.limit,
        budget_tokens=body.budget_tokens,
        kinds=frozenset(body.kind),
        classes=frozenset(v.class_iri(c) for c in body.memory_class),
        min_importance=body.min_importance,
        min_confidence=body.min_confidence,
        fusion=body.fusion,
        valid_at=body.valid_at,  # parsed by the model: in range, at millisecond precision
    )
    knowledge = stores.knowledge
    hits = recall(
        indexes,
        query,
        who,
        vector,
        count_tokens=runtime.embedder.count_tokens,
        class_weight=class_weights(knowledge.ontology),
        now=clock,
    )
    data = [
        RecallHit(
            id=h.memory.id,
            label=h.memory.label,
            content=h.memory.content,
            kind=h.memory.kind,
            scope=h.memory.scope,
            importance=h.memory.importance,
            confidence=h.memory.confidence,
            memory_class=h.memory.memory_class,
            statuses=memory_statuses(indexes.graph, h.memory.id),
            score=round(h.score, 6),
            signals=Signals(**h.signals),  # type: ignore[arg-type]
            tokens=h.tokens,
        )
        for h in hits
    ]
    _timing(response, embed=vector.ms, total=(time.perf_counter() - started) * 1e3)
    return RecallAnswer(data=data, tokens=sum(h.tokens for h in hits), now=stamp, clock=_stamp(clock))


@router.post("/recall", response_model=RecallAnswer, responses=responses(422))
async def recall_post(
    tenant: TenantId, body: RecallRequest, at: SearchAsOf, response: Response
) -> RecallAnswer:
    """Structurally eligible memories (visible, active, not expired, importance ≥ 2 by default),
    ranked by BM25 and vector similarity fused, with recency and forgetting, best first."""
    return await _recall(at, body, response)


@router.get("/recall", response_model=RecallAnswer, responses=responses(422))
async def recall_get(
    tenant: TenantId,
    response: Response,
    q: Annotated[str, Query(min_length=1, max_length=QUERY_MAX)],
    limit: Annotated[int, Query(ge=1, le=100)] = 10,
    budget_tokens: Annotated[int | None, Query(ge=1, le=1_000_000)] = None,
    kind: Annotated[list[Kind], Query(max_length=4)] = [],  # noqa: B006
    memory_class: Annotated[
        list[Annotated[str, Query(max_length=1024, pattern=CLASS_PATTERN)]],
        Query(alias="class", max_length=32),
    ] = [],  # noqa: B006
    min_importance: Annotated[int, Query(ge=1, le=5)] = 2,
    min_confidence: Annotated[float, Query(ge=0, le=1, allow_inf_nan=False)] = 0.0,
    fusion: Fusion = "default",
    valid_at: ValidAt = None,
    *,
    at: SearchAsOf,
) -> RecallAnswer:
    """The same as ``POST …/recall``, with the request's fields as query parameters."""
    fields: dict[str, Any] = {
        "q": q,
        "limit": limit,
        "budget_tokens": budget_tokens,
        "kind": kind,
        "class": memory_class,
        "min_importance": min_importance,
        "min_confidence": min_confidence,
        "fusion": fusion,
    }
    try:
        body = RecallRequest.model_validate(fields)
    except ValidationError as exc:
        raise RequestValidationError(
            [{**err, "loc": ("query", *err["loc"])} for err in exc.errors()]
        ) from exc
    body = body.model_copy(update={"valid_at": valid_at})
    return await _recall(at, body, response)


Position = Annotated[
    str | None,
    Query(
        pattern=anchored(r"[0-9]{1,9}:[0-9]{1,18}"),
        description="A write's partition:offset (from its 202): answer once the projection has it",
    ),
]


@router.get("/context", response_model=ContextAnswer, responses=responses(422, 504))
async def context(
    tenant: TenantId,
    response: Response,
    q: Annotated[str | None, Query(max_length=QUERY_MAX)] = None,
    after: Position = None,
    valid_at: ValidAt = None,
    *,
    at: SearchAsOf,
) -> ContextAnswer:
    """What an agent pre-loads each turn: every top-tier memory the principal may see, whatever
    ``q`` says, grouped in blocks (ordered by similarity to ``q``), with statuses, conflicts, the
    live data and a markdown rendering. Never cached."""
    response.headers["Cache-Control"] = "no-store"
    runtime = at.runtime
    if after is not None:
        partition, offset = (int(x) for x in after.split(":"))
        end = await runtime.lag.end_offset(partition)
        if end is None or offset >= end:
            where = "no such partition" if end is None else f"the partition ends at offset {end}"
            raise problem(422, f"position {after} is not in the log ({where})", ["query", "after"])
        if runtime.indexed.last_offset.get(partition, -1) < offset:  # applied and searchable
            handled = await runtime.indexed.wait_for(partition, offset, runtime.settings.wait_timeout_s)
            if handled is None:
                raise problem(
                    504,
                    f"position {after} not handled within {runtime.settings.wait_timeout_s}s",
                    ["query", "after"],
                )
    stores = await at.stores()
    graph = stores.get(tenant)  # after waiting, the tenant may exist now
    if graph is None:
        empty = {
            "blocks": [],
            "conflicts": [],
            "snapshot": {"kpis": [], "spend": [], "clock": None},
            "count": 0,
        }
        return ContextAnswer(**empty, text="# Memory context\n", tokens=0)
    started = time.perf_counter()
    vector = runtime.query_vector(q)  # embedded while the bundle is read from the graph
    options = ContextOptions(
        runtime.settings.context_confidence_floor, runtime.embedder.count_tokens, valid_at=valid_at
    )
    built = build_context(graph, stores.indexes(tenant), at.who, vector, stores.knowledge.ontology, options)
    _timing(response, embed=vector.ms, total=(time.perf_counter() - started) * 1e3)
    return ContextAnswer(**built)


@router.get("/memory-tool", responses=responses(422))
async def tool(tenant: TenantId, runtime: CurrentRuntime) -> dict[str, Any]:
    """A function-calling tool definition for writing a typed memory, generated from the ontology
    and its SHACL shapes (every class with its properties), so a model fills in a typed memory."""
    return memory_tool(runtime.stores.knowledge)
