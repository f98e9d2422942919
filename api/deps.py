"""Dependencies shared by the routes, as ``Annotated`` aliases."""

from __future__ import annotations

import dataclasses
import math
import re
import uuid
from datetime import datetime
from typing import Annotated, Any

from aiokafka.errors import KafkaError
from fastapi import Depends, Header, HTTPException, Path, Query, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from api import models
from api.auth import BadToken, Verifier
from api.bodies import AUTHENTICATED, body_only_if_taken
from api.errors import problem
from api.limits import CHARGED
from api.models import anchored
from api.runtime import Runtime
from commands import writes
from projections.tenant_graph import TenantGraph
from projections.visibility import Principal
from schemas import vocabulary as v
from schemas.checks import InvalidEvent, parse_time
from schemas.events import Actor
from streams.asof import AsOf, Past, parse_as_of

# Every dependency here is ``async def`` though none awaits: FastAPI runs a plain ``def`` one in a
# worker thread, a thread hop per dependency per request (measured: ~1 ms of a context's 9 ms).


async def get_runtime(request: Request) -> Runtime:
    return request.app.state.runtime  # type: ignore[no-any-return]


CurrentRuntime = Annotated[Runtime, Depends(get_runtime)]

TenantId = Annotated[
    str,
    Path(pattern=anchored(v.TENANT_RE.pattern), description="Tenant id: lowercase letters, digits, _ and -"),
]


async def get_commands(request: Request) -> writes.Commands:
    return request.app.state.runtime.commands  # type: ignore[no-any-return]


Commands = Annotated[writes.Commands, Depends(get_commands)]


async def get_tenant_graph(tenant: TenantId, commands: Commands) -> TenantGraph | None:
    """The tenant's graph, or None for a tenant with no events yet (reads then see nothing).

    Read-your-writes: a read first waits (at most ENGRAM_WAIT_TIMEOUT_S) until the projection has
    handled the last event this process appended for the tenant, so a 202 is followed by a read
    that sees it.
    """
    return await commands.current(tenant)


TenantStore = Annotated[TenantGraph | None, Depends(get_tenant_graph)]


def not_found(what: str, loc: list[str | int] | None = None) -> HTTPException:
    return problem(404, f"{what} not found", loc or ["path"])  # type: ignore[no-any-return]


# -- Idempotency-Key ---------------------------------------------------------------------------
IDEMPOTENCY_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "urn:engram:idempotency-key")
CANONICAL_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")

IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        min_length=1,
        max_length=255,
        pattern=r"^[ -~]+$",
        description="Makes a retried write harmless: the event id is this UUID, or a UUIDv5 of the "
        "tenant and this key. Printable ASCII, at most 255 characters.",
    ),
]


def event_id_for(tenant: str, key: str | None, given: uuid.UUID | None) -> uuid.UUID | None:
    """The event id of a write: the Idempotency-Key's, the body's ``event_id``, or None (minted)."""
    if key is None:
        return given
    derived = (
        uuid.UUID(key)
        if CANONICAL_UUID.fullmatch(key)
        else uuid.uuid5(IDEMPOTENCY_NAMESPACE, f"{tenant}\n{key}")
    )
    if given is not None and given != derived:
        raise problem(
            422,
            "the Idempotency-Key header and the body's event_id name different events",
            ["header", "Idempotency-Key"],
            "idempotency_key_mismatch",
        )
    return derived


# -- the principal -----------------------------------------------------------------------------
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


async def get_search_graph(tenant: TenantId, commands: Commands) -> TenantGraph | None:
    """The tenant's graph for a search: read-your-writes also waits until this process's last
    write to the tenant is searchable (the indexes commit a moment after the graph)."""
    return await commands.searchable(tenant)


SearchStore = Annotated[TenantGraph | None, Depends(get_search_graph)]


# -- valid time -----------------------------------------------------------------------------------
def get_valid_at(
    valid_at: Annotated[
        str | None,
        Query(
            max_length=64,
            description="Valid time (ISO-8601; UTC when no offset is given): answer with the "
            "memories that held in the world then, by their validity intervals, superseded or not",
            examples=["2026-06-01T00:00:00Z"],
        ),
    ] = None,
) -> datetime | None:
    if valid_at is None:
        return None
    try:
        return parse_time(valid_at, "valid_at")
    except InvalidEvent as exc:
        raise problem(422, str(exc), ["query", "valid_at"], "datetime_parsing") from exc


ValidAt = Annotated[datetime | None, Depends(get_valid_at)]


def get_as_of(
    as_of: Annotated[
        str | None,
        Query(
            max_length=64,
            description="System time: answer as the system knew it then, from a replay of the "
            "tenant's events up to a log position (partition:offset, that event included) or a time "
            "(every event the log appended at or before it)",
            examples=["2026-06-01T00:00:00Z", "3:1200"],
        ),
    ] = None,
) -> AsOf | None:
    if as_of is None:
        return None
    try:
        return parse_as_of(as_of)
    except ValueError as exc:
        raise problem(422, str(exc), ["query", "as_of"], "as_of") from exc


AsOfParam = Annotated[AsOf | None, Depends(get_as_of)]


async def past_stores(runtime: Runtime, tenant: str, as_of: AsOf) -> Past:
    """The tenant replayed to ``as_of``: 422 for a position off its partition, 503 without a log."""
    assert runtime.past is not None
    try:
        return await runtime.past.at(tenant, as_of)
    except ValueError as exc:
        raise problem(422, str(exc), ["query", "as_of"], "as_of") from exc
    except (KafkaError, LookupError) as exc:  # LookupError: offsets neither Kafka nor the archive hold
        raise problem(503, f"the log cannot be replayed now: {exc}", ["query", "as_of"]) from exc


# -- unknown query parameters --------------------------------------------------------------------
_known: dict[int, frozenset[str]] = {}


def _query_names(dependant: Any) -> set[str]:
    names = {field.alias for field in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _query_names(sub)
    return names


async def known_query_only(request: Request) -> None:
    """A query parameter the route does not take is refused (422), so a client that misspells
    ``kind`` or ``as_of`` is told so rather than silently answered without it."""
    route = request.scope.get("route")
    if route is None or not request.query_params:
        return
    allowed = _known.get(id(route))
    if allowed is None:
        allowed = _known[id(route)] = frozenset(_query_names(route.dependant))
    unknown = sorted(set(request.query_params) - allowed)
    if unknown:
        takes = ", ".join(sorted(allowed)) or "none"
        raise problem(
            422,
            f"unknown query parameter {unknown[0][:64]!r}; this route takes: {takes}",
            ["query", unknown[0][:64]],
            "unknown_parameter",
        )
