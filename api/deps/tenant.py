"""The runtime, the tenant in the path, and the tenant's graph (read-your-writes) as route dependencies."""

from __future__ import annotations

from typing import Annotated

from engram.api.errors import problem
from engram.api.models import anchored
from engram.api.runtime import Runtime
from engram.commands import writes
from engram.projections.tenant_graph import TenantGraph
from engram.schemas import vocabulary as v
from fastapi import Depends, HTTPException, Path, Request


async def get_runtime(request: Request) -> Runtime:
    return request.app.state.runtime  # type: ignore[no-any-return]


CurrentRuntime = Annotated[Runtime, Depends(get_runtime)]

TenantId = Annotated[
    str,
    Path(pattern=anchored(v.TENANT_RE.pattern), description="Tenant id: lowercase letters, digits, _ and -"),
]
MemoryId = Annotated[str, Path(pattern=anchored(v.ID_RE.pattern), description="A memory id")]


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


async def get_search_graph(tenant: TenantId, commands: Commands) -> TenantGraph | None:
    """The tenant's graph for a search: read-your-writes also waits until this process's last
    write to the tenant is searchable (the indexes commit a moment after the graph)."""
    return await commands.searchable(tenant)


SearchStore = Annotated[TenantGraph | None, Depends(get_search_graph)]
