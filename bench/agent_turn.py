"""One scripted agent turn, through the SDK (plain HTTP) and through MCP streamable HTTP, side by side.

For each size in ``--sizes``: one `engram serve` (real broker, its own topics, the hashing embedder)
holding the demo tenant's events (a $40k Meta cap, $34k spent in 2026-11, ROAS target, brand
voice) and ``size`` more memories of that tenant, appended by `engram produce --no-embed` (found
by BM25 only; the build rate, produce to applied, is reported). Then ``--turns`` turns, the two
paths interleaved turn by turn (who goes first alternates) so both see the same server state. A
turn is the five calls an agent makes for one request, as an agent principal acting for a user:

  context(q) → recall(q, limit 5) → check_plan(spend meta 8,000 2026-11) →
  remember(a user-scoped MarketingMemory) → record_decision(citing the cap and the spend)

The SDK path is ``engram_client.AsyncEngram`` (one keep-alive connection); the MCP path is the
official ``mcp`` client over streamable HTTP at ``/mcp/`` (one session). Neither path's writes
wait for the projection: each is answered once the log has it (202, its position), and
read-your-writes rides on ``after=``: the SDK client and the MCP session each keep their last
write's position and send it with the next turn's ``context`` read, which answers once the graph
has it (so the two paths do the same work, and a turn sees the previous turn's writes). With
``--wait`` both paths' writes wait until applied instead (``wait=True`` / ``wait: true``), the
turn as it was measured before, for a comparison under the same conditions. Latency
is the client's wall clock, its parsing included. Prints one JSON object: p50/p95/mean per call
and per turn for each path, MCP's overhead per call (p50/p95 of MCP minus the SDK's) and the
targets. Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import httpx
from engram.api.auth import mint
from engram.streams import kafka_local
from engram.streams.topics import ensure_topics
from engram_client import AsyncEngram
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from engram.console.stack import demo_envelopes
from engram.settings import load_settings
from tests.harness import Server, isolated_settings, settings_env

TENANT = "acme"
USER = "dana"
TOPICS = ["meta ads", "brand voice", "launch plan", "audience", "creative", "roas", "search ads"]
REQUESTS = [
    "put another 8000 into meta for the holiday push",
    "should we raise the meta budget this month?",
    "draft three headlines for the launch",
    "how is roas doing against the target?",
]
SPEND = {"platform": "meta", "amount": 8000, "currency": "USD", "period": "2026-11"}
CALLS = ("context", "recall", "check_plan", "remember", "record_decision")


def say(msg: str) -> None:
    print(f"[agent turn] {msg}", file=sys.stderr, flush=True)


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return round(s[min(len(s) - 1, round(p * (len(s) - 1)))], 2)


def stats(ms: list[float]) -> dict[str, float]:
    return {"p50": pct(ms, 0.5), "p95": pct(ms, 0.95), "mean": round(statistics.fmean(ms), 2)}


def memories_file(path: Path, n: int) -> None:
    """The demo tenant's events (its onboarding's writes, which hold the Meta cap, then
    engram/demo/acme.jsonl), then ``n`` company memories of the same tenant."""
    with path.open("w") as out:
        out.writelines(json.dumps(envelope) + "\n" for envelope in demo_envelopes(TENANT))
        for i in range(n):
            topic = TOPICS[i % len(TOPICS)]
            event = {
                "type": "MemoryRemembered",
                "tenant": TENANT,
                "source": "operator",
                "actor": {"id": USER, "role": "operator"},
                "payload": {
                    "memory_id": f"bench-{i}",
                    "label": f"{topic.title()} note {i}",
                    "content": f"Note {i} about {topic}: decided in review {i // 7}, owner team {i % 5}.",
                    "kind": "fact",
                    "scope": "company",
                    "importance": 2 + i % 3,
                },
            }
            out.write(json.dumps(event) + "\n")


def build(server: Server, tmp: Path, n: int) -> dict[str, Any]:
    """Append the memories with `engram produce --no-embed` and wait until every one is applied."""
    path = tmp / f"memories-{n}.jsonl"
    memories_file(path, n)
    env = {**os.environ, **settings_env(server.settings)}
    started = time.perf_counter()
    argv = [sys.executable, "-m", "engram.cli", "produce", str(path), "--no-embed"]
    subprocess.run(argv, env=env, check=True, capture_output=True)
    produced = time.perf_counter() - started
    server.wait_ready(timeout=24 * 3600, interval=0.5)
    applied = time.perf_counter() - started
    return {
        "events": n + len(demo_envelopes(TENANT)),
        "produce_s": round(produced, 1),
        "applied_s": round(applied, 1),
        "applied_per_s": round(n / applied),
    }


async def measure(
    server: Server, token: str, turns: int, warmup: int, wait: bool = False
) -> dict[str, dict[str, list[float]]]:
    headers = {"Authorization": f"Bearer {token}"}
    async with AsyncExitStack() as stack:
        sdk = await stack.enter_async_context(AsyncEngram(server.url, token))
        http = await stack.enter_async_context(httpx.AsyncClient(headers=headers, timeout=60))
        read, write, _ = await stack.enter_async_context(
            streamable_http_client(f"{server.url}/mcp/", http_client=http)
        )
        mcp = await stack.enter_async_context(ClientSession(read, write))
        await mcp.initialize()
        names = {t.name for t in (await mcp.list_tools()).tools}
        missing = {"get_context", "recall", "check_plan", "remember", "record_decision"} - names
        assert not missing, f"the MCP server does not serve {missing}"

        async def sdk_turn(i: int, q: str, ms: dict[str, list[float]]) -> None:
            async def timed(name: str, coro: Any) -> Any:
                t = time.perf_counter()
                out = await coro
                ms[name].append((time.perf_counter() - t) * 1e3)
                return out

            await timed("context", sdk.context(q))  # after= the previous turn's last write
            await timed("recall", sdk.recall(q, limit=5))
            plan = await timed("check_plan", sdk.check_plan(spend=SPEND))
            assert plan.ok is False, plan
            wish = await timed(
                "remember",
                sdk.remember(
                    f"Request {i} (sdk)",
                    f"{USER} asked: {q}.",
                    kind="objective",
                    importance=3,
                    memory_class="MarketingMemory",
                    scope="user",
                    user_id=USER,
                    wait=wait,
                ),
            )
            assert wish.applied is wait, wish  # answered on append unless asked to wait
            await timed(
                "record_decision",
                sdk.record_decision(
                    f"Hold the 8,000 for turn {i}: it breaches the Meta cap.",
                    relied_on=["meta-cap", wish.memory_id],
                    live_data=["spend:meta:USD:2026-11"],
                    wait=wait,
                ),
            )

        async def mcp_turn(i: int, q: str, ms: dict[str, list[float]]) -> None:
            async def call(name: str, tool: str, args: dict[str, Any]) -> dict[str, Any]:
                t = time.perf_counter()
                result = await mcp.call_tool(tool, args)
                ms[name].append((time.perf_counter() - t) * 1e3)
                if result.isError:
                    raise RuntimeError(f"{tool}: {result.content}")
                return result.structuredContent or {}

            await call("context", "get_context", {"q": q})
            await call("recall", "recall", {"q": q, "limit": 5})
            plan = await call("check_plan", "check_plan", {"spend": SPEND})
            assert plan.get("ok") is False, plan
            wish = await call(
                "remember",
                "remember",
                {
                    "label": f"Request {i} (mcp)",
                    "content": f"{USER} asked: {q}.",
                    "kind": "objective",
                    "importance": 3,
                    "memory_class": "MarketingMemory",
                    "scope": "user",
                    "stakeholders": {"user_id": USER},
                    "wait": wait,
                },
            )
            assert wish.get("applied") is wait, wish  # answered on append unless asked to wait
            await call(
                "record_decision",
                "record_decision",
                {
                    "decision": f"Hold the 8,000 for turn {i}: it breaches the Meta cap.",
                    "relied_on": ["meta-cap", wish["memory_id"]],
                    "live_data": ["spend:meta:USD:2026-11"],
                    "wait": wait,
                },
            )

        paths = {"sdk": sdk_turn, "mcp_http": mcp_turn}
        out: dict[str, dict[str, list[float]]] = {p: {c: [] for c in (*CALLS, "turn")} for p in paths}
        for i in range(warmup + turns):
            q = REQUESTS[i % len(REQUESTS)]
            order = list(paths.items()) if i % 2 == 0 else list(reversed(paths.items()))
            for name, fn in order:
                scratch: dict[str, list[float]] = {c: [] for c in CALLS}
                started = time.perf_counter()
                await fn(i, q, scratch)
                took = (time.perf_counter() - started) * 1e3
                if i >= warmup:
                    for c in CALLS:
                        out[name][c] += scratch[c]
                    out[name]["turn"].append(took)
        return out


def run_size(base: Any, n: int, turns: int, warmup: int, wait: bool = False) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
        settings = isolated_settings(base, Path(tmp) / "data", partitions=1)
        asyncio.run(ensure_topics(settings))
        os.environ["ENGRAM_EMBEDDER"] = "hashing"  # the server's, for recall and context queries
        server = Server(settings, Path(tmp) / "server.log").start()
        try:
            server.wait_ready()
            say(f"{n} memories: building")
            built = build(server, Path(tmp), n)
            say(f"{n} memories: built {built}; {turns} turns per path, interleaved")
            token = mint(settings, TENANT, role="agent", user="assistant", on_behalf_of=USER)
            ms = asyncio.run(measure(server, token, turns, warmup, wait))
        finally:
            server.stop()
    result: dict[str, Any] = {"memories": n, "build": built, "turns": turns, "writes_wait": wait}
    result["ms"] = {path: {c: stats(v) for c, v in calls.items()} for path, calls in ms.items()}
    sdk, over = result["ms"]["sdk"], result["ms"]["mcp_http"]
    result["mcp_overhead_ms"] = {
        c: {"p50": round(over[c]["p50"] - sdk[c]["p50"], 2), "p95": round(over[c]["p95"] - sdk[c]["p95"], 2)}
        for c in CALLS
    }
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,100000", help="memories per run, comma-separated")
    ap.add_argument("--turns", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--wait", action="store_true", help="writes wait until applied (the old turn)")
    args = ap.parse_args()
    base = load_settings()
    kafka_local.start(base)
    runs = [run_size(base, int(n), args.turns, args.warmup, args.wait) for n in args.sizes.split(",")]
    largest = runs[-1]
    result = {
        "bench": "agent_turn",
        "embedder": "hashing",
        "turn": " -> ".join(CALLS),
        "runs": runs,
        "targets": {"turn_p95_ms_mcp_at_100k": 100.0, "mcp_overhead_ms_per_call": 5.0},
        "largest": largest["memories"],
        "turn_p95_mcp_ms": largest["ms"]["mcp_http"]["turn"]["p95"],
        "max_overhead_p50_ms": max(v["p50"] for v in largest["mcp_overhead_ms"].values()),
    }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
