"""Live business data: KPI observations."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from api.deps import Commands, IdempotencyKey, TenantId, event_id_for, get_principal
from api.errors import responses
from api.models import Accepted, KpiCreate

router = APIRouter(
    prefix="/v1/tenants/{tenant}/kpis",
    tags=["kpis"],
    dependencies=[Depends(get_principal)],
    responses=responses(401, 404),
)


@router.post("", response_model=Accepted, status_code=202, responses=responses(409, 413, 422, 503, 504))
async def observe_kpi(
    tenant: TenantId,
    body: KpiCreate,
    commands: Commands,
    idempotency_key: IdempotencyKey = None,
    wait: bool = False,
) -> Accepted:
    """Append KpiObserved; with ``wait=true`` answer once the projection applied it."""
    by = body.attribution(event_id_for(tenant, idempotency_key, body.event_id))
    accepted = await commands.observe_kpi(tenant, body.metric, body.value, body.period, by, wait=wait)
    return Accepted.model_validate(accepted)
