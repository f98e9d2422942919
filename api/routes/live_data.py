"""Live business data beside the memories: KPI and spend observations, and the graph's clock."""

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
from engram.api.models import Accepted, ClockTick, KpiCreate, SpendCreate
from fastapi import APIRouter, Depends

router = APIRouter(
    prefix="/v1/tenants/{tenant}",
    tags=["live data"],
    dependencies=[Depends(get_principal)],
    responses=responses(401, 403, 404, 409, 413, 422, 429, 503, 504),
)


@router.post("/kpis", response_model=Accepted, status_code=202)
async def observe_kpi(
    tenant: TenantId,
    body: KpiCreate,
    commands: Commands,
    who: CurrentPrincipal,
    idempotency_key: IdempotencyKey = None,
    wait: bool = False,
) -> Accepted:
    """Append KpiObserved (a pipeline's or an operator's); with ``wait=true`` once it is applied."""
    by = write_attribution(tenant, body, who, idempotency_key)
    accepted = await commands.observe_kpi(tenant, body.metric, body.value, body.period, by, wait=wait)
    return Accepted.model_validate(accepted)


@router.post("/spend", response_model=Accepted, status_code=202)
async def observe_spend(
    tenant: TenantId,
    body: SpendCreate,
    commands: Commands,
    who: CurrentPrincipal,
    idempotency_key: IdempotencyKey = None,
    wait: bool = False,
) -> Accepted:
    """Append SpendObserved (spend to date on one platform for a period)."""
    by = write_attribution(tenant, body, who, idempotency_key)
    accepted = await commands.observe_spend(
        tenant, body.platform, body.amount, body.currency, body.period, by, wait=wait
    )
    return Accepted.model_validate(accepted)


@router.post("/clock", response_model=Accepted, status_code=202)
async def tick_clock(
    tenant: TenantId,
    body: ClockTick,
    commands: Commands,
    who: CurrentPrincipal,
    idempotency_key: IdempotencyKey = None,
    wait: bool = False,
) -> Accepted:
    """Append ClockTicked: the graph's now, which expiry and the live context are decided against."""
    by = write_attribution(tenant, body, who, idempotency_key)
    return Accepted.model_validate(await commands.tick_clock(tenant, body.now, by, wait=wait))
