"""Dependencies shared by the routes, as ``Annotated`` aliases."""

from __future__ import annotations

import re
import uuid
from typing import Annotated

from fastapi import Depends, Header, HTTPException, Path, Query, Request

from api.errors import problem
from api.models import anchored
from api.runtime import Runtime
from commands import writes
from projections.tenant_graph import TenantGraph
from projections.visibility import Principal
from schemas import vocabulary as v


def get_runtime(request: Request) -> Runtime:
    return request.app.state.runtime  # type: ignore[no-any-return]


CurrentRuntime = Annotated[Runtime, Depends(get_runtime)]

TenantId = Annotated[
    str,
    Path(pattern=anchored(v.TENANT_RE.pattern), description="Tenant id: lowercase letters, digits, _ and -"),
]


def get_commands(request: Request) -> writes.Commands:
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
Teams = Annotated[
    list[Annotated[str, Query(max_length=128)]],
    Query(max_length=64, description="The user's teams: repeated, or comma separated"),
]


def get_principal(
    user: Annotated[
        str | None, Query(max_length=128, pattern=anchored(v.ID_RE.pattern), description="Who is asking")
    ] = None,
    teams: Teams = [],  # noqa: B006 (FastAPI copies defaults)
) -> Principal:
    """Who is asking. Until bearer tokens land this is what the request names; every read that
    filters by visibility takes it from here, so tokens replace this one function."""
    names = [t.strip() for item in teams for t in item.split(",") if t.strip()]
    for name in names:
        if not v.full_match(v.ID_RE, name):
            raise problem(422, f"not a team id: {name[:64]!r}", ["query", "teams"], "string_pattern_mismatch")
    return Principal(user=user, teams=frozenset(names))


CurrentPrincipal = Annotated[Principal, Depends(get_principal)]


async def get_search_graph(tenant: TenantId, commands: Commands) -> TenantGraph | None:
    """The tenant's graph for a search: read-your-writes also waits until this process's last
    write to the tenant is searchable (the indexes commit a moment after the graph)."""
    return await commands.searchable(tenant)


SearchStore = Annotated[TenantGraph | None, Depends(get_search_graph)]
