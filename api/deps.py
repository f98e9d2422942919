"""Dependencies shared by the routes, as ``Annotated`` aliases."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, HTTPException, Path, Request

from api.runtime import Runtime
from projections.graph import TenantGraph
from schemas import vocabulary as v


def get_runtime(request: Request) -> Runtime:
    return request.app.state.runtime  # type: ignore[no-any-return]


CurrentRuntime = Annotated[Runtime, Depends(get_runtime)]

TenantId = Annotated[
    str,
    Path(pattern=v.TENANT_RE.pattern, description="Tenant id: lowercase letters, digits, _ and -"),
]


def get_tenant_graph(tenant: TenantId, runtime: CurrentRuntime) -> TenantGraph | None:
    """The tenant's graph, or None for a tenant with no events yet (reads then see nothing)."""
    return runtime.stores.get(tenant)


TenantStore = Annotated[TenantGraph | None, Depends(get_tenant_graph)]


def not_found(what: str) -> HTTPException:
    return HTTPException(status_code=404, detail=f"{what} not found")
