"""Read-only SPARQL over the tenant's graph, for operators and auditors, evaluated in the sandbox
(``projections.sparql_sandbox``): no network, a time limit that stops the query, two at once."""

from __future__ import annotations

from typing import Annotated

from engram.api.deps import CurrentPrincipal, CurrentRuntime, TenantStore, get_principal, governs
from engram.api.errors import problem, responses
from engram.api.models import EdgeModel
from engram.projections import sparql
from engram.projections.sparql_sandbox import Unavailable
from fastapi import APIRouter, Depends, Header, Response
from pydantic import Field, StrictStr

router = APIRouter(
    prefix="/v1/tenants/{tenant}",
    tags=["graph"],
    dependencies=[Depends(get_principal)],
    responses=responses(401, 403, 404, 406, 422, 429, 503),
)

MAX_ROWS = 10_000


class SparqlRequest(EdgeModel):
    query: StrictStr = Field(
        min_length=1,
        max_length=sparql.MAX_QUERY_CHARS,
        description="SELECT, ASK, CONSTRUCT or DESCRIBE over the asserted, inferred and ontology graphs",
    )


@router.post(
    "/sparql",
    responses={200: {"description": "SPARQL results (JSON, CSV or TSV) or N-Triples, by Accept",
                     "content": {m: {} for m in (*sparql.SELECT_TYPES, *sparql.GRAPH_TYPES)}}},
)  # fmt: skip
async def query(
    graph: TenantStore,
    who: CurrentPrincipal,
    runtime: CurrentRuntime,
    body: SparqlRequest,
    accept: Annotated[str, Header()] = "application/sparql-results+json",
) -> Response:
    """A read-only query, evaluated with no network: no updates, SERVICE is never evaluated, at
    most 10,000 rows (``X-Result-Truncated`` says when there were more), within
    ``ENGRAM_SPARQL_TIMEOUT_S``."""
    governs(who)
    if graph is None:
        return Response(
            '{"head": {"vars": []}, "results": {"bindings": []}}',
            media_type="application/sparql-results+json",
        )
    if graph.in_memory:  # the sandboxed evaluators open the tenant's store from its directory
        reason = "SPARQL is unavailable: tenants are held in memory (ENGRAM_STORE=memory)"
        raise problem(503, reason, ["body", "query"])
    sandbox = getattr(runtime, "sparql", None)
    if sandbox is None or sandbox.unavailable:
        reason = sandbox.unavailable if sandbox is not None else "the query sandbox is not running"
        raise problem(503, f"SPARQL is unavailable: {reason}", ["body", "query"])
    if sandbox.busy:
        busy = problem(503, "other queries are running; retry shortly", ["body", "query"])
        busy.headers = {"Retry-After": "1"}
        raise busy
    # the evaluator keeps a store open while this token is unchanged: the graph's identity and
    # its write generation (which moves around every write)
    token = f"{id(graph)}:{graph.generation}"
    try:
        answer = await sandbox.query(str(graph.path.resolve()), token, body.query, accept, max_rows=MAX_ROWS)
    except Unavailable as exc:
        raise problem(503, f"SPARQL is unavailable: {exc}", ["body", "query"]) from None
    except sparql.QueryRefused as exc:
        loc = ["header", "Accept"] if exc.status == 406 else ["body", "query"]
        raise problem(exc.status, str(exc), loc) from None
    headers = {"X-Result-Truncated": "true"} if answer.truncated else {}
    return Response(answer.body, media_type=answer.media_type, headers=headers)
