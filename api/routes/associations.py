"""``associate``: a typed, directed link between two memories, or a memory and an episode or a
decision (``{"from", "to", "relation"}``; an end is a memory id, ``episode:{id}`` or
``decision:{id}``). Its own event, MemoriesAssociated; the principal must see both ends (an end it
may not see is 404, as one that does not exist). Between two memories the rules derive the typed
edge (``rules/associations.dlog``); a memory that ``supports`` a decision is one it relied on.
Removing one is its own event too, AssociationRemoved: the link and what the rules derived through
it go (an association is its acting user's: anyone else, an operator aside, is answered 404).
"""

from __future__ import annotations

from typing import Annotated

from engram.api.deps import (
    Commands,
    CurrentPrincipal,
    IdempotencyKey,
    TenantId,
    get_principal,
    write_attribution,
)
from engram.api.errors import responses
from engram.api.models import anchored
from engram.api.models.agents import AgentAccepted, AssociationCreate, AssociationRemove
from engram.api.routes.sessions import WRITES, answer
from engram.schemas import vocabulary as v
from fastapi import APIRouter, Depends, Path

router = APIRouter(
    prefix="/v1/tenants/{tenant}/associations",
    tags=["agent work"],
    dependencies=[Depends(get_principal)],
    responses=responses(401, 404, 429),
)


@router.post("", response_model=AgentAccepted, status_code=202, responses=WRITES)
async def associate(
    tenant: TenantId,
    body: AssociationCreate,
    commands: Commands,
    who: CurrentPrincipal,
    idempotency_key: IdempotencyKey = None,
    wait: bool = False,
) -> AgentAccepted:
    """Append MemoriesAssociated."""
    by = write_attribution(tenant, body, who, idempotency_key)
    payload = {
        "association_id": body.association_id,
        "from_ref": body.from_,
        "to_ref": body.to,
        "relation": body.relation,
    }
    return answer(await commands.record_agent_work(tenant, "MemoriesAssociated", payload, by, wait=wait))


AssociationId = Annotated[str, Path(pattern=anchored(v.ID_RE.pattern), description="An association id")]


@router.post("/{association_id}/remove", response_model=AgentAccepted, status_code=202, responses=WRITES)
async def remove_association(
    tenant: TenantId,
    association_id: AssociationId,
    body: AssociationRemove,
    commands: Commands,
    who: CurrentPrincipal,
    idempotency_key: IdempotencyKey = None,
    wait: bool = False,
) -> AgentAccepted:
    """Append AssociationRemoved."""
    by = write_attribution(tenant, body, who, idempotency_key)
    done = await commands.remove_association(tenant, association_id, by, reason=body.reason, wait=wait)
    return answer((done, association_id))
