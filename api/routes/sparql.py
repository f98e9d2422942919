"""Read-only SPARQL over the tenant's graph, for operators and auditors."""

from __future__ import annotations

import asyncio
import threading
from typing import Annotated

from fastapi import APIRouter, Depends, Header, Response
from pydantic import Field, StrictStr

from api.deps import CurrentPrincipal, TenantStore, get_principal, governs
from api.errors import problem, responses
from api.models import EdgeModel
from projections import sparql

router = APIRouter(
    prefix="/v1/tenants/{tenant}",
    tags=["graph"],
    dependencies=[Depends(get_principal)],
    responses=responses(401, 403, 404, 406, 422, 429, 503),
)

TIMEOUT_S = 10.0
MAX_ROWS = 10_000
# Queries evaluating at once, in this process. oxigraph evaluates without the GIL but cannot be
# interrupted: a query over its time limit is answered 422 at once and runs on to its end in
# its thread, holding its place here, so runaway queries cannot take every core.
RUNNING = threading.BoundedSemaphore(2)


def _run_holding_a_place(graph: object, query: str, accept: str) -> sparql.Answer:
    try:
        return sparql.run(graph, query, accept, timeout_s=TIMEOUT_S, max_rows=MAX_ROWS)  # type: ignore[arg-type]
    finally:
        RUNNING.release()


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
    body: SparqlRequest,
    accept: Annotated[str, Header()] = "application/sparql-results+json",
) -> Response:
    """A read-only query: no updates, no SERVICE, at most 10,000 rows (``X-Result-Truncated``
    says when there were more) and 10 s."""
    governs(who)
    if graph is None:
        return Response(
            '{"head": {"vars": []}, "results": {"bindings": []}}',
            media_type="application/sparql-results+json",
        )
    if not RUNNING.acquire(blocking=False):
        busy = problem(503, "other queries are running; retry shortly", ["body", "query"])
        busy.headers = {"Retry-After": "1"}
        raise busy
    try:
        answer = await asyncio.wait_for(
            asyncio.to_thread(_run_holding_a_place, graph, body.query, accept), TIMEOUT_S
        )
    except TimeoutError as exc:
        raise problem(422, "the query took longer than its time limit; narrow it", ["body", "query"]) from exc
    except sparql.QueryRefused as exc:
        status = 406 if str(exc).startswith("406") else 422
        raise problem(status, str(exc), ["header", "Accept"] if status == 406 else ["body", "query"]) from exc
    headers = {"X-Result-Truncated": "true"} if answer.truncated else {}
    return Response(answer.body, media_type=answer.media_type, headers=headers)
