"""Memories of one tenant: list, read one, remember."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query

from api.deps import Commands, IdempotencyKey, TenantId, TenantStore, event_id_for, get_principal, not_found
from api.errors import responses
from api.models import (
    CLASS_PATTERN,
    Accepted,
    Kind,
    MemoriesPublic,
    MemoryCreate,
    MemoryPublic,
    Scope,
    anchored,
)
from projections.explain import derived_for_memory, inferred_about
from projections.read import get_memory, list_memory_ids, memory_statuses
from projections.tenant_graph import TenantGraph
from projections.terms import memory_iri
from schemas import vocabulary as v

router = APIRouter(
    prefix="/v1/tenants/{tenant}/memories",
    tags=["memories"],
    dependencies=[Depends(get_principal)],
    responses=responses(401, 404),
)

MemoryId = Annotated[str, Path(pattern=anchored(v.ID_RE.pattern), description="A memory id")]


@router.get("", response_model=MemoriesPublic, responses=responses(422))
async def list_memories(
    graph: TenantStore,
    kind: Kind | None = None,
    scope: Scope | None = None,
    memory_class: Annotated[str | None, Query(alias="class", max_length=1024, pattern=CLASS_PATTERN)] = None,
    active: bool | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> MemoriesPublic:
    if graph is None or (memory_class is not None and not v.valid_iri(v.class_iri(memory_class))):
        return MemoriesPublic(data=[], count=0)  # no store yet, or a class no memory can have
    ids = list_memory_ids(graph, kind=kind, scope=scope, memory_class=memory_class, active=active)
    page = [get_memory(graph, i) for i in ids[offset : offset + limit]]
    return MemoriesPublic(data=[with_derived(graph, m) for m in page if m], count=len(ids))


def with_derived(graph: TenantGraph, memory: dict[str, Any]) -> MemoryPublic:
    derived = derived_for_memory(graph, memory["id"])
    classes = sorted({memory["memory_class"], *(d["value"] for d in derived if d["predicate"] == "type")})
    return MemoryPublic(
        **memory,
        classes=classes,
        statuses=memory_statuses(graph, memory["id"]),
        conflicts_with=sorted(d["value"] for d in derived if d["predicate"] == "conflictsWith"),
        derived=derived,
    )


@router.get("/{memory_id}", response_model=MemoryPublic, responses=responses(404, 422))
async def read_memory(graph: TenantStore, memory_id: MemoryId) -> MemoryPublic:
    """One memory with its derived statuses, each explained by its rule and inputs."""
    found = get_memory(graph, memory_id) if graph is not None else None
    if graph is None or found is None:
        raise not_found(f"memory {memory_id}")
    return with_derived(graph, found)


@router.get("/{memory_id}/derivations", responses=responses(404, 422))
async def derivations(graph: TenantStore, memory_id: MemoryId) -> dict[str, Any]:
    """Every inferred fact about a memory with full derivation trees down to asserted facts."""
    if graph is None or get_memory(graph, memory_id) is None:
        raise not_found(f"memory {memory_id}")
    return {"memory_id": memory_id, "inferred": inferred_about(graph, memory_iri(memory_id), depth=4)}


WRITE_RESPONSES = responses(409, 413, 422, 503, 504)


@router.post("", response_model=Accepted, status_code=202, responses=WRITE_RESPONSES)
async def remember(
    tenant: TenantId,
    body: MemoryCreate,
    commands: Commands,
    idempotency_key: IdempotencyKey = None,
    wait: bool = False,
) -> Accepted:
    """Validate and append MemoryRemembered; with ``wait=true`` answer once it is readable."""
    by = body.attribution(event_id_for(tenant, idempotency_key, body.event_id))
    return Accepted.model_validate(await commands.remember(tenant, body.payload(), by, wait=wait))
