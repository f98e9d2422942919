"""Memories of one tenant: list, read one, remember."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Query

from api.deps import CurrentRuntime, TenantId, TenantStore, not_found
from api.models import Accepted, Kind, MemoriesPublic, MemoryCreate, MemoryPublic, Scope
from api.writes import produce
from projections.read import get_memory, list_memory_ids
from schemas import vocabulary as v

router = APIRouter(prefix="/v1/tenants/{tenant}/memories", tags=["memories"])


@router.get("", response_model=MemoriesPublic)
async def list_memories(
    graph: TenantStore,
    kind: Kind | None = None,
    scope: Scope | None = None,
    memory_class: Annotated[str | None, Query(alias="class", pattern=v.CLASS_RE.pattern)] = None,
    active: bool | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> MemoriesPublic:
    if graph is None:
        return MemoriesPublic(data=[], count=0)
    ids = list_memory_ids(graph, kind=kind, scope=scope, memory_class=memory_class, active=active)
    page = [get_memory(graph, i) for i in ids[offset : offset + limit]]
    return MemoriesPublic(data=[MemoryPublic(**m) for m in page if m], count=len(ids))


@router.get("/{memory_id}", response_model=MemoryPublic)
async def read_memory(graph: TenantStore, memory_id: str) -> MemoryPublic:
    found = get_memory(graph, memory_id) if graph is not None else None
    if found is None:
        raise not_found(f"memory {memory_id}")
    return MemoryPublic(**found)


@router.post("", response_model=Accepted, status_code=202)
async def remember(
    tenant: TenantId, body: MemoryCreate, runtime: CurrentRuntime, wait: bool = False
) -> Accepted:
    """Validate and append MemoryRemembered; with ``wait=true`` answer once it is readable."""
    if body.replaces is not None:
        graph = runtime.stores.get(tenant)
        if graph is None or get_memory(graph, body.replaces) is None:
            raise HTTPException(status_code=422, detail=f"replaces: unknown memory {body.replaces}")
    return await produce(runtime, body.envelope("MemoryRemembered", tenant, body.payload()), wait=wait)
