"""Any process answers any tenant: a request for a tenant another process of the consumer group
owns is forwarded to it, and its answer returned as is.

The owner is the member assigned the tenant's partition (``streams.group``, from Faust's assignor):
it alone holds the tenant's store, so reads and the writes' pre-checks (``commands``) are answered
there. The request goes unchanged (method, path, query with any ``?after=`` position, body, every
header but the hop-by-hop ones, so the bearer token too) and the owner answers it under its own
rules; a write the client saw is waited for by the owner, wherever it was accepted.

While the tenant's partition is moving (a rebalance), or is catching up on the log after a move,
the request waits up to ``ENGRAM_ROUTE_WAIT_S``, then is answered 503 with ``Retry-After``. A
forwarded request carries ``X-Engram-Forwarded``; a process that receives one for a tenant it does
not own answers 503 too (the two processes disagree on the assignment for a moment): no loops.
"""

from __future__ import annotations

import logging
import re

import httpx
from engram.api import errors
from engram.schemas import vocabulary as v
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger(__name__)

FORWARDED = "x-engram-forwarded"
OWNER = b"x-engram-owner"  # on a forwarded request's answer: which process answered it
TENANT_PATH = re.compile(r"^/v1/tenants/([^/]+)(?:/|$)")
# not passed on: they describe one connection, not the request
HOP_BY_HOP = {
    b"connection", b"keep-alive", b"proxy-authenticate", b"proxy-authorization", b"te", b"trailer",
    b"transfer-encoding", b"upgrade", b"content-length",
}  # fmt: skip
PASSED_BACK = HOP_BY_HOP - {b"content-length"}  # the owner's body is relayed as it sent it
RETRY_AFTER_S = 1


def unavailable(msg: str) -> JSONResponse:
    return JSONResponse(
        errors.body({"loc": ["path", "tenant"], "msg": msg, "type": "unavailable"}, 503),
        status_code=503,
        headers={"Retry-After": str(RETRY_AFTER_S)},
    )


class Routed:
    """Sends each request for a tenant to the process that owns it (pure ASGI: streams pass through)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._client: httpx.AsyncClient | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        match = TENANT_PATH.match(scope.get("path", "")) if scope["type"] == "http" else None
        runtime = getattr(scope["app"].state, "runtime", None) if match else None
        membership = getattr(runtime, "membership", None)
        if match is None or membership is None or not v.full_match(v.TENANT_RE, match.group(1)):
            await self.app(scope, receive, send)  # not a tenant's, or a bad id the routes refuse
            return
        tenant, settings = match.group(1), runtime.settings  # type: ignore[union-attr]
        url = await membership.owner(tenant, settings.route_wait_s)
        if url == membership.url:
            await self.app(scope, receive, send)
            return
        if url is None:
            await unavailable(
                f"tenant {tenant!r} is moving between processes or catching up on the log; retry shortly"
            )(scope, receive, send)
            return
        if any(k == FORWARDED.encode() for k, _ in scope["headers"]):
            await unavailable(
                f"tenant {tenant!r} was forwarded here but is owned by {url}: the group is rebalancing"
            )(scope, receive, send)
            return
        if not url.startswith(("http://", "https://")):
            await unavailable(
                f"tenant {tenant!r} is owned by {url}, a worker that serves no HTTP (run `engram serve` "
                "in every process that reads go through, or give the worker ENGRAM_ADVERTISED_URL)"
            )(scope, receive, send)
            return
        await self._forward(url, membership.url, scope, receive, send, settings.wait_timeout_s)

    async def _forward(
        self, owner: str, me: str, scope: Scope, receive: Receive, send: Send, wait_s: float
    ) -> None:
        body = bytearray()
        while True:  # the body's size and time are bounded by the limits in front of this
            message: Message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        headers = [(k, val) for k, val in scope["headers"] if k.lower() not in HOP_BY_HOP]
        headers.append((FORWARDED.encode(), me.encode()))
        path = scope.get("raw_path") or scope["path"].encode()
        target = owner + path.decode("latin-1")
        if scope.get("query_string"):
            target += "?" + scope["query_string"].decode("latin-1")
        if self._client is None:
            # a `?wait=true` or `?after=` read may take ENGRAM_WAIT_TIMEOUT_S at the owner
            timeout = httpx.Timeout(wait_s + 10.0, connect=2.0)
            self._client = httpx.AsyncClient(timeout=timeout, follow_redirects=False)
        request = self._client.build_request(scope["method"], target, headers=headers, content=bytes(body))
        try:
            response = await self._client.send(request, stream=True)
        except httpx.HTTPError as exc:
            log.warning("forwarding to %s failed: %s", owner, exc)
            why = f"the tenant's owner {owner} did not answer ({type(exc).__name__}); retry shortly"
            await unavailable(why)(scope, receive, send)
            return
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": response.status_code,
                    "headers": [(k, val) for k, val in response.headers.raw if k.lower() not in PASSED_BACK]
                    + [(OWNER, owner.encode())],
                }
            )
            async for chunk in response.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            await response.aclose()
