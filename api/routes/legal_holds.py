"""Legal holds: while one stands on a memory, forgetting it is refused (409)."""

from __future__ import annotations

from engram.api.deps import (
    Commands,
    CurrentPrincipal,
    IdempotencyKey,
    TenantId,
    get_principal,
    write_attribution,
)
from engram.api.errors import responses
from engram.api.models import Accepted, ForgetRequest, LegalHoldRequest
from engram.api.routes.memories import MemoryId
from fastapi import APIRouter, Depends

router = APIRouter(
    prefix="/v1/tenants/{tenant}/legal-holds",
    tags=["governance"],
    dependencies=[Depends(get_principal)],
    responses=responses(401, 403, 404, 409, 413, 422, 429, 503, 504),
)


@router.post("", response_model=Accepted, status_code=202)
async def place(
    tenant: TenantId,
    body: LegalHoldRequest,
    commands: Commands,
    who: CurrentPrincipal,
    idempotency_key: IdempotencyKey = None,
    wait: bool = False,
) -> Accepted:
    """Append LegalHoldPlaced (operators and auditors)."""
    by = write_attribution(tenant, body, who, idempotency_key)
    return Accepted.model_validate(
        await commands.place_hold(tenant, body.memory_id, by, reason=body.reason, wait=wait)
    )


@router.post("/{memory_id}/release", response_model=Accepted, status_code=202)
async def release(
    tenant: TenantId,
    memory_id: MemoryId,
    body: ForgetRequest,
    commands: Commands,
    who: CurrentPrincipal,
    idempotency_key: IdempotencyKey = None,
    wait: bool = False,
) -> Accepted:
    """Append LegalHoldReleased (operators and auditors): the memory may be forgotten again."""
    by = write_attribution(tenant, body, who, idempotency_key)
    return Accepted.model_validate(
        await commands.release_hold(tenant, memory_id, by, reason=body.reason, wait=wait)
    )
