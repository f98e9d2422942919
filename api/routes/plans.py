"""``check_plan``: a proposed action checked against the stored constraints before it is taken.

``POST …/plans/check`` with ``{"spend": {...}}`` or ``{"target_change": {...}}`` answers every
active constraint the principal may see that the action would breach or bring near its limit, each
with the rule's explanation ("spend 34,000 + 8,000 = 42,000 of cap 40,000 USD = 105%"). The rules
decide (``rules/plans.dlog`` over a scratch copy of the tenant's graph with the action added:
``projections.agents.check_plan``); no model is asked and nothing is written. A platform or metric
the tenant knows nothing of is 422, so a typo is not answered "nothing breached".
"""

from __future__ import annotations

import asyncio

from engram.api.deps import CurrentView, TenantId, get_principal
from engram.api.errors import problem, responses
from engram.api.models.agents import Finding, PlanAnswer, PlanCheck
from engram.projections.agents import UnknownName, check_plan
from engram.schemas import payloads as ev
from engram.schemas.checks import Problems
from fastapi import APIRouter, Depends

router = APIRouter(
    prefix="/v1/tenants/{tenant}/plans",
    tags=["agent work"],
    dependencies=[Depends(get_principal)],
    responses=responses(401, 404, 422, 429),
)


@router.post("/check", response_model=PlanAnswer)
async def check(tenant: TenantId, body: PlanCheck, view: CurrentView) -> PlanAnswer:
    """Which active constraints the action would breach or bring near its limit, and why."""
    problems = Problems()
    spend = kpi = None
    if body.spend is not None:
        ev.PlannedSpend.check(body.spend.model_dump(), problems)
        spend = ev.PlannedSpend.from_record(body.spend.model_dump())
    if body.target_change is not None:
        ev.PlannedKpi.check(body.target_change.model_dump(), problems)
        kpi = ev.PlannedKpi.from_record(body.target_change.model_dump())
    if problems.reasons:
        raise problem(422, "; ".join(problems.reasons), ["body", "spend" if spend else "target_change"])
    try:
        # a thread: the scratch materialisation is CPU work, and the event loop serves other requests
        found = await asyncio.to_thread(check_plan, view.graph, spend, kpi, view.sees)
    except UnknownName as exc:
        field = "platform" if spend is not None else "metric"
        raise problem(422, str(exc), ["body", "spend" if spend else "target_change", field]) from exc
    findings = [Finding(**vars(f)) for f in found]
    return PlanAnswer(ok=not any(f.status == "breach" for f in findings), findings=findings)
