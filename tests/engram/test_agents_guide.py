"""docs/agents.md, "Give your agent memory in five minutes", run as written against a real
`engram serve --demo` (as `./dev up` runs it; its readiness is the line it prints, as a user sees it,
not /readyz): every Python block in order in one namespace, each one's output compared with the
`text` block under it, and both MCP configs started as written."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from engram.api.auth import mint
from engram.streams.topics import ensure_topics
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from engram.settings import Settings
from tests.engram.test_docs import DemoServer
from tests.harness import isolated_settings

ROOT = Path(__file__).resolve().parents[2]
GUIDE = (ROOT / "docs" / "agents.md").read_text()


def agent_token(settings: Settings) -> str:
    """What the guide's `engram token acme --role agent --user assistant --on-behalf-of dana` mints."""
    return mint(settings, "acme", role="agent", user="assistant", on_behalf_of="dana")


def up_demo(broker: Settings, root: Path) -> DemoServer:
    """`engram serve --demo` on a private slice of the broker, ready once it says so."""
    settings = isolated_settings(broker, root / "data")
    asyncio.run(ensure_topics(settings))
    server = DemoServer(settings, root / "server.log").start()
    deadline = time.monotonic() + 180
    while "engram is up on" not in server.log_path.read_text(errors="replace"):
        if server.proc is None or server.proc.poll() is not None or time.monotonic() > deadline:
            server.stop()
            raise RuntimeError(f"the demo server did not come up: {server.log_path.read_text()[-3000:]}")
        time.sleep(0.1)
    # the line comes once the seed is appended, not applied: wait for the cap's status (a read, not
    # /readyz, whose lag check would warm the metadata a fresh server's `context?after=` needs)
    while "budgetStatus" not in server.http.get(f"{server.url}/v1/tenants/acme/memories/meta-cap").text:
        if time.monotonic() > deadline:
            server.stop()
            raise RuntimeError("the demo tenant was not applied")
        time.sleep(0.1)
    return server


@pytest.fixture(scope="module")
def demo(broker: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoServer]:
    server = up_demo(broker, tmp_path_factory.mktemp("guide"))
    yield server
    server.stop()


def sections() -> list[tuple[str, str]]:
    """The guide's fenced blocks in order: (language, text)."""
    return re.findall(r"^```(\w*)\n(.*?)^```", GUIDE, re.M | re.S)


def runs() -> list[tuple[str, str | None]]:
    """Each Python block with the `text` block right after it (what it prints), if any."""
    blocks = sections()
    out: list[tuple[str, str | None]] = []
    for i, (lang, text) in enumerate(blocks):
        if lang == "python":
            after = blocks[i + 1] if i + 1 < len(blocks) else ("", "")
            out.append((text, after[1] if after[0] == "text" else None))
    return out


def matches(expected: str, printed: str) -> bool:
    """`…` in the guide stands for any text (ids, times, positions)."""
    pattern = "".join(".*?" if part == "…" else re.escape(part) for part in re.split("(…)", expected.strip()))
    return re.fullmatch(pattern, printed.strip(), re.S) is not None


def example_output() -> str:
    """What the guide says examples/agent_loop.py prints (tests/examples checks it)."""
    (printed,) = [text for lang, text in sections() if lang == "text" and text.startswith("1 context:")]
    return printed


def test_the_guide_reads_as_the_test_expects() -> None:
    blocks = runs()
    assert len(blocks) >= 5 and all(printed for _, printed in blocks), "every Python block shows its output"
    code = "".join(code for code, _ in blocks)
    for verb in ("remember(", "context(", "recall(", "check_plan", "record_decision(", "EngramRetriever"):
        assert verb in code, verb
    assert "docs/agents.md" in (ROOT / "README.md").read_text()
    assert "(docs/agents.md)" in (ROOT / "README.md").read_text()


def test_the_guide_runs_as_written(demo: DemoServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENGRAM_URL", demo.url)
    monkeypatch.setenv("ENGRAM_TOKEN", agent_token(demo.settings))
    namespace: dict[str, object] = {"__name__": "guide"}
    for code, expected in runs():
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code, "docs/agents.md", "exec"), namespace)
        assert expected is not None
        assert matches(expected, out.getvalue()), f"{code}\nguide:\n{expected}\nprinted:\n{out.getvalue()}"


def configs() -> dict[str, dict[str, object]]:
    found = [json.loads(text)["mcpServers"]["engram"] for lang, text in sections() if lang == "json"]
    by_kind = {"http" if c.get("type") == "http" else "stdio": c for c in found}
    assert set(by_kind) == {"stdio", "http"}, found
    return by_kind


def test_the_mcp_configs_start_as_written(demo: DemoServer) -> None:
    token, config = agent_token(demo.settings), configs()

    def filled(value: str) -> str:
        return value.replace("<the agent's token>", token).replace("http://127.0.0.1:8000", demo.url)

    stdio = config["stdio"]
    assert stdio["args"] == ["mcp"] and str(stdio["command"]).endswith("/.venv/bin/engram")
    env = {**os.environ, **{k: filled(v) for k, v in stdio["env"].items()}}  # type: ignore[union-attr]
    assert set(stdio["env"]) == {"ENGRAM_URL", "ENGRAM_TOKEN"}  # type: ignore[arg-type]
    # this checkout's `engram` (the console script is `python -m engram.cli`)
    params = StdioServerParameters(command=sys.executable, args=["-m", "engram.cli", *stdio["args"]], env=env)  # type: ignore[misc]
    http = config["http"]
    headers = {k: filled(v) for k, v in http["headers"].items()}  # type: ignore[union-attr]

    async def tools() -> tuple[set[str], set[str]]:
        async with contextlib.AsyncExitStack() as stack:
            errlog = stack.enter_context(open(os.devnull, "w"))  # noqa: SIM115 (closed by the stack)
            read, write = await stack.enter_async_context(stdio_client(params, errlog=errlog))
            over_stdio = await stack.enter_async_context(ClientSession(read, write))
            await over_stdio.initialize()
            client = await stack.enter_async_context(httpx.AsyncClient(headers=headers))
            hread, hwrite, _ = await stack.enter_async_context(
                streamable_http_client(filled(str(http["url"])), http_client=client)
            )
            over_http = await stack.enter_async_context(ClientSession(hread, hwrite))
            await over_http.initialize()
            listed = [{t.name for t in (await s.list_tools()).tools} for s in (over_stdio, over_http)]
            return listed[0], listed[1]

    over_stdio, over_http = asyncio.run(tools())
    named = {"remember", "recall", "get_context", "check_plan", "record_decision", "justify"}
    assert named <= over_stdio and over_stdio == over_http
