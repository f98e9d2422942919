"""Request bodies: one strict reading of JSON for every route, and no body where a route takes none.

``JsonBodies`` reads a JSON request body (``application/json`` or ``…+json``) with
``schemas.jsontext.loads``, the reading ``engram produce`` uses too, before any route sees it: a body
that is not UTF-8 (UTF-16, UTF-32, a byte order mark, an invalid byte) or nests too deeply to read
is a 400; one that is not JSON, or repeats a key anywhere, is a 422 naming where. A body it
accepts is passed on byte for byte, so FastAPI's own ``json.loads`` reads the same document.
Being middleware, it covers every route, present and future, the SPARQL one included.
"""

from __future__ import annotations

from engram.api.errors import problem
from engram.api.limits import send_error
from engram.schemas import jsontext
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

STATUS = {"encoding": 400, "unreadable": 400, "syntax": 422, "repeated_key": 422}
TYPES = {
    "encoding": "not_utf8",
    "unreadable": "bad_request",
    "syntax": "json_invalid",
    "repeated_key": "repeated_key",
}


def is_json(content_type: str | None) -> bool:
    """The media types FastAPI reads as JSON."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    main, _, sub = media.partition("/")
    return main == "application" and (sub == "json" or sub.endswith("+json"))


class JsonBodies:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not is_json(Headers(scope=scope).get("content-type")):
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        while True:  # bounded in size and time by RequestLimits, outside this middleware
            message = await receive()
            if message["type"] != "http.request":
                await self.app(scope, _replay([], message, receive), send)  # the client left
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        data = b"".join(chunks)
        if data:
            try:
                jsontext.loads(data)
            except jsontext.NotJson as exc:
                item = {"loc": ["body", *exc.path], "msg": str(exc), "type": TYPES[exc.kind]}
                await send_error(send, HTTPException(STATUS[exc.kind], [item]))
                return
        await self.app(scope, _replay([data], None, receive), send)


def _replay(bodies: list[bytes], last: Message | None, receive: Receive) -> Receive:
    """A ``receive`` that gives the body already read, then what the client sends next."""
    pending: list[Message] = [{"type": "http.request", "body": b, "more_body": False} for b in bodies]
    if last is not None:
        pending.append(last)

    async def replayed() -> Message:
        return pending.pop(0) if pending else await receive()

    return replayed


async def body_only_if_taken(request: Request) -> None:
    """A route that takes no body refuses one (422), rather than answer as if it had been read.

    A tenant's route checks after the bearer token (``api.deps.get_principal`` calls this), so a
    caller without a token for the tenant learns nothing from it; any other route checks first."""
    route = request.scope.get("route")
    if route is None or getattr(route, "body_field", None) is not None:
        return
    if "tenant" in request.path_params and not request.scope.get(AUTHENTICATED):
        return
    if await request.body():
        raise problem(422, "this route takes no body; send none", ["body"], "body_not_allowed")


AUTHENTICATED = "engram.authenticated"  # set in the scope once the bearer token is verified
