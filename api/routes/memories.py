"""Memories of one tenant: list, read one, its lineage; remember, revise, supersede, restore, forget.

Reads answer only what the token's principal may see (``projections.visibility.may_see``): a
memory it may not see is "not found", as one that does not exist, and no answer names it through
another memory's fields (its supersession links, lineage chains, conflicts, derivations): every
answer is assembled through the principal's filter (``projections.visibility.sight``). Writes are commands
(``commands.writes``); who may make them is the projection's decision (``projections.governance``).
"""

from __future__ import annotations

from typing import Annotated, Any

from engram.api.deps import (
    Commands,
    CurrentPrincipal,
    CurrentView,
    GraphAsOf,
    IdempotencyKey,
    MemoryId,
    TenantId,
    ValidAt,
    VisibleMemory,
    get_principal,
    write_attribution,
)
from engram.api.errors import clean, problem, responses
from engram.api.models import (
    CLASS_PATTERN,
    Accepted,
    Attribution,
    BatchAccepted,
    ForgetRequest,
    ItemAnswer,
    Kind,
    MemoriesCreate,
    MemoriesPublic,
    MemoryCreate,
    MemoryPatch,
    MemoryPublic,
    Scope,
    SupersedeRequest,
)
from engram.commands.answers import Attribution as WriteBy
from engram.commands.answers import Refused
from engram.projections.conflict_sets import conflict_quads
from engram.projections.explain import derived_for_memory, inferred_about, show
from engram.projections.read import get_memory, list_memory_ids, memory_lineage, memory_statuses
from engram.projections.tenant_graph import TenantGraph
from engram.projections.terms import INFERRED, RDF_TYPE, memory_iri
from engram.projections.visibility import MemoryFilter, held_at, may_see_memory, shown
from engram.schemas import vocabulary as v
from fastapi import APIRouter, Depends, HTTPException, Query
from pydantic import ValidationError

router = APIRouter(
    prefix="/v1/tenants/{tenant}/memories",
    tags=["memories"],
    dependencies=[Depends(get_principal)],
    responses=responses(401, 404, 429),
)


@router.get("", response_model=MemoriesPublic, responses=responses(422))
async def list_memories(
    tenant: TenantId,
    valid_at: ValidAt,  # before ``at``: a bad valid_at is refused before as_of is looked at, as ever
    at: GraphAsOf,
    kind: Kind | None = None,
    scope: Scope | None = None,
    memory_class: Annotated[str | None, Query(alias="class", max_length=1024, pattern=CLASS_PATTERN)] = None,
    active: bool | None = None,
    min_importance: Annotated[
        int | None,
        Query(ge=min(v.Importance), le=max(v.Importance), description="Least importance tier (1-5)"),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0)] = 0,
    explain: Annotated[
        bool,
        Query(
            description="false: each memory without `derived` (its statuses, classes and conflicts "
            "kept): a list page's cheap form; a memory's own route explains"
        ),
    ] = True,
) -> MemoriesPublic:
    """The memories the principal may see matching every filter, newest first, a page at a time,
    with ``count`` of them all (decided by one query: no memory is read beyond the page)."""
    view = await at.view()
    graph, who = view.graph, view.who
    if graph is None or (memory_class is not None and not v.valid_iri(v.class_iri(memory_class))):
        return MemoriesPublic(data=[], count=0)  # no store yet, or a class no memory can have
    ids = list_memory_ids(
        graph,
        kind=kind,
        scope=scope,
        memory_class=memory_class,
        active=active,
        min_importance=min_importance,
        seen_by=who,
    )
    if valid_at is not None:
        ids = [i for i in ids if held_at(graph, i, valid_at)]
    sees = view.sees
    page = [m for i in ids[offset : offset + limit] if (m := get_memory(graph, i, sees))]
    page = [m for m in page if may_see_memory(who, m)]  # decided by the query already; kept as a guard
    answer = with_derived if explain else without_derivations
    return MemoriesPublic(data=[answer(graph, m, sees) for m in page], count=len(ids))


def with_derived(graph: TenantGraph, memory: dict[str, Any], sees: MemoryFilter) -> MemoryPublic:
    """The memory's answer: its derived facts and conflicts as ``sees`` may be shown them."""
    derived = derived_for_memory(graph, memory["id"], sees)
    classes = sorted({memory["memory_class"], *(d["value"] for d in derived if d["predicate"] == "type")})
    return MemoryPublic(
        **memory,
        classes=classes,
        statuses=memory_statuses(graph, memory["id"]),
        conflicts_with=sorted(d["value"] for d in derived if d["predicate"] == "conflictsWith"),
        derived=derived,
    )


def without_derivations(graph: TenantGraph, memory: dict[str, Any], sees: MemoryFilter) -> MemoryPublic:
    """The memory's answer without ``derived`` (what explaining each fact costs): its classes and
    statuses as the rules concluded them, its conflicts with the memories ``sees`` lets through."""
    m = memory_iri(memory["id"])
    inferred = {show(q.object) for q in graph.store.quads_for_pattern(m, RDF_TYPE, None, INFERRED)}
    return MemoryPublic(
        **memory,
        classes=sorted({memory["memory_class"], *inferred}),
        statuses=memory_statuses(graph, memory["id"]),
        conflicts_with=sorted(
            show(q.object) for q in conflict_quads(graph.store, m) if shown(q.object, sees)
        ),
    )


@router.get("/{memory_id}", response_model=MemoryPublic, responses=responses(404, 422))
async def read_memory(valid_at: ValidAt, seen: VisibleMemory) -> MemoryPublic:
    """One memory with its derived statuses, each explained by its rule and inputs; with
    ``valid_at``, 404 unless it held then; with ``as_of``, as the system knew it then."""
    found, memory_id = seen.memory, seen.id
    if valid_at is not None and not held_at(seen.graph, memory_id, valid_at):
        held = f"from {found['valid_from']}" + (f" to {found['valid_to']}" if found["valid_to"] else "")
        raise problem(404, f"memory {memory_id} did not hold at {valid_at.isoformat()}: it held {held}",
                      ["query", "valid_at"])  # fmt: skip
    return with_derived(seen.graph, found, seen.sees)


@router.get("/{memory_id}/derivations", responses=responses(404, 422))
async def derivations(view: CurrentView, memory_id: MemoryId) -> dict[str, Any]:
    """Every inferred fact about a memory with full derivation trees down to asserted facts."""
    seen = view.memory(memory_id)
    inferred = inferred_about(seen.graph, memory_iri(memory_id), depth=4, sees=seen.sees)
    return {"memory_id": memory_id, "inferred": inferred}


@router.get("/{memory_id}/lineage", responses=responses(404, 422))
async def lineage(view: CurrentView, memory_id: MemoryId) -> dict[str, Any]:
    """Where a belief came from: source, actor, purpose, valid and system time, the supersession
    chain both ways (nearest first), and every event that touched it, in log order."""
    seen = view.memory(memory_id)
    return memory_lineage(seen.graph, memory_id, seen.sees) or {}


WRITE_RESPONSES = responses(403, 409, 413, 422, 503, 504)


@router.post("", response_model=Accepted, status_code=202, responses=WRITE_RESPONSES)
async def remember(
    tenant: TenantId,
    body: MemoryCreate,
    commands: Commands,
    who: CurrentPrincipal,
    idempotency_key: IdempotencyKey = None,
    wait: bool = False,
) -> Accepted:
    """Validate and append MemoryRemembered; with ``wait=true`` answer once it is readable."""
    by = write_attribution(tenant, body, who, idempotency_key)
    return Accepted.model_validate(await commands.remember(tenant, body.payload(), by, wait=wait))


BATCH_OUTCOMES = {
    403: "refused",
    404: "not_found",
    409: "conflict",
    413: "too_large",
    422: "invalid",
    503: "unavailable",
    504: "not_in_time",
}


@router.post(":batch", response_model=BatchAccepted, responses=responses(413, 422, 503))
async def remember_many(
    tenant: TenantId,
    body: MemoriesCreate,
    commands: Commands,
    who: CurrentPrincipal,
    idempotency_key: IdempotencyKey = None,
    wait: bool = False,
) -> BatchAccepted:
    """Append up to 1,000 MemoryRemembered at once, each answered in order with its own outcome (what
    the item alone would have been answered: 202, or 403/404/409/413/422/503/504 with the reason).
    The items are decided side by side against the tenant's memories as they stand, not against
    each other, and embedded, sealed and appended in batches; a retry of the request with the same
    Idempotency-Key (or items with their own event_id) answers each item as it was."""
    answers: list[ItemAnswer | None] = [None] * len(body.memories)
    todo: list[tuple[int, dict[str, Any], WriteBy]] = []
    for i, item in enumerate(body.memories):
        if body.source is not None and isinstance(item, dict):
            item = {"source": body.source, **item}
        try:
            memory = MemoryCreate.model_validate(item)
        except ValidationError as exc:
            answers[i] = ItemAnswer(index=i, status=422, outcome="invalid", reason=reasons(exc.errors()))
            continue
        key = None if idempotency_key is None else f"{idempotency_key}\nitem {i}"
        try:
            by = write_attribution(tenant, memory, who, key)
        except HTTPException as exc:
            reason = reasons(exc.detail if isinstance(exc.detail, list) else [exc.detail])
            answers[i] = ItemAnswer(index=i, status=exc.status_code, outcome="invalid", reason=reason)
            continue
        todo.append((i, memory.payload(), by))
    done = await commands.remember_many(tenant, [(memory, by) for _, memory, by in todo], wait=wait)
    for (i, _, by), outcome in zip(todo, done, strict=True):
        if isinstance(outcome, Refused):
            status = outcome.status
            answers[i] = ItemAnswer(
                index=i, status=status, outcome=BATCH_OUTCOMES.get(status, "invalid"),
                event_id=str(by.event_id), reason=outcome.reason,
            )  # fmt: skip
        else:
            answers[i] = ItemAnswer(index=i, status=202, outcome="accepted", **vars(outcome))
    results = [a for a in answers if a is not None]
    return BatchAccepted(accepted=sum(a.status == 202 for a in results), results=results)


def reasons(errors: list[Any]) -> str:
    """Validation errors as one line: each error's place in the item and its message."""
    items = clean(errors, 422)
    return "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" if e["loc"] else e["msg"] for e in items)


@router.patch("/{memory_id}", response_model=Accepted, status_code=202, responses=WRITE_RESPONSES)
async def revise(
    tenant: TenantId,
    memory_id: MemoryId,
    body: MemoryPatch,
    commands: Commands,
    who: CurrentPrincipal,
    idempotency_key: IdempotencyKey = None,
    wait: bool = False,
) -> Accepted:
    """Append MemoryRevised: a field absent is untouched, ``null`` cleared, a value set."""
    by = write_attribution(tenant, body, who, idempotency_key)
    accepted = await commands.revise(
        tenant, memory_id, by, changes=body.changes(), property_changes=body.properties, wait=wait
    )
    return Accepted.model_validate(accepted)


@router.post("/{memory_id}/supersede", response_model=Accepted, status_code=202, responses=WRITE_RESPONSES)
async def supersede(
    tenant: TenantId,
    memory_id: MemoryId,
    body: SupersedeRequest,
    commands: Commands,
    who: CurrentPrincipal,
    idempotency_key: IdempotencyKey = None,
    wait: bool = False,
) -> Accepted:
    """Append MemorySuperseded: ``superseded_by`` (an existing memory) replaces this one."""
    by = write_attribution(tenant, body, who, idempotency_key)
    return Accepted.model_validate(
        await commands.supersede(tenant, memory_id, body.superseded_by, by, wait=wait)
    )


@router.post("/{memory_id}/restore", response_model=Accepted, status_code=202, responses=WRITE_RESPONSES)
async def restore(
    tenant: TenantId,
    memory_id: MemoryId,
    body: Attribution,
    commands: Commands,
    who: CurrentPrincipal,
    idempotency_key: IdempotencyKey = None,
    wait: bool = False,
) -> Accepted:
    """Append MemoryRestored: a superseded memory is active again."""
    by = write_attribution(tenant, body, who, idempotency_key)
    return Accepted.model_validate(await commands.restore(tenant, memory_id, by, wait=wait))


@router.post("/{memory_id}/forget", response_model=Accepted, status_code=202, responses=WRITE_RESPONSES)
async def forget(
    tenant: TenantId,
    memory_id: MemoryId,
    body: ForgetRequest,
    commands: Commands,
    who: CurrentPrincipal,
    idempotency_key: IdempotencyKey = None,
    wait: bool = False,
) -> Accepted:
    """Append MemoryForgotten (operators and auditors): the memory's data key is destroyed, so the
    log keeps only ciphertext of it; label, content, class properties and vector are erased; the
    node and its lineage stay, with who forgot it and why."""
    by = write_attribution(tenant, body, who, idempotency_key)
    return Accepted.model_validate(
        await commands.forget(tenant, memory_id, by, reason=body.reason, wait=wait)
    )
