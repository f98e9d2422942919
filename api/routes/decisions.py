"""Decision records (DESIGN §7): record what was decided, citing the memories and live data it
relied on (and the action decided on, which ``rules/plans.dlog`` checks against the active
constraints: a decision that breaches one is flagged ``breached_constraint``), and ask which
decisions relied on a memory (``?relied_on=``: cited, or associated as supporting the decision).
"""

from __future__ import annotations

from typing import Annotated

from engram.api.deps import (
    Commands,
    CurrentPrincipal,
    CurrentView,
    GraphAsOf,
    IdempotencyKey,
    TenantId,
    get_principal,
    not_found,
    write_attribution,
)
from engram.api.errors import responses
from engram.api.models import anchored
from engram.api.models.agents import (
    AgentAccepted,
    DecisionCreate,
    DecisionJustification,
    DecisionsPublic,
    NarrativeItem,
)
from engram.api.routes.sessions import WRITES, answer
from engram.api.routes.verbs import as_of_text
from engram.projections.agents import decision, decisions_relying_on, decisions_seen, may_see_node
from engram.projections.justify import justify_decision
from engram.projections.terms import e, memory_iri
from engram.schemas import vocabulary as v
from fastapi import APIRouter, Depends, Path, Query

router = APIRouter(
    prefix="/v1/tenants/{tenant}/decisions",
    tags=["agent work"],
    dependencies=[Depends(get_principal)],
    responses=responses(401, 404, 429),
)

DecisionId = Annotated[str, Path(pattern=anchored(v.ID_RE.pattern), description="A decision id")]


@router.post("", response_model=AgentAccepted, status_code=202, responses=WRITES)
async def record_decision(
    tenant: TenantId,
    body: DecisionCreate,
    commands: Commands,
    who: CurrentPrincipal,
    idempotency_key: IdempotencyKey = None,
    wait: bool = False,
) -> AgentAccepted:
    """Append DecisionRecorded. Every memory it cites must be one the principal may see (else 404,
    as for a memory that does not exist); every live-data reference one that was observed (422)."""
    by = write_attribution(tenant, body, who, idempotency_key)
    return answer(await commands.record_agent_work(tenant, "DecisionRecorded", body.payload(), by, wait=wait))


@router.get("", response_model=DecisionsPublic, responses=responses(422))
async def list_decisions(
    tenant: TenantId,
    view: CurrentView,
    relied_on: Annotated[
        str | None,
        Query(pattern=anchored(v.ID_RE.pattern), description="A memory id: only the decisions relying on it"),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> DecisionsPublic:
    """The decisions the principal may see (with ``relied_on``: that relied on the memory), in log
    order, a page at a time with ``count`` of them all; a ``relied_on`` memory the principal may not
    see is 404, as one that does not exist."""
    graph, who, sees = view.graph, view.who, view.sees
    if graph is None:
        if relied_on is None:
            return DecisionsPublic(data=[], count=0)
        raise not_found(f"memory {relied_on}", ["query", "relied_on"])
    if relied_on is None:
        ids = decisions_seen(graph, who)
    elif sees(relied_on) and graph.objects(memory_iri(relied_on), e("memoryId")):
        ids = decisions_relying_on(graph, relied_on, who, sees)
    else:
        raise not_found(f"memory {relied_on}", ["query", "relied_on"])
    data = [NarrativeItem.model_validate(decision(graph, i, sees)) for i in ids[offset : offset + limit]]
    return DecisionsPublic(data=data, count=len(ids))


@router.get("/{decision_id}", response_model=NarrativeItem, responses=responses(422))
async def read_decision(tenant: TenantId, decision_id: DecisionId, view: CurrentView) -> NarrativeItem:
    """One decision with its statuses, each explained by the rule that derived it."""
    if view.graph is None or not may_see_node(view.graph, view.who, "decision", decision_id):
        raise not_found(f"decision {decision_id}")
    return NarrativeItem.model_validate(decision(view.graph, decision_id, view.sees))


@router.get("/{decision_id}/justify", response_model=DecisionJustification, responses=responses(422, 503))
async def justify_decision_route(
    tenant: TenantId,
    decision_id: DecisionId,
    at: GraphAsOf,
) -> DecisionJustification:
    """Why a decision was taken, in one answer: who recorded it and for whom, its session and
    episode, the memories (cited, or associated as supporting it) and live data it relied on, every
    event that touched it (log positions), and its derived statuses each with the rule derivation
    tree; with ``as_of``, as the system knew it then. Only what the principal may see: a memory it
    may not see is left out; a decision it may not see is 404, as one that does not exist."""
    view = await at.view()
    found = justify_decision(view.graph, decision_id, view.who, view.sees) if view.graph is not None else None
    if found is None:
        raise not_found(f"decision {decision_id}")
    return DecisionJustification(**found, as_of=as_of_text(at.as_of))
