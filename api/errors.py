"""One error shape for every refusal: ``{"detail": [{"loc": [...], "msg": "...", "type": "..."}]}``.

Validation errors never echo the input (no ``input``/``ctx``), an ``HTTPException`` raised with a
string detail anywhere is wrapped into the list shape, strings are bounded and made encodable
(a lone surrogate in a property name cannot break the response), and a 405 names every method
the path allows.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any

from engram.commands.answers import Refused
from engram.projections.tenant_graph import StoreLocked, StoreOpening
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

log = logging.getLogger(__name__)

RETRY_AFTER_S = 5  # a 503's Retry-After: the log (or a store) unavailable, worth asking again soon
MAX_TEXT = 300  # characters of a loc item or message sent back; inputs are never sent back whole

# The error type per status, for errors raised with a plain string detail.
TYPES: dict[int, str] = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    408: "request_timeout",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "invalid",
    429: "rate_limited",
    431: "header_too_large",
    500: "internal_error",
    503: "unavailable",
    504: "timeout",
}
# Where a plain string detail points: the body for write refusals, the path for a missing resource.
LOCS: dict[int, list[str]] = {404: ["path"], 409: ["body"], 413: ["body"], 422: ["body"]}


class ErrorItem(BaseModel):
    loc: list[str | int] = Field(description="Where: body, query, path or header, then the field path")
    msg: str = Field(description="Why it was refused, in words")
    type: str = Field(description="A stable error code, e.g. missing, finite_number, conflict")


class ErrorBody(BaseModel):
    """Every 4xx (and 5xx) answer of the API."""

    detail: list[ErrorItem]


def problem(status: int, msg: str, loc: Sequence[str | int] = (), type_: str | None = None) -> Any:
    """An ``HTTPException`` whose detail is already in the list shape."""
    from fastapi import HTTPException

    item = {"loc": list(loc), "msg": msg, "type": type_ or TYPES.get(status, "error")}
    return HTTPException(status_code=status, detail=[item])


def _text(value: Any) -> str:
    s = value if isinstance(value, str) else str(value)
    if len(s) > MAX_TEXT:
        s = s[:MAX_TEXT] + "…"
    # A lone surrogate cannot be encoded as UTF-8: show it escaped rather than fail the response.
    return s.encode("utf-8", "backslashreplace").decode("utf-8")


def _loc_item(value: Any) -> str | int:
    return value if isinstance(value, int) and not isinstance(value, bool) else _text(value)


def clean(errors: Iterable[Any], status: int) -> list[dict[str, Any]]:
    """Items in the one shape: only loc, msg and type, bounded and encodable."""
    out = []
    for e in errors:
        if isinstance(e, dict):
            loc = e.get("loc") or LOCS.get(status, [])
            out.append(
                {
                    "loc": [_loc_item(x) for x in (loc if isinstance(loc, list | tuple) else [loc])],
                    "msg": _text(e.get("msg", "")),
                    "type": _text(e.get("type") or TYPES.get(status, "error")),
                }
            )
        else:
            out.append(
                {"loc": list(LOCS.get(status, [])), "msg": _text(e), "type": TYPES.get(status, "error")}
            )
    return out


def body(detail: Any, status: int) -> dict[str, Any]:
    items = detail if isinstance(detail, list) else [detail]
    return {"detail": clean(items, status)}


METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def allowed_methods(request: Request) -> list[str]:
    """Every method some route allows on this path (Starlette names only the first route's).

    Each method is probed through the routes' public ``matches``, so routers nested by
    ``include_router`` are searched as the app itself searches them.
    """
    routes = request.app.router.routes
    return [
        method
        for method in METHODS
        if any(route.matches({**request.scope, "method": method})[0] is Match.FULL for route in routes)
    ]


def install(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(body(list(exc.errors()), 422), status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def refused(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            methods = allowed_methods(request)
            if methods:
                headers["Allow"] = ", ".join(methods)
            detail: Any = f"method {request.method} not allowed; allowed: {headers.get('Allow', 'none')}"
        else:
            detail = exc.detail
        return JSONResponse(body(detail, exc.status_code), status_code=exc.status_code, headers=headers)

    @app.exception_handler(Refused)
    async def not_done(request: Request, exc: Refused) -> JSONResponse:
        loc = LOCS.get(exc.status, []) if exc.loc is None else list(exc.loc)
        detail = [{"loc": loc, "msg": exc.reason, "type": TYPES.get(exc.status, "refused")}]
        retry = exc.retry_after or RETRY_AFTER_S
        headers = {"Retry-After": str(retry)} if exc.status == 503 else None
        return JSONResponse(body(detail, exc.status), status_code=exc.status, headers=headers)

    @app.exception_handler(StoreLocked)
    async def locked(request: Request, exc: StoreLocked) -> JSONResponse:
        # a store being opened in a thread is a moment's wait, not a fault
        say = log.info if isinstance(exc, StoreOpening) else log.error
        say("%s %s: %s", request.method, request.url.path, exc)
        detail = [{"loc": [], "msg": f"{exc}; retry later", "type": TYPES[503]}]
        return JSONResponse(body(detail, 503), status_code=503, headers={"Retry-After": str(RETRY_AFTER_S)})

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return JSONResponse(body("internal error; see the server log", 500), status_code=500)


def responses(*statuses: int, json_content: bool = False) -> dict[int | str, dict[str, Any]]:
    """OpenAPI entries for the refusals a route can answer, all with the one error schema.

    ``json_content`` spells the content out as JSON, for a route whose own answers are not JSON
    (FastAPI would document a ``model`` under the route's media type).
    """
    words = {
        400: "Malformed request: a body that cannot be parsed, or a Host not in ENGRAM_ALLOWED_HOSTS",
        401: "No bearer token, or one that is not valid (expired, wrong signature, unknown issuer)",
        403: "The token's principal may not make this change (see the README's authorisation rules)",
        404: "Not found (a tenant the token is not for is not found either)",
        405: "Method not allowed; the Allow header lists the methods of the path",
        406: "No result format the Accept header names",
        408: "The request body did not arrive within ENGRAM_BODY_TIMEOUT_S",
        409: "Conflict: the id exists, the idempotency key was reused with other content, "
        "or the projection rejected the event",
        413: "The request body is over ENGRAM_MAX_BODY_BYTES, or the event over the broker's message size",
        422: "Invalid input",
        429: "Over ENGRAM_RATE_LIMIT_PER_S for this principal: retry after Retry-After seconds",
        431: "Request line and headers over ENGRAM_MAX_HEADER_BYTES",
        503: "The event log, or a tenant's store, is unavailable (Retry-After says when to retry)",
        504: "Accepted, but not applied within ENGRAM_WAIT_TIMEOUT_S",
    }
    if json_content:
        schema = {"$ref": "#/components/schemas/ErrorBody"}
        return {
            s: {"description": words[s], "content": {"application/json": {"schema": schema}}}
            for s in statuses
        }
    return {s: {"model": ErrorBody, "description": words[s]} for s in statuses}
