"""Times every HTTP request into ``engram_http_request_seconds`` by method, route template and
status class: the template (``/v1/tenants/{tenant}/memories``), never the path, so no tenant id
becomes a label and the series stay as many as the app has routes."""

from __future__ import annotations

import time
from typing import Any

from engram import metrics

METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def route_of(scope: dict[str, Any]) -> str:
    """The template of the route that answered (set in the scope by the router), ``/mcp`` for the
    mounted MCP app, ``other`` for a path no route matched."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    if isinstance(path, str):
        return path
    if str(scope.get("path", "")).startswith("/mcp"):
        return "/mcp"
    return metrics.OTHER


class Timed:
    """Pure ASGI middleware (no body buffering): the time from the request to its last byte sent."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = [500]

        async def sending(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status[0] = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            metrics.request_seconds.labels(
                metrics.bounded(scope.get("method"), METHODS), route_of(scope), f"{status[0] // 100}xx"
            ).observe(time.perf_counter() - started)
