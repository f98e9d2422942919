"""The operator console: the API's own routes in a browser, for the people who curate memory.

Served by the same app at ``/console`` (``mount``). Pages are rendered on the server from the
answers of the tenant's routes, called in process with the signed-in principal's own bearer token,
so the console has no authorisation of its own: what the API refuses, the console cannot do, and it
shows the API's refusal as it was given.
"""

from __future__ import annotations

from typing import Any

from engram.api.console import curation, pages
from engram.api.console.app import HERE, Console
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.staticfiles import StaticFiles


def mount(api: Any) -> Console:
    """Serve the console at ``/console`` of ``api`` (the FastAPI app whose routes it calls)."""
    console = Console(api)
    routes = [*pages.routes(console), *curation.routes(console)]
    routes.append(Mount("/static", StaticFiles(directory=HERE / "static"), name="static"))
    api.mount("/console", Starlette(routes=routes))
    return console
