"""A tenant's asserted facts as N-Quads, for audit and for diffing against a replay."""

from __future__ import annotations

from typing import Annotated, Any

from engram.api.deps import CurrentPrincipal, TenantStore, get_principal, governs
from engram.api.errors import responses
from engram.api.models import IRI_PATTERN
from engram.projections.explain import inferred_about
from engram.projections.read import export_nquads
from fastapi import APIRouter, Depends, Query
from fastapi.responses import PlainTextResponse
from pyoxigraph import NamedNode

router = APIRouter(
    prefix="/v1/tenants/{tenant}/graph",
    tags=["graph"],
    dependencies=[Depends(get_principal)],
    responses=responses(401, 403, 404, 429, json_content=True),
)


class NQuadsResponse(PlainTextResponse):
    media_type = "application/n-quads"


@router.get(
    "",
    response_class=NQuadsResponse,
    responses={
        200: {"description": "Sorted N-Quads (UTF-8)"},
        **responses(400, 408, 413, 422, 431, json_content=True),
    },
)
async def export_graph(graph: TenantStore, who: CurrentPrincipal) -> NQuadsResponse:
    """The tenant's asserted and inferred facts and its checkpoint as sorted N-Quads (operators
    and auditors: every memory is in it)."""
    governs(who)
    return NQuadsResponse(export_nquads(graph) if graph is not None else "")


@router.get("/inferred", responses=responses(422))
async def explain_subject(
    graph: TenantStore,
    who: CurrentPrincipal,
    subject: Annotated[
        str,
        Query(
            max_length=1024,  # percent-encoded, still well under ENGRAM_MAX_HEADER_BYTES
            pattern=IRI_PATTERN,
            description="An IRI, e.g. urn:engram:memory:ID or a class IRI",
        ),
    ],
) -> dict[str, Any]:
    """Every inferred fact about ``subject``, each with its rule and derivation tree (operators and
    auditors: a subject may be any memory)."""
    governs(who)
    try:
        node = NamedNode(subject)
    except ValueError:  # shaped like an IRI but not one: no fact can be about it
        return {"subject": subject, "inferred": []}
    return {"subject": subject, "inferred": inferred_about(graph, node, depth=4) if graph is not None else []}
