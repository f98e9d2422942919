"""Proposals of one tenant: the pending ones, accept, reject.

A captured memory never overwrites a person's (DESIGN §7): an extracted memory that would replace
or contradict a human-entered one is written as a pending proposal (``proposes``), inactive until a
person answers. The list holds only the proposals the principal may see, each beside the memory it
would replace; accepting or rejecting one it may not see is the same 404 as an unknown id. Who may
answer is the projection's decision (``projections.governance``): whoever may supersede the memory
the proposal would replace.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from engram.api.deps import (
    Commands,
    CurrentPrincipal,
    CurrentView,
    IdempotencyKey,
    MemoryId,
    TenantId,
    get_principal,
    write_attribution,
)
from engram.api.errors import responses
from engram.api.models import Accepted
from engram.api.models.proposals import ProposalDecisionRequest, ProposalPublic, ProposalsPublic
from engram.api.routes.memories import with_derived
from engram.projections.proposals import pending
from engram.schemas import vocabulary as v
from fastapi import APIRouter, Depends, Path, Query

router = APIRouter(
    prefix="/v1/tenants/{tenant}/proposals",
    tags=["proposals"],
    dependencies=[Depends(get_principal)],
    responses=responses(401, 404, 429),
)

WRITE_RESPONSES = responses(403, 409, 413, 422, 503, 504)


@router.get("", response_model=ProposalsPublic, responses=responses(422))
async def list_proposals(
    view: CurrentView,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> ProposalsPublic:
    """The pending proposals the principal may see, newest first, each with the memories it would
    replace (``replaces``: the first of ``replaces_all``) and why it was proposed."""
    graph, sees = view.graph, view.sees
    if graph is None:
        return ProposalsPublic(data=[], count=0)
    found = pending(graph, view.who, sees)
    page = [
        ProposalPublic(
            id=p["id"],
            proposal=with_derived(graph, p["proposal"], sees),
            replaces=(replaced := [with_derived(graph, old, sees) for old in p["replaces_all"]])[0],
            replaces_all=replaced,
            reason=p["reason"],
            proposed_at=p["proposed_at"],
        )
        for p in found[offset : offset + limit]
    ]
    return ProposalsPublic(data=page, count=len(found))


class Answer(StrEnum):
    """The last segment of the decision's path: ``…/proposals/{id}/accept`` or ``…/reject``."""

    ACCEPT = "accept"
    REJECT = "reject"


DECISIONS = {Answer.ACCEPT: v.ProposalDecision.ACCEPTED, Answer.REJECT: v.ProposalDecision.REJECTED}


@router.post("/{memory_id}/{decision}", response_model=Accepted, status_code=202, responses=WRITE_RESPONSES)
async def decide(
    tenant: TenantId,
    memory_id: MemoryId,
    decision: Annotated[Answer, Path(description="accept or reject")],
    body: ProposalDecisionRequest,
    commands: Commands,
    who: CurrentPrincipal,
    idempotency_key: IdempotencyKey = None,
    wait: bool = False,
) -> Accepted:
    """Append ProposalDecided. ``accept``: the proposal becomes active and supersedes the memory it
    would replace; ``reject``: it stays inactive, marked rejected, with the reason if given. 409 if
    already decided, or (accept) that memory is no longer active; 422 for a memory that is not a
    proposal; 403 for one whose memory the caller may not supersede."""
    by = write_attribution(tenant, body, who, idempotency_key)
    answer = DECISIONS[decision]
    accepted = await commands.decide_proposal(tenant, memory_id, answer, by, reason=body.reason, wait=wait)
    return Accepted.model_validate(accepted)
