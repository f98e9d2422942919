"""What MCP costs per call over plain HTTP, side by side in one run.

One `engram serve` (real broker, its own topics) holding ``--memories`` memories of one tenant;
then the same recall calls, interleaved call by call so both paths see the same server state:
  - http: ``POST …/recall`` through httpx (one keep-alive connection);
  - mcp_http: the ``recall`` tool through the SDK's own client over streamable HTTP at ``/mcp/``
    (one session; the tool calls the route in process through httpx's ASGI transport);
  - mcp_stdio: the same tool through ``engram mcp`` spawned over stdio (it calls the API by HTTP).
Latency is the client's wall clock per call (the SDK's result parsing included). The overhead is
each MCP path's p50/p95 minus plain HTTP's. Prints one JSON object; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import httpx
from engram.streams import kafka_local
from engram.streams.topics import ensure_topics
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from engram.settings import load_settings
from tests.harness import Server, isolated_settings, settings_env

TENANT = "bench-mcp"
TOPICS = ["budget", "brand voice", "meta ads", "roas target", "launch plan", "audience", "creative"]
QUERIES = [
    "what is the monthly budget for meta ads?",
    "how should the brand voice sound?",
    "which audience do we target for the launch?",
    "what ROAS do we aim for this quarter?",
]


def say(msg: str) -> None:
    print(f"[mcp overhead] {msg}", file=sys.stderr, flush=True)


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return round(s[min(len(s) - 1, round(p * (len(s) - 1)))], 3)


def stats(ms: list[float]) -> dict[str, float]:
    return {"p50": pct(ms, 0.5), "p95": pct(ms, 0.95), "mean": round(statistics.fmean(ms), 3)}


async def seed(server: Server, headers: dict[str, str], n: int) -> None:
    async with httpx.AsyncClient(base_url=server.url, headers=headers, timeout=60) as client:
        for i in range(n):
            topic = TOPICS[i % len(TOPICS)]
            body = {
                "label": f"{topic.title()} note {i}",
                "content": f"Note {i} about the {topic}: decided in review {i // 7}, owner team {i % 5}.",
                "kind": "fact",
                "importance": 2 + i % 4,
                "source": "operator",
            }
            r = await client.post(f"/v1/tenants/{TENANT}/memories", json=body, params={"wait": i == n - 1})
            r.raise_for_status()


async def measure(server: Server, token: str, calls: int, warmup: int) -> dict[str, list[float]]:
    headers = {"Authorization": f"Bearer {token}"}
    async with AsyncExitStack() as stack:
        client = httpx.AsyncClient(base_url=server.url, headers=headers, timeout=60)
        plain = await stack.enter_async_context(client)
        mcp_client = await stack.enter_async_context(httpx.AsyncClient(headers=headers, timeout=60))
        read, write, _ = await stack.enter_async_context(
            streamable_http_client(f"{server.url}/mcp/", http_client=mcp_client)
        )
        over_http = await stack.enter_async_context(ClientSession(read, write))
        await over_http.initialize()
        env = {**os.environ, **settings_env(server.settings), "ENGRAM_TOKEN": token, "ENGRAM_URL": server.url}
        params = StdioServerParameters(command=sys.executable, args=["-m", "engram.cli", "mcp"], env=env)
        errlog = stack.enter_context(open(os.devnull, "w"))  # noqa: SIM115 (closed by the stack)
        sread, swrite = await stack.enter_async_context(stdio_client(params, errlog=errlog))
        over_stdio = await stack.enter_async_context(ClientSession(sread, swrite))
        await over_stdio.initialize()
        await over_http.list_tools()
        await over_stdio.list_tools()

        async def http_call(q: str) -> None:
            r = await plain.post(f"/v1/tenants/{TENANT}/recall", json={"q": q, "limit": 10})
            r.raise_for_status()
            r.json()

        def tool(session: ClientSession) -> Callable[[str], Awaitable[None]]:
            async def call(q: str) -> None:
                result = await session.call_tool("recall", {"q": q, "limit": 10})
                if result.isError:
                    raise RuntimeError(result.content)

            return call

        paths = {"http": http_call, "mcp_http": tool(over_http), "mcp_stdio": tool(over_stdio)}
        out: dict[str, list[float]] = {name: [] for name in paths}
        for i in range(warmup + calls):
            q = QUERIES[i % len(QUERIES)]
            order = list(paths.items())
            order = order[i % 3 :] + order[: i % 3]  # rotate who goes first
            for name, fn in order:
                started = time.perf_counter()
                await fn(q)
                if i >= warmup:
                    out[name].append((time.perf_counter() - started) * 1e3)
        return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--memories", type=int, default=1000)
    ap.add_argument("--calls", type=int, default=500)
    ap.add_argument("--warmup", type=int, default=50)
    args = ap.parse_args()
    base = load_settings()
    kafka_local.start(base)
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
        settings = isolated_settings(base, Path(tmp) / "data")
        asyncio.run(ensure_topics(settings))
        server = Server(settings, Path(tmp) / "server.log").start()
        try:
            server.wait_ready()
            token = server.bearer(TENANT, role="operator")["Authorization"].removeprefix("Bearer ")
            say(f"seeding {args.memories} memories")
            asyncio.run(seed(server, {"Authorization": f"Bearer {token}"}, args.memories))
            say(f"{args.calls} recalls per path, interleaved")
            ms = asyncio.run(measure(server, token, args.calls, args.warmup))
        finally:
            server.stop()
    result: dict[str, Any] = {
        "bench": "mcp_overhead",
        "memories": args.memories,
        "calls": args.calls,
        "call": "recall {q, limit: 10}",
        "ms": {name: stats(values) for name, values in ms.items()},
    }
    http = result["ms"]["http"]
    result["overhead_ms"] = {
        name: {"p50": round(s["p50"] - http["p50"], 3), "p95": round(s["p95"] - http["p95"], 3)}
        for name, s in result["ms"].items()
        if name != "http"
    }
    result["target_ms"] = 5.0
    result["meets_target"] = result["overhead_ms"]["mcp_http"]["p50"] <= 5.0
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
