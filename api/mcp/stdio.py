"""MCP over stdio (``engram mcp``): the tools call an engram API at a URL with one bearer token.

The tenant is the token's (read from its claims to build the route; the API verifies the token on
every call and refuses one it does not accept with its reason). Nothing but the protocol is
written to stdout.
"""

from __future__ import annotations

from typing import Any

import httpx
import jwt
from engram.api.mcp.server import ApiError, Caller, build_server
from mcp.server.stdio import stdio_server

DEFAULT_URL = "http://127.0.0.1:8000"


def token_tenant(token: str) -> str:
    """The tenant a token names, unverified (the API verifies it); ApiError if it names none."""
    try:
        claims: dict[str, Any] = jwt.decode(token, options={"verify_signature": False})
    except jwt.PyJWTError as exc:
        raise ApiError(401, f"ENGRAM_TOKEN is not a token the API can accept: {exc}") from exc
    tenant = claims.get("tenant")
    if not isinstance(tenant, str) or not tenant:
        raise ApiError(401, "ENGRAM_TOKEN names no tenant (claim 'tenant')")
    return tenant


async def serve_stdio(url: str, token: str, *, timeout_s: float = 60.0) -> None:
    async with httpx.AsyncClient(base_url=url.rstrip("/"), timeout=timeout_s) as client:

        async def caller() -> Caller:
            return Caller(client, token, token_tenant(token))

        server = build_server(caller)
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())
