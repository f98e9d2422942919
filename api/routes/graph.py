"""A tenant's asserted facts as N-Quads, for audit and for diffing against a replay."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import PlainTextResponse

from api.deps import TenantStore
from projections.read import export_nquads

router = APIRouter(prefix="/v1/tenants/{tenant}/graph", tags=["graph"])


@router.get("", response_class=PlainTextResponse)
async def export_graph(graph: TenantStore) -> PlainTextResponse:
    body = export_nquads(graph) if graph is not None else ""
    return PlainTextResponse(body, media_type="application/n-quads")
