"""The FastAPI app: routers collected, the runtime started in the lifespan, errors as 4xx reasons."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from api.routes import graph, health, kpis, memories
from api.runtime import running
from engram.settings import Settings

log = logging.getLogger(__name__)


def create_app(settings: Settings) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with running(settings) as runtime:
            app.state.runtime = runtime
            yield

    app = FastAPI(
        title="engram",
        summary="Governed, reasoning memory for AI agents",
        version="0.1.0",
        lifespan=lifespan,
    )
    for router in (health.router, memories.router, kpis.router, graph.router):
        app.include_router(router)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return JSONResponse({"detail": "internal error; see the server log"}, status_code=500)

    return app
