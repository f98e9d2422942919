"""Tenant snapshots on demand: a copy of the tenant's store at its checkpoint, in the object store,
where a replay (an ``as_of``, a rebuild) starts instead of offset zero."""

from __future__ import annotations

import asyncio

from engram.api.deps import CurrentPrincipal, CurrentRuntime, TenantId, get_principal, governs, not_found
from engram.api.errors import problem, responses
from engram.api.models import SnapshotOut, SnapshotsOut
from fastapi import APIRouter, Depends

router = APIRouter(
    prefix="/v1/tenants/{tenant}/snapshots",
    tags=["governance"],
    dependencies=[Depends(get_principal)],
    responses=responses(401, 403, 404, 422, 429, 503),
)


@router.post("", response_model=SnapshotOut, status_code=201)
async def take(tenant: TenantId, runtime: CurrentRuntime, who: CurrentPrincipal) -> SnapshotOut:
    """Snapshot the tenant now (operators and auditors); besides every ``ENGRAM_SNAPSHOT_EVERY``
    events, which the projector takes itself."""
    governs(who)
    snapshots = runtime.snapshots
    async with runtime.stores.exclusive(tenant):  # not under an erasure, which replaces the store
        graph = runtime.stores.get(tenant)
        if graph is None or graph.checkpoint() is None:
            raise not_found(f"tenant {tenant}")
        try:  # in a thread: the copy is hard links, the upload may not be
            snap = await asyncio.to_thread(snapshots.take, tenant, graph)
        except OSError as exc:
            raise problem(503, f"the snapshot could not be stored: {exc}", ["path", "tenant"]) from exc
        finally:
            del graph
    return SnapshotOut(key=snap.key, **vars(snap))


@router.get("", response_model=SnapshotsOut)
async def list_snapshots(tenant: TenantId, runtime: CurrentRuntime, who: CurrentPrincipal) -> SnapshotsOut:
    """The tenant's snapshots, oldest first (operators and auditors)."""
    governs(who)
    found = await asyncio.to_thread(runtime.snapshots.list, tenant)
    return SnapshotsOut(data=[SnapshotOut(key=s.key, **vars(s)) for s in found])
