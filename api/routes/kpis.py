"""Live business data: KPI observations."""

from __future__ import annotations

from fastapi import APIRouter

from api.deps import CurrentRuntime, TenantId
from api.models import Accepted, KpiCreate
from api.writes import produce

router = APIRouter(prefix="/v1/tenants/{tenant}/kpis", tags=["kpis"])


@router.post("", response_model=Accepted, status_code=202)
async def observe_kpi(
    tenant: TenantId, body: KpiCreate, runtime: CurrentRuntime, wait: bool = False
) -> Accepted:
    payload = {"metric": body.metric, "value": body.value, "period": body.period}
    return await produce(runtime, body.envelope("KpiObserved", tenant, payload), wait=wait)
