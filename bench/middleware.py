"""What each layer around a route costs a request: the app as served, then without each of its own
middlewares in turn, side by side in one run.

Every request (a read of a page of memories, the cheapest route that authenticates, resolves its
dependencies and answers JSON) goes through the app in process over ASGI (``httpx.ASGITransport``:
no sockets, no uvicorn), with the stand-in runtime of the edge tests (``tests/api/stand_in.py``: no
broker, a tenant with no store). For each variant, ``--requests`` requests after a warm-up, in
``--rounds`` rounds interleaved across the variants; the median CPU µs per request (this process's
``thread_time``: the event loop's own work, what a busy server pays). A layer's cost is the full
stack's figure minus the variant without it. Prints one JSON object.

    .venv/bin/python -m bench.middleware --requests 2000 --rounds 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from typing import Any

import httpx
from starlette.middleware import Middleware

from tests.api.stand_in import client as stand_in

PATH = "/v1/tenants/acme/memories?limit=1&explain=false"


def app_without(name: str | None) -> Any:
    """The served app (stand-in runtime) without the middleware class ``name`` (None: whole)."""
    test_client = stand_in()
    app = test_client.app
    kept: list[Middleware] = [m for m in app.user_middleware if m.cls.__name__ != name]  # type: ignore[union-attr]
    app.user_middleware[:] = kept
    app.middleware_stack = None  # built again on the first request, from what is kept
    return app, dict(test_client.headers)


async def cpu_us_per_request(app: Any, headers: dict[str, str], requests: int) -> float:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1", headers=headers) as http:
        for _ in range(20):  # warm: the stack built, the route's models compiled
            r = await http.get(PATH)
            assert r.status_code == 200, r.text
        started = time.thread_time()
        for _ in range(requests):
            await http.get(PATH)
        return (time.thread_time() - started) / requests * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    names = [m.cls.__name__ for m in stand_in().app.user_middleware]  # type: ignore[union-attr]
    variants: dict[str, Any] = {"whole stack": app_without(None)}
    variants |= {f"without {name}": app_without(name) for name in names}
    runs: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.rounds):
        for name, (app, headers) in variants.items():
            runs[name].append(asyncio.run(cpu_us_per_request(app, headers, args.requests)))
    whole = statistics.median(runs["whole stack"])
    out = {
        "path": PATH,
        "requests": args.requests,
        "rounds": args.rounds,
        "middlewares_outermost_first": names,
        "cpu_us_per_request": {name: round(statistics.median(v), 1) for name, v in runs.items()},
        "layer_cost_us": {
            name.removeprefix("without "): round(whole - statistics.median(v), 1)
            for name, v in runs.items()
            if name != "whole stack"
        },
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
