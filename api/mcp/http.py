"""MCP over streamable HTTP, mounted in the API at ``/mcp``.

Every request to ``/mcp`` carries a bearer token, verified as the API's routes verify it (401 with
the reason otherwise). A session belongs to the principal that opened it (tenant, subject, role): a
request naming another principal's session, or one this process does not know, is answered 404 as
an unknown session, so a session never crosses tenants. Tool calls reach the app's own routes in
process (httpx's ASGI transport) with the request's own token: the tenant is always the token's,
never an argument's.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
from engram.api.auth import BadToken, Claims, Verifier
from engram.api.deps.principal import unauthorized
from engram.api.errors import problem
from engram.api.limits import send_error
from engram.api.mcp.server import Caller, build_server
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.datastructures import Headers
from starlette.types import Message, Receive, Scope, Send

CLAIMS = "engram.mcp.claims"
TOKEN = "engram.mcp.token"
MAX_SESSIONS = 10_000  # the session manager's own default; a session past it must initialize again

Owner = tuple[str, str | None, str]  # tenant, subject, role


class McpHttp:
    """The ASGI app at ``/mcp``; ``running()`` is entered in the API's lifespan."""

    def __init__(self, app: Any) -> None:
        self.app = app  # the FastAPI app: its verifier, and its routes the tools call
        self.server = build_server(self._caller)
        self.manager: StreamableHTTPSessionManager | None = None
        self.client: httpx.AsyncClient | None = None
        self.sessions: OrderedDict[str, Owner] = OrderedDict()

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        # JSON answers (no SSE stream per call): the tools answer once, and it is the cheaper path
        self.manager = StreamableHTTPSessionManager(
            self.server, json_response=True, max_sessions=MAX_SESSIONS
        )
        transport = httpx.ASGITransport(app=self.app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://engram", timeout=None) as client:
            self.client = client
            async with self.manager.run():
                yield
        self.client, self.manager = None, None

    async def _caller(self) -> Caller:
        scope = self.server.request_context.request.scope  # type: ignore[union-attr]
        claims: Claims = scope[CLAIMS]
        assert self.client is not None
        host = Headers(scope=scope).get("host")
        return Caller(self.client, scope[TOKEN], claims.tenant, {"host": host} if host else {})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.manager is None:
            await send_error(send, problem(503, "the MCP endpoint is not running"))
            return
        headers = Headers(scope=scope)
        scheme, _, token = headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            await send_error(send, unauthorized("a bearer token is required (Authorization: Bearer <token>)"))
            return
        verifier: Verifier = self.app.state.verifier
        try:
            claims = verifier.verify(token.strip())
        except BadToken as exc:
            await send_error(send, unauthorized(str(exc)))
            return
        owner: Owner = (claims.tenant, claims.principal.subject, claims.principal.role.value)
        session = headers.get(MCP_SESSION_ID_HEADER)
        if session is not None and self.sessions.get(session) != owner:
            # another principal's session, or one this process does not know: the same answer
            await send_error(send, problem(404, "MCP session not found", ["header", MCP_SESSION_ID_HEADER]))
            return
        scope = {**scope, CLAIMS: claims, TOKEN: token.strip()}
        await self.manager.handle_request(scope, receive, self._binding(send, owner, scope["method"]))
        if session is not None and scope["method"] == "DELETE":
            self.sessions.pop(session, None)

    def _binding(self, send: Send, owner: Owner, method: str) -> Send:
        """``send``, recording the owner of a session the answer opens."""

        async def bound(message: Message) -> None:
            if message["type"] == "http.response.start" and method == "POST":
                opened = Headers(raw=message.get("headers", [])).get(MCP_SESSION_ID_HEADER)
                if opened is not None and opened not in self.sessions:
                    self.sessions[opened] = owner
                    while len(self.sessions) > MAX_SESSIONS:
                        self.sessions.popitem(last=False)
            await send(message)

        return bound


def mount(app: Any) -> McpHttp:
    """Mount the MCP endpoint at ``/mcp`` of ``app`` (a FastAPI app); enter ``running()`` in its
    lifespan."""
    endpoint = McpHttp(app)
    app.mount("/mcp", endpoint)
    return endpoint
