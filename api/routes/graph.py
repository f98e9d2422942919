"""A tenant's asserted facts as N-Quads, for audit and for diffing against a replay."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query
from fastapi.responses import PlainTextResponse
from pyoxigraph import NamedNode

from api.deps import TenantStore
from projections.explain import inferred_about
from projections.read import export_nquads

router = APIRouter(prefix="/v1/tenants/{tenant}/graph", tags=["graph"])


@router.get("", response_class=PlainTextResponse)
async def export_graph(graph: TenantStore) -> PlainTextResponse:
    body = export_nquads(graph) if graph is not None else ""
    return PlainTextResponse(body, media_type="application/n-quads")


@router.get("/inferred")
async def explain_subject(
    graph: TenantStore,
    subject: Annotated[str, Query(description="An IRI, e.g. urn:engram:memory:ID or a class IRI")],
) -> dict[str, Any]:
    """Every inferred fact about ``subject``, each with its rule and derivation tree."""
    try:
        node = NamedNode(subject)
    except ValueError as exc:
        raise HTTPException(status_code=422, detail=f"subject is not an IRI: {exc}") from exc
    return {"subject": subject, "inferred": inferred_about(graph, node, depth=4) if graph is not None else []}
