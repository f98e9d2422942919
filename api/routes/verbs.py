"""The read-side verbs: recognize (is this known?), justify (why is it believed?), resolve
(settle flagged conflicts by a policy) and summarise (what is known about a topic).

Thin: each route reads its request, takes the graph as the principal sees it (``api.deps.reads``:
the present one, or the replay an ``as_of`` asks for), and calls a pure function of the graph in
``projections/`` (``recognize``, ``justify``, ``resolve``, ``summary``); resolve's writes go
through the command layer (``commands.resolutions``), so governance decides them. Every answer is
assembled through the principal's filter: a memory it may not see is answered exactly as one that
does not exist (404 ``memory … not found`` where one is named; left out everywhere else).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from engram.api.deps import (
    Commands,
    CurrentPrincipal,
    CurrentRuntime,
    CurrentView,
    GraphAsOf,
    IdempotencyKey,
    MemoryId,
    SearchAsOf,
    SearchStore,
    TenantId,
    get_principal,
    not_found,
    write_attribution,
)
from engram.api.errors import problem, responses
from engram.api.models import QUERY_MAX, Accepted, anchored
from engram.api.models.verbs import (
    Justification,
    RecognizeAnswer,
    RecognizeMatch,
    RecognizeRequest,
    ResolveAnswer,
    ResolvedSet,
    ResolveRequest,
    SummaryAnswer,
    Superseded,
)
from engram.commands.resolutions import supersede_losers
from engram.projections.agents import may_see_node, session_memories
from engram.projections.justify import NoSuchFact, justify
from engram.projections.recognize import Recognition, recognize
from engram.projections.resolve import in_conflict, resolve
from engram.projections.summary import about, all_active, empty, summarise
from engram.schemas import vocabulary as v
from engram.schemas.checks import InvalidEvent
from engram.streams.asof import AsOf
from fastapi import APIRouter, Depends, Query, Response

router = APIRouter(
    prefix="/v1/tenants/{tenant}",
    tags=["verbs"],
    dependencies=[Depends(get_principal)],
    responses=responses(401, 404, 429),
)


@router.post("/recognize", response_model=RecognizeAnswer, responses=responses(422))
async def recognize_route(
    tenant: TenantId,
    body: RecognizeRequest,
    graph: SearchStore,
    runtime: CurrentRuntime,
    who: CurrentPrincipal,
) -> RecognizeAnswer:
    """Is this already known? Exact label (case and white space normalised), then the rules'
    structural key (class and label, metric or platform; same scope and stakeholders), then
    similarity; each match with its reason. Call it before writing."""
    if graph is None:
        return RecognizeAnswer(known=False, matches=[])
    asked = Recognition(
        label=body.label,
        content=body.content,
        memory_class=body.memory_class,
        scope=body.scope,
        properties=body.properties,
        limit=body.limit,
        include_inactive=body.include_inactive,
        min_score=body.min_score,
    )
    text = body.label if not body.content else f"{body.label}\n{body.content}"
    stores = runtime.stores
    try:
        found = recognize(
            graph, stores.indexes(tenant), stores.knowledge, asked, who, runtime.query_vector(text), tenant
        )
    except InvalidEvent as exc:  # the asked memory could not be written: its key is not defined
        raise problem(422, f"not a memory that could be written: {exc}", ["body"]) from exc
    matches = [RecognizeMatch(**m.__dict__) for m in found]
    return RecognizeAnswer(known=bool(matches), matches=matches)


@router.get("/memories/{memory_id}/justify", response_model=Justification, responses=responses(422, 503))
async def justify_route(
    tenant: TenantId,
    at: GraphAsOf,
    memory_id: MemoryId,
    status: Annotated[
        str | None,
        Query(
            pattern=anchored(v.NAME_RE.pattern),
            description="One derived fact's predicate (targetStatus, budgetStatus, conflictsWith, …): "
            "only its derivations; 404 if the memory has none",
        ),
    ] = None,
) -> Justification:
    """One memory's provenance in one answer: source, actor, purpose, valid and system time, every
    event that touched it (log positions), the supersession chain, its statuses and every derived
    fact with its rule derivation tree; with ``as_of``, as the system knew it then."""
    seen = (await at.view()).memory(memory_id)
    try:
        answer = justify(seen.graph, memory_id, seen.sees, status)
    except NoSuchFact as exc:
        raise problem(404, str(exc), ["query", "status"]) from exc
    if answer is None:
        raise not_found(f"memory {memory_id}")
    return Justification(**answer, as_of=as_of_text(at.as_of))


def as_of_text(as_of: AsOf | None) -> str | None:
    """The system time a justification was asked at: a log position, or a UTC time (ms)."""
    if as_of is None:
        return None
    if as_of.position is not None:
        return f"{as_of.position[0]}:{as_of.position[1]}"
    assert as_of.time_ms is not None
    when = datetime.fromtimestamp(as_of.time_ms // 1000, UTC).replace(microsecond=as_of.time_ms % 1000 * 1000)
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


@router.post(
    "/conflicts/resolve",
    response_model=ResolveAnswer,
    responses={
        **responses(403, 409, 413, 422, 503, 504),
        202: {"model": ResolveAnswer, "description": "apply=true: the supersessions were appended"},
    },
)
async def resolve_route(
    tenant: TenantId,
    body: ResolveRequest,
    view: CurrentView,
    commands: Commands,
    response: Response,
    idempotency_key: IdempotencyKey = None,
    apply: bool = False,
    wait: bool = False,
) -> ResolveAnswer:
    """Settle the sets the rules flag as conflicting by ``policy``: one memory of each stays, the
    others are superseded by it. A dry run by default (what would be superseded by what);
    ``apply=true`` appends the supersessions (202; all decided by governance before any is
    appended, so a set the caller may not change is refused whole)."""
    by = write_attribution(tenant, body, view.who, idempotency_key)
    for i, memory_id in enumerate(body.memory_ids or ()):
        view.memory(memory_id, ["body", "memory_ids", i])
    graph, sees = view.graph, view.sees
    if graph is None:
        return ResolveAnswer(policy=body.policy, applied=apply, sets=[])
    for i, memory_id in enumerate(body.memory_ids or ()):
        if not in_conflict(graph, memory_id, sees):
            raise problem(422, f"memory {memory_id} is in no conflict", ["body", "memory_ids", i])
    settled = resolve(graph, body.policy, sees, body.memory_ids)
    events: list[Accepted | None] = [None] * sum(len(r.superseded) for r in settled)
    if apply:
        losers = [loser for r in settled for loser in r.superseded]
        done = await supersede_losers(commands, tenant, losers, by, wait=wait)
        events = [Accepted.model_validate(a) for a in done]
        response.status_code = 202
    shown, at = [], 0
    for r in settled:
        superseded = []
        for loser in r.superseded:
            superseded.append(Superseded(**loser.__dict__, event=events[at]))
            at += 1
        shown.append(
            ResolvedSet(
                key=r.key, scope=r.scope, members=list(r.members), winner=r.winner, superseded=superseded
            )
        )
    return ResolveAnswer(policy=body.policy, applied=apply, sets=shown)


@router.get("/summary", response_model=SummaryAnswer, responses=responses(422, 503))
async def summary_route(
    tenant: TenantId,
    at: SearchAsOf,
    topic: Annotated[
        str | None,
        Query(
            min_length=1, max_length=QUERY_MAX, description="What to summarise; absent: every active memory"
        ),
    ] = None,
    session: Annotated[
        str | None,
        Query(
            pattern=anchored(v.ID_RE.pattern),
            description="A session's memories: those its decisions relied on and those associated with "
            "its episodes, tool calls or decisions (with topic: those of them it is about)",
        ),
    ] = None,
    top: Annotated[int, Query(ge=0, le=100, description="How many of the most important to show")] = 10,
) -> SummaryAnswer:
    """A deterministic, extractive summary (no model): the memories a topic is about (sharing a
    word with it, or similar to it), or a session's, by kind, class, scope and importance, their
    statuses and conflicts, the most important in their own words, and the same as markdown; with
    ``as_of``, as the system knew them then."""
    if topic is not None and not topic.strip():
        raise problem(422, "topic must not be blank", ["query", "topic"])
    graph, who = (await at.view()).graph, at.who
    if session is not None and (graph is None or not may_see_node(graph, who, "session", session)):
        raise not_found(f"session {session}", ["query", "session"])
    title = topic if session is None else f"session {session}{': ' + topic if topic else ''}"
    shown = {"topic": topic, "session": session, "as_of": as_of_text(at.as_of)}
    if graph is None:
        return SummaryAnswer(**shown, **empty(title))
    if topic is not None:
        stores = await at.stores()
        ids = about(stores.indexes(tenant), topic, who, at.runtime.query_vector(topic))
        if session is not None:
            ids = sorted(set(ids) & set(session_memories(graph, session)))
    else:
        ids = all_active(graph) if session is None else session_memories(graph, session)
    return SummaryAnswer(**shown, **summarise(graph, ids, who, top=top, title=title))
