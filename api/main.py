"""The FastAPI app: routers, the runtime started in the lifespan, request limits, one error shape.

The runtime comes from the caller (``engram.process.running`` for ``engram serve``): the API reads
it and does not compose the process that runs the projector.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

from engram.api import errors
from engram.api.auth import Verifier
from engram.api.bodies import JsonBodies, body_only_if_taken
from engram.api.console import mount as mount_console
from engram.api.deps import known_query_only
from engram.api.limits import AllowedHosts, Charges, RateLimits, RequestLimits
from engram.api.mcp import http as mcp_http
from engram.api.metrics import Timed
from engram.api.routes import (
    associations,
    conversations,
    decisions,
    events,
    graph,
    health,
    legal_holds,
    live_data,
    memories,
    metrics,
    onboarding,
    plans,
    proposals,
    recall,
    sessions,
    snapshots,
    sparql,
    verbs,
)
from engram.api.routing import Routed
from engram.api.runtime import Runtime
from fastapi import Depends, FastAPI
from fastapi_offline import FastAPIOffline

from engram.settings import Settings

log = logging.getLogger(__name__)

# starts the runtime for the app's lifespan and stops it after
Running = Callable[[Settings], AbstractAsyncContextManager[Runtime]]


def create_app(settings: Settings, running: Running) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with running(settings) as runtime, mcp.running():
            app.state.runtime = runtime
            yield

    app = FastAPIOffline(  # /docs and /redoc from the package's own assets: no CDN, works offline
        title="engram",
        summary="Governed, reasoning memory for AI agents",
        version="0.1.0",
        lifespan=lifespan,
        responses=errors.responses(400, 408, 413, 431),  # any request: Host, body time and size, head size
        dependencies=[Depends(known_query_only), Depends(body_only_if_taken)],
    )
    app.state.verifier = Verifier(settings)
    app.state.rate_limits = RateLimits(
        settings.rate_limit_per_s, settings.rate_limit_burst, cost_s=settings.rate_limit_cost_ms / 1000
    )
    routers = (health, memories, legal_holds, live_data, graph, sparql, recall, events, snapshots, verbs)
    routers += (sessions, decisions, associations, plans)  # agent work (issue 24)
    routers += (proposals,)  # capture (issue 25)
    routers += (onboarding,)  # a new tenant's spine (issue 25)
    routers += (conversations,)  # capture (issue 25)
    routers += (metrics,)  # Prometheus (issue 28)
    for router in (module.router for module in routers):
        app.include_router(router)
    mcp = mcp_http.mount(app)  # MCP over streamable HTTP at /mcp: the tools call the routes above
    mount_console(app)  # the operator console at /console: its pages call the routes above (issue 29)
    errors.install(app)
    # Outermost last: the Host is checked first, then the body's size and time, then the
    # tenant's owner (forwarded there), then what the request costs (its JSON reading included).
    app.add_middleware(JsonBodies)
    app.add_middleware(Charges, limits=app.state.rate_limits)
    app.add_middleware(Routed)  # a tenant another process owns: forwarded there, charged there
    app.add_middleware(
        RequestLimits, max_body_bytes=settings.max_body_bytes, body_timeout_s=settings.body_timeout_s
    )
    app.add_middleware(AllowedHosts, allowed_hosts=settings.allowed_host_list)
    app.add_middleware(Timed)  # outermost: every request is timed, refused ones included
    return app
