"""Who is asking: the bearer token checked, the tenant matched, the request charged to its rate limit,
and what follows from it (who may read the whole tenant, whose actor a write carries)."""

from __future__ import annotations

import dataclasses
import math
from typing import Annotated, Any

from engram.api import models
from engram.api.auth import BadToken, Verifier
from engram.api.bodies import AUTHENTICATED, body_only_if_taken
from engram.api.deps.idempotency import event_id_for
from engram.api.deps.tenant import TenantId
from engram.api.errors import problem
from engram.api.limits import CHARGED
from engram.commands import writes
from engram.projections.visibility import Principal
from engram.schemas import vocabulary as v
from engram.schemas.events import Actor
from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

bearer = HTTPBearer(auto_error=False, description="A JWT minted by `engram token` (or your issuer)")


async def get_verifier(request: Request) -> Verifier:
    return request.app.state.verifier  # type: ignore[no-any-return]


async def get_principal(
    request: Request,
    tenant: TenantId,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
    verifier: Annotated[Verifier, Depends(get_verifier)],
) -> Principal:
    """Who is asking, from the bearer token; every tenant route depends on this (the routers
    declare it), so none reads a header itself. A token for another tenant is answered exactly as
    a tenant that does not exist would be: a tenant's existence never leaks."""
    if credentials is None:
        raise unauthorized("a bearer token is required (Authorization: Bearer <token>)")
    try:
        claims = verifier.verify(credentials.credentials)
    except BadToken as exc:
        raise unauthorized(str(exc)) from exc
    if claims.tenant != tenant:
        raise tenant_not_found(tenant)
    wait = request.app.state.rate_limits.take((tenant, claims.principal.subject or ""))
    if wait > 0:
        exc = problem(
            429,
            f"too many requests from {claims.principal.subject}; retry in {wait:.2f}s",
            ["header", "Authorization"],
            "rate_limited",
        )
        exc.headers = {"Retry-After": str(max(1, math.ceil(wait)))}
        raise exc
    request.scope[AUTHENTICATED] = True
    request.scope[CHARGED] = (tenant, claims.principal.subject or "")  # the request's cost, after it
    await body_only_if_taken(request)
    return claims.principal


def unauthorized(reason: str) -> HTTPException:
    exc: HTTPException = problem(401, reason, ["header", "Authorization"], "unauthorized")
    exc.headers = {"WWW-Authenticate": "Bearer"}
    return exc


def tenant_not_found(tenant: str) -> HTTPException:
    return problem(404, f"tenant {tenant} not found", ["path", "tenant"])  # type: ignore[no-any-return]


CurrentPrincipal = Annotated[Principal, Depends(get_principal)]


def governs(who: Principal) -> None:
    """Routes that show the whole tenant (the graph export, explanations of any subject): 403
    unless the principal is an operator or an auditor."""
    if not who.sees_everything:
        raise problem(
            403, "only an operator or an auditor may read the whole graph", ["header", "Authorization"]
        )


def token_actor(who: CurrentPrincipal, body_actor: Any | None) -> Actor:
    """The actor of a write: the bearer token's, never what a body claims (a body may repeat it)."""
    actor = Actor(who.subject or who.user or "", who.role, who.user if who.role == v.Role.AGENT else None)
    if body_actor is not None and (body_actor.id, body_actor.role) != (actor.id, actor.role):
        raise problem(
            422,
            f"actor is the bearer token's ({actor.id}, {actor.role}); leave it out or state the same",
            ["body", "actor"],
            "actor_mismatch",
        )
    return actor


def write_attribution(
    tenant: str, body: models.Attribution, who: Principal, key: str | None
) -> writes.Attribution:
    """Who writes a request's event: the token's actor (``token_actor``), with the event id of the
    Idempotency-Key, else the body's, else a fresh one, and the token's teams (a write sees no team
    memory a read would not). Every write route starts here."""
    by = body.attribution(token_actor(who, body.actor), event_id_for(tenant, key, body.event_id))
    return dataclasses.replace(by, teams=who.teams)
