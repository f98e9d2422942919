"""The app in process without its lifespan (no broker): a stand-in runtime that knows no tenant,
so every request is decided at the edge; a write that passes every check is answered 503."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from aiokafka.errors import KafkaConnectionError
from engram.api.auth import mint
from engram.api.main import create_app
from engram.commands.writes import Commands
from engram.projections.knowledge import load_knowledge
from engram.streams.embedder import load_embedder
from fastapi.testclient import TestClient

from engram.process import running
from engram.settings import load_settings


class NoLog:
    """No broker here: a write that passes every check is answered 503, never silently 202."""

    write_timeout_s = 1.0

    async def enqueue(self, event: Any) -> Any:
        raise KafkaConnectionError("no broker in the edge tests")


SECRET = "edge-tests-secret-of-at-least-32-bytes"


def client(stores: Any = None, **overrides: Any) -> TestClient:
    """The app with a stand-in runtime, speaking as acme's operator unless a request says otherwise;
    ``stores`` replaces the stand-in that knows no tenant."""
    settings = load_settings(auth_secret=SECRET, **overrides)
    app = create_app(settings, running)  # the lifespan never runs here: the stand-in replaces it
    if stores is None:
        stores = SimpleNamespace(get=lambda tenant: None, knowledge=load_knowledge(), keys=None)
    progress = SimpleNamespace(last_offset={})
    embedder = load_embedder("hashing")
    app.state.runtime = SimpleNamespace(
        stores=stores,
        progress=progress,
        settings=load_settings(),
        embedder=embedder,
        commands=Commands(stores, NoLog(), progress, progress, embedder, 1.0),  # type: ignore[arg-type]
    )
    token = mint(settings, "acme", role="operator", user="dana")
    return TestClient(app, raise_server_exceptions=False, headers={"Authorization": f"Bearer {token}"})
