"""Onboarding (operators): a new tenant's spine of context on day one, and what is still missing.

The write is a command (``commands.onboarding``): each slot is an ordinary remember with source
``onboarding``, so it is validated, governed and made idempotent exactly as any memory is.
"""

from __future__ import annotations

from engram.api.deps import Commands, CurrentPrincipal, TenantId, TenantStore, get_principal, token_actor
from engram.api.errors import problem, responses
from engram.api.models import Accepted
from engram.api.models.onboarding import (
    OnboardingAccepted,
    OnboardingPresent,
    OnboardingRequest,
    OnboardingStatus,
)
from engram.commands import onboarding
from engram.commands.answers import Attribution
from engram.projections.read import onboarded
from engram.schemas import vocabulary as v
from fastapi import APIRouter, Depends

router = APIRouter(
    prefix="/v1/tenants/{tenant}/onboarding",
    tags=["onboarding"],
    dependencies=[Depends(get_principal)],
    responses=responses(401, 403, 404, 429),
)


@router.post(
    "", response_model=OnboardingAccepted, status_code=202, responses=responses(409, 413, 422, 503, 504)
)
async def onboard(
    tenant: TenantId, body: OnboardingRequest, commands: Commands, who: CurrentPrincipal, wait: bool = False
) -> OnboardingAccepted:
    """Remember the slots given (an operator's): the first objective (a target or a budget,
    Critical by default), one durable fact and one preference (High by default), company scope,
    source ``onboarding``, confidence 1. A retry of the same body writes nothing new."""
    if who.role != v.Role.OPERATOR:
        raise problem(403, "only an operator onboards a tenant", ["header", "Authorization"])
    by = Attribution(
        source=v.Source.ONBOARDING.value,
        actor=token_actor(who, None),
        occurred_at=body.occurred_at,
        teams=who.teams,
    )
    accepted = await onboarding.onboard(commands, tenant, body.memories(), by, wait=wait)
    return OnboardingAccepted(**{slot: Accepted.model_validate(a) for slot, a in accepted.items()})


@router.get("", response_model=OnboardingStatus, responses=responses(422))
async def status(graph: TenantStore, who: CurrentPrincipal) -> OnboardingStatus:
    """Which slots hold an active onboarding memory (their ids, newest first) and which are
    missing (operators and auditors)."""
    if not who.sees_everything:
        raise problem(
            403, "only an operator or an auditor may read a tenant's onboarding", ["header", "Authorization"]
        )
    found = onboarded(graph) if graph is not None else {}
    present = OnboardingPresent(**{slot: found.get(slot, []) for slot in onboarding.SLOTS})
    missing = [slot for slot in onboarding.SLOTS if not found.get(slot)]
    return OnboardingStatus(present=present, missing=missing, complete=not missing)  # type: ignore[arg-type]
