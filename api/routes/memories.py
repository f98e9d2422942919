"""Memories of one tenant: list, read one, remember."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query

from api.deps import CurrentRuntime, TenantId, TenantStore, not_found
from api.models import Accepted, Kind, MemoriesPublic, MemoryCreate, MemoryPublic, Scope
from api.writes import produce
from projections.explain import derived_for_memory, inferred_about
from projections.graph import TenantGraph, memory_iri
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
    if memory_class is not None and not v.valid_iri(v.class_iri(memory_class)):
        raise HTTPException(
            status_code=422, detail=f"class is not a valid class name or IRI: {memory_class!r}"
        )
    if graph is None:
        return MemoriesPublic(data=[], count=0)
    ids = list_memory_ids(graph, kind=kind, scope=scope, memory_class=memory_class, active=active)
    page = [get_memory(graph, i) for i in ids[offset : offset + limit]]
    return MemoriesPublic(data=[with_derived(graph, m) for m in page if m], count=len(ids))


STATUS_PREDICATES = ("targetStatus", "budgetStatus", "budgetPercent", "liveRank")


def with_derived(graph: TenantGraph, memory: dict[str, Any]) -> MemoryPublic:
    derived = derived_for_memory(graph, memory["id"])
    classes = sorted({memory["memory_class"], *(d["value"] for d in derived if d["predicate"] == "type")})
    return MemoryPublic(
        **memory,
        classes=classes,
        statuses={d["predicate"]: d["value"] for d in derived if d["predicate"] in STATUS_PREDICATES},
        conflicts_with=sorted(d["value"] for d in derived if d["predicate"] == "conflictsWith"),
        derived=derived,
    )


@router.get("/{memory_id}", response_model=MemoryPublic)
async def read_memory(graph: TenantStore, memory_id: str) -> MemoryPublic:
    """One memory with its derived statuses, each explained by its rule and inputs."""
    found = get_memory(graph, memory_id) if graph is not None else None
    if graph is None or found is None:
        raise not_found(f"memory {memory_id}")
    return with_derived(graph, found)


@router.get("/{memory_id}/derivations")
async def derivations(graph: TenantStore, memory_id: str) -> dict[str, Any]:
    """Every inferred fact about a memory with full derivation trees down to asserted facts."""
    if graph is None or get_memory(graph, memory_id) is None:
        raise not_found(f"memory {memory_id}")
    return {"memory_id": memory_id, "inferred": inferred_about(graph, memory_iri(memory_id), depth=4)}


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
