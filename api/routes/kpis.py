"""Live business data: KPI observations."""

from __future__ import annotations

from fastapi import APIRouter

from api.deps import CurrentRuntime, IdempotencyKey, TenantId, Writes, event_id_for
from api.errors import responses
from api.models import Accepted, KpiCreate
from api.writes import produce

router = APIRouter(prefix="/v1/tenants/{tenant}/kpis", tags=["kpis"])


@router.post("", response_model=Accepted, status_code=202, responses=responses(409, 413, 422, 503, 504))
async def observe_kpi(
    tenant: TenantId,
    body: KpiCreate,
    runtime: CurrentRuntime,
    writes: Writes,
    idempotency_key: IdempotencyKey = None,
    wait: bool = False,
) -> Accepted:
    """Append KpiObserved; with ``wait=true`` answer once the projection applied it."""
    body = body.model_copy(update={"event_id": event_id_for(tenant, idempotency_key, body.event_id)})
    payload = {"metric": body.metric, "value": body.value, "period": body.period}
    accepted = await produce(runtime, body.envelope("KpiObserved", tenant, payload), wait=wait)
    writes.note(tenant, accepted.partition, accepted.offset)
    return accepted
