"""The MCP server end to end: the SDK's own client against a real `engram serve` (real broker),
over both transports — stdio (`engram mcp` spawned with a token in its environment) and streamable
HTTP (`/mcp/` of the API, the request's bearer token the principal).

Every refusal is compared with what the HTTP API itself answers for the same request: a tool error
carries the API's status and reason, word for word.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import jwt
import pytest
from engram.api.mcp.server import Caller, Catalog, Position, call
from engram.api.mcp.verbs import VERBS
from engram.streams.topics import ensure_topics
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import McpError
from mcp.types import CallToolResult, TextContent

from engram.console.stack import demo_envelopes
from engram.settings import Settings
from tests.harness import Server, isolated_settings, settings_env

pytestmark = pytest.mark.integration

TRANSPORTS = ["stdio", "http"]
ACME, GLOBEX = "acme-mcp", "globex-mcp"
TOOLS = {
    "remember", "remember_many", "recall", "get_context", "get_memory", "list_memories", "lineage",
    "supersede", "forget",
    "recognize", "justify", "associate", "remove_association", "resolve", "summarise", "check_plan",
    "record_decision",
    "decisions_relying_on", "justify_decision", "start_session", "end_session", "record_episode",
    "record_tool_call", "episodes_in", "list_proposals", "decide_proposal",
}  # fmt: skip
META_8K = {"platform": "meta", "amount": 8000, "currency": "USD", "period": "2026-11"}
BREACH = "breaches meta-cap: spend 34,000 + 8,000 = 42,000 of cap 40,000 USD = 105%"


@pytest.fixture(scope="module")
def server(broker: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One server; ACME seeded with the demo tenant's events (engram/demo/acme.jsonl, its tenant
    renamed) through `engram produce`: the Meta cap 40,000 USD a month, 34,000 spent in 2026-11."""
    root = tmp_path_factory.mktemp("mcp")
    settings = isolated_settings(broker, root / "data")
    asyncio.run(ensure_topics(settings))
    srv = Server(settings, root / "server.log").start()
    srv.wait_ready()
    demo = root / "acme.jsonl"
    lines = demo_envelopes(ACME)  # its onboarding's writes, then engram/demo/acme.jsonl
    demo.write_text("".join(json.dumps(envelope) + "\n" for envelope in lines))
    produced = subprocess.run(
        [sys.executable, "-m", "engram.cli", "produce", str(demo)],
        env={**os.environ, **settings_env(settings)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert produced.returncode == 0 and f"produced {len(lines)} events" in produced.stdout, produced
    srv.wait_ready()  # the projector has handled every record in the log
    yield srv
    srv.stop()


def token(server: Server, tenant: str, *, role: str = "operator", user: str = "dana") -> str:
    return server.bearer(tenant, role=role, user=user)["Authorization"].removeprefix("Bearer ")


@asynccontextmanager
async def session(server: Server, transport: str, bearer: str) -> AsyncIterator[ClientSession]:
    """An initialized MCP client session as the principal of ``bearer``."""
    if transport == "http":
        headers = {"Authorization": f"Bearer {bearer}"}
        async with (
            httpx.AsyncClient(headers=headers, timeout=60) as client,
            streamable_http_client(f"{server.url}/mcp/", http_client=client) as (read, write, _),
            ClientSession(read, write) as s,
        ):
            await s.initialize()
            yield s
    else:
        env = {
            **os.environ,
            **settings_env(server.settings),
            "ENGRAM_TOKEN": bearer,
            "ENGRAM_URL": server.url,
        }
        params = StdioServerParameters(command=sys.executable, args=["-m", "engram.cli", "mcp"], env=env)
        with open(os.devnull, "w") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as s:
                await s.initialize()
                yield s


def run(server: Server, transport: str, bearer: str, body: Callable[[ClientSession], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        async with session(server, transport, bearer) as s:
            return await body(s)

    return asyncio.run(main())


def text(result: CallToolResult) -> str:
    [content] = result.content
    assert isinstance(content, TextContent)
    return content.text


def api_reason(response: httpx.Response) -> str:
    """The API's refusal as a tool error states it: the status, then each reason with where."""
    parts = []
    for item in response.json()["detail"]:
        loc = ".".join(str(x) for x in item["loc"])
        parts.append(item["msg"] + (f" ({loc})" if loc else ""))
    return f"{response.status_code}: " + "; ".join(parts)


def memory(label: str, **fields: Any) -> dict[str, Any]:
    return {"label": label, "content": f"{label}: kept for the MCP tests.", "kind": "fact", "importance": 5,
            "memory_class": "Memory", **fields}  # fmt: skip


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_tools_are_the_routes_own(server: Server, transport: str) -> None:
    """Every verb whose route exists is a tool; its schema is the route's (remember's: the
    ontology's memory tool); the context is a resource."""

    async def body(s: ClientSession) -> Any:
        return await s.list_tools(), await s.list_resources()

    tools, resources = run(server, transport, token(server, ACME), body)
    by_name = {t.name: t for t in tools.tools}
    assert set(by_name) == {v.name for v in VERBS} == TOOLS
    for verb in VERBS:
        assert by_name[verb.name].description == verb.description
        assert not {"source", "actor", "event_id", "tenant"} & set(by_name[verb.name].inputSchema)
    # a write tool takes wait (false unless given: answered on append); a read takes none
    for name in (
        "remember",
        "remember_many",
        "supersede",
        "forget",
        "record_decision",
        "associate",
        "start_session",
    ):
        wait = by_name[name].inputSchema["properties"]["wait"]
        assert wait["type"] == "boolean" and wait["default"] is False, name
    for name in ("recall", "get_memory", "justify", "check_plan", "get_context"):
        assert "wait" not in by_name[name].inputSchema["properties"], name
    assert "after" in by_name["get_context"].inputSchema["properties"]
    plan = by_name["check_plan"].inputSchema
    assert set(plan["properties"]) == {"spend", "target_change"} and "required" not in plan
    assert set(plan["$defs"]["PlannedSpendIn"]["required"]) == {"platform", "amount", "currency", "period"}
    resolve = by_name["resolve"].inputSchema
    assert resolve["required"] == ["policy"] and {"apply", "memory_ids"} <= set(resolve["properties"])
    assert "source" not in resolve["properties"]  # the MCP layer attributes it
    assert set(by_name["associate"].inputSchema["required"]) == {"from", "to", "relation"}
    assert set(by_name["record_tool_call"].inputSchema["required"]) == {
        "session_id", "tool", "arguments_digest", "outcome"
    }  # fmt: skip
    assert by_name["justify"].inputSchema["required"] == ["memory_id"]
    assert {"status", "as_of"} <= set(by_name["justify"].inputSchema["properties"])
    tool = server.http.get(f"{server.url}/v1/tenants/{ACME}/memory-tool").json()
    remember = by_name["remember"].inputSchema
    assert remember["properties"].pop("wait")["type"] == "boolean"
    assert remember == tool["input_schema"]
    recall = by_name["recall"].inputSchema
    assert recall["required"] == ["q"] and recall["additionalProperties"] is False
    assert {"q", "limit", "kind", "class", "valid_at", "fusion", "as_of"} <= set(recall["properties"])
    assert by_name["get_memory"].inputSchema["required"] == ["memory_id"]
    supersede = by_name["supersede"].inputSchema
    assert set(supersede["required"]) == {"memory_id", "superseded_by"}
    assert not {"source", "actor", "event_id", "tenant"} & set(supersede["properties"])
    assert [str(r.uri) for r in resources.resources] == ["engram://context"]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_remember_many_answers_each_item_and_the_context_reads_after_them(
    server: Server, transport: str
) -> None:
    label = f"Batch note {transport} {uuid.uuid4().hex[:6]}"
    items = [
        memory(f"{label} one"),
        {"label": "no content", "kind": "fact", "importance": 3},
        memory(f"{label} two"),
    ]

    async def body(s: ClientSession) -> Any:
        written = await s.call_tool("remember_many", {"memories": items})
        context = await s.call_tool("get_context", {"q": label})  # after= the batch's last item
        return written, context

    written, context = run(server, transport, token(server, ACME), body)
    assert not written.isError, text(written)
    results = written.structuredContent["results"]  # type: ignore[index]
    assert [(r["index"], r["outcome"]) for r in results] == [(0, "accepted"), (1, "invalid"), (2, "accepted")]
    assert "content" in results[1]["reason"]
    shown = text(context)
    assert f"{label} one" in shown and f"{label} two" in shown  # the session read after its writes


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_remember_recall_get_memory_and_the_context(server: Server, transport: str) -> None:
    label = f"Brand voice {transport} {uuid.uuid4().hex[:6]}"

    async def body(s: ClientSession) -> Any:
        written = await s.call_tool("remember", memory(label))  # answered on append
        assert not written.isError, text(written)
        context = await s.read_resource("engram://context")  # type: ignore[arg-type]  # after= it
        got_context = await s.call_tool("get_context", {"q": label})  # after= it, as a tool
        recalled = await s.call_tool("recall", {"q": label, "limit": 5})
        assert not recalled.isError, text(recalled)
        memory_id = written.structuredContent["memory_id"]  # type: ignore[index]
        got = await s.call_tool("get_memory", {"memory_id": memory_id})
        listed = await s.call_tool("list_memories", {"kind": "fact", "limit": 1000})
        return written, recalled, got, listed, context, got_context

    written, recalled, got, listed, context, got_context = run(server, transport, token(server, ACME), body)
    assert written.structuredContent["applied"] is False  # not waited for
    assert {"partition", "offset"} <= set(written.structuredContent)
    assert label in got_context.structuredContent["text"]
    memory_id = written.structuredContent["memory_id"]
    assert recalled.structuredContent["data"][0]["id"] == memory_id
    assert got.structuredContent["label"] == label and got.structuredContent["source"] == "agent"
    assert got.structuredContent["actor"] == {"id": "dana", "role": "operator"}
    assert (
        got.structuredContent
        == server.http.get(f"{server.url}/v1/tenants/{ACME}/memories/{memory_id}").json()
    )
    assert memory_id in {m["id"] for m in listed.structuredContent["data"]}
    [content] = context.contents
    assert content.mimeType == "text/markdown" and label in content.text


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_refused_write_is_a_tool_error_with_the_api_reason(server: Server, transport: str) -> None:
    """A user writing a company memory: 403 naming the rule, as the HTTP API answers it."""
    bearer = token(server, ACME, role="user", user="sam")
    label = f"Company rule {uuid.uuid4().hex[:6]}"
    refused = run(server, transport, bearer, lambda s: s.call_tool("remember", memory(label)))
    direct = server.http.post(
        f"{server.url}/v1/tenants/{ACME}/memories",
        json={**memory(label), "source": "agent"},
        headers={"Authorization": f"Bearer {bearer}"},
    )
    assert direct.status_code == 403
    assert refused.isError and text(refused) == api_reason(direct)
    assert refused.structuredContent["status"] == 403
    assert refused.structuredContent["detail"] == direct.json()["detail"]
    # an argument the tool does not take, and a value the API refuses: tool errors, not crashes
    unknown = run(server, transport, bearer, lambda s: s.call_tool("recall", {"q": "x", "tenant": GLOBEX}))
    assert unknown.isError and text(unknown).startswith("422: unknown argument(s) tenant; recall takes ")
    bad = run(server, transport, bearer, lambda s: s.call_tool("recall", {"q": "x", "limit": 0}))
    direct = server.http.post(f"{server.url}/v1/tenants/{ACME}/recall", json={"q": "x", "limit": 0})
    assert bad.isError and text(bad) == api_reason(direct)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_list_and_decide_proposals(server: Server, transport: str) -> None:
    """An extracted target against Sam's: listed by list_proposals, accepted by decide_proposal on
    Sam's word (an agent for Sam), refused as the API refuses a second answer."""
    t = f"{ACME}-p-{uuid.uuid4().hex[:6]}"
    target = {"label": "ROAS target", "kind": "objective", "importance": 5, "scope": "user",
              "stakeholders": {"user_id": "sam"}, "memory_class": "PerformanceTargetMemory"}  # fmt: skip
    sam = server.bearer(t, role="user", user="sam")
    extractor = server.bearer(t, role="agent", user="extractor", on_behalf_of="sam")
    roas = [{"metric": "roas", "goal": goal} for goal in (3.0, 4.0)]
    for who, body in (
        (sam, {"memory_id": "roas-3", "content": "ROAS 3", "properties": roas[0], "source": "agent"}),
        (extractor, {"memory_id": "roas-4", "content": "ROAS 4", "properties": roas[1],
                     "source": "extraction", "confidence": 0.7}),
    ):  # fmt: skip
        r = server.http.post(f"{server.url}/v1/tenants/{t}/memories", json={**target, **body},
                             params={"wait": "true"}, headers=who)  # fmt: skip
        assert r.status_code == 202, r.text
    agent = server.bearer(t, role="agent", user="helper", on_behalf_of="sam")["Authorization"][7:]

    async def body(s: ClientSession) -> Any:
        listed = await s.call_tool("list_proposals", {})
        yes = {"memory_id": "roas-4", "decision": "accept", "reason": "Sam said so", "wait": True}
        decided = await s.call_tool("decide_proposal", yes)
        again = await s.call_tool("decide_proposal", {"memory_id": "roas-4", "decision": "reject"})
        return listed, decided, again

    listed, decided, again = run(server, transport, agent, body)
    assert not listed.isError, text(listed)
    [item] = listed.structuredContent["data"]
    assert (item["id"], item["replaces"]["id"]) == ("roas-4", "roas-3")
    assert not decided.isError and decided.structuredContent["applied"], text(decided)
    got = server.http.get(f"{server.url}/v1/tenants/{t}/memories/roas-3", headers=sam).json()
    assert got["superseded_by"] == "roas-4"
    no = f"{server.url}/v1/tenants/{t}/proposals/roas-4/reject"
    direct = server.http.post(no, json={"source": "agent"}, headers=sam)
    assert direct.status_code == 409
    assert again.isError and text(again) == api_reason(direct)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_another_tenants_id_is_not_found(server: Server, transport: str) -> None:
    """An acme memory asked for with a globex token is answered as an id that does not exist."""
    written = server.http.post(
        f"{server.url}/v1/tenants/{ACME}/memories?wait=true",
        json={**memory("Acme secret"), "source": "operator"},
    )
    acme_id = written.json()["memory_id"]

    async def body(s: ClientSession) -> Any:
        return (
            await s.call_tool("get_memory", {"memory_id": acme_id}),
            await s.call_tool("get_memory", {"memory_id": "no-such-memory"}),
            await s.call_tool("supersede", {"memory_id": acme_id, "superseded_by": "no-such-memory"}),
        )

    theirs, missing, supersede = run(server, transport, token(server, GLOBEX), body)
    assert theirs.isError and text(theirs) == f"404: memory {acme_id} not found (path)"
    assert text(missing) == "404: memory no-such-memory not found (path)"
    assert supersede.isError and text(supersede).startswith("404: memory ")


def forged(server: Server) -> str:
    """The operator's token, signed with another key."""
    claims = jwt.decode(token(server, ACME), options={"verify_signature": False})
    return jwt.encode(claims, "another deployment's secret, 32 bytes or more")


def leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for e in exc.exceptions for leaf in leaves(e)]
    return [exc]


def test_a_bad_token_is_refused_over_http(server: Server) -> None:
    """No token or a forged one: 401 with the API's own answer, before any MCP session exists."""
    for headers in ({}, {"Authorization": f"Bearer {forged(server)}"}):
        r = httpx.post(
            f"{server.url}/mcp/", headers=headers, json={"jsonrpc": "2.0", "id": 1, "method": "ping"}
        )
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
        direct = httpx.get(f"{server.url}/v1/tenants/{ACME}/memories", headers=headers)
        assert r.json() == direct.json()
    with pytest.raises(BaseExceptionGroup) as raised:  # the SDK's client fails its initialize
        run(server, "http", forged(server), lambda s: s.list_tools())
    [refused] = leaves(raised.value)
    assert isinstance(refused, httpx.HTTPStatusError) and refused.response.status_code == 401


def test_a_bad_token_is_refused_over_stdio(server: Server) -> None:
    """`engram mcp` with a forged ENGRAM_TOKEN: listing the tools and calling one are refused with
    the API's 401 reason (the API verifies the token; the stdio server only reads its tenant)."""
    bad = forged(server)
    direct = httpx.get(f"{server.url}/v1/tenants/{ACME}/memories", headers={"Authorization": f"Bearer {bad}"})

    async def body(s: ClientSession) -> Any:
        with pytest.raises(McpError) as listed:
            await s.list_tools()
        return listed.value, await s.call_tool("recall", {"q": "anything"})

    listed, called = run(server, "stdio", bad, body)
    assert str(listed) == api_reason(direct) and direct.status_code == 401
    assert called.isError and text(called) == api_reason(direct)


def test_a_session_never_crosses_tenants(server: Server) -> None:
    """A session opened by acme's operator, named in a request with globex's token (or another
    principal's of acme): answered as a session that does not exist."""

    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    accept = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    hello = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}
    init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": hello}
    acme = {**accept, "Authorization": f"Bearer {token(server, ACME)}"}
    opened = httpx.post(f"{server.url}/mcp/", headers=acme, json=init)
    assert opened.status_code == 200, opened.text
    sid = opened.headers["mcp-session-id"]
    same = httpx.post(f"{server.url}/mcp/", headers={**acme, "mcp-session-id": sid}, json=ping)
    assert same.status_code == 200, same.text
    for other in (token(server, GLOBEX), token(server, ACME, role="user", user="sam")):
        crossed = {**accept, "Authorization": f"Bearer {other}", "mcp-session-id": sid}
        r = httpx.post(f"{server.url}/mcp/", headers=crossed, json=ping)
        unknown = httpx.post(f"{server.url}/mcp/", headers={**crossed, "mcp-session-id": "f" * 32}, json=ping)
        assert r.status_code == 404 and r.json() == unknown.json()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_remember_recall_justify_check_plan_and_a_session(server: Server, transport: str) -> None:
    """An agent's turn over MCP on the demo numbers: remember, recall it, justify it, check a Meta
    spend of 8,000 for 2026-11 (a breach at 105%), and record the session's work and decision."""
    label = f"Meta pacing {transport} {uuid.uuid4().hex[:6]}"
    bearer = server.bearer(ACME, role="agent", user="ads-agent", on_behalf_of="sam")["Authorization"][7:]

    async def body(s: ClientSession) -> dict[str, CallToolResult]:
        out: dict[str, CallToolResult] = {}

        async def tool(key: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
            out[key] = result = await s.call_tool(name, arguments)
            assert not result.isError, f"{name}: {text(result)}"
            assert result.structuredContent is not None
            return result.structuredContent

        mine = {"scope": "user", "stakeholders": {"user_id": "sam"}}
        written = await tool("remember", "remember", {**memory(label, **mine), "wait": True})
        await tool("recall", "recall", {"q": label, "limit": 3})
        await tool("justify", "justify", {"memory_id": written["memory_id"]})
        await tool("known", "recognize", {"label": label})
        await tool("plan", "check_plan", {"spend": META_8K})
        await tool("cap", "justify", {"memory_id": "meta-cap", "status": "budgetStatus"})
        session = await tool("session", "start_session", {"goal": "November's Meta spend"})
        digest = "sha256:" + "ab" * 32
        call = {
            "session_id": session["id"],
            "tool": "check_plan",
            "arguments_digest": digest,
            "outcome": "ok",
        }
        await tool("call", "record_tool_call", call)
        decided = await tool("decision", "record_decision", {
            "decision": "Do not add 8,000 on Meta", "relied_on": ["meta-cap", written["memory_id"]],
            "live_data": ["spend:meta:USD:2026-11"], "spend": META_8K, "session_id": session["id"],
        })  # fmt: skip
        await tool("end", "end_session", {"session_id": session["id"], "outcome": "held"})
        await tool("story", "episodes_in", {"session_id": session["id"]})
        await tool("relied", "decisions_relying_on", {"relied_on": "meta-cap"})
        await tool("summary", "summarise", {"topic": "meta"})
        await tool("why", "justify_decision", {"decision_id": decided["id"]})
        out["decided"] = await s.call_tool("justify", {"memory_id": decided["id"]})  # not a memory
        return out

    got = run(server, transport, bearer, body)
    sc = {k: r.structuredContent for k, r in got.items()}
    memory_id = sc["remember"]["memory_id"]
    assert sc["remember"]["applied"] is True  # asked to wait
    assert sc["decision"]["applied"] is False  # not asked
    assert sc["recall"]["data"][0]["id"] == memory_id
    why = sc["justify"]
    assert (why["memory_id"], why["label"], why["source"]) == (memory_id, label, "agent")
    assert why["actor"] == {"id": "ads-agent", "role": "agent"} and len(why["events"]) == 1
    first = sc["known"]["matches"][0]
    assert sc["known"]["known"] and (first["id"], first["reason"]) == (memory_id, "exact")
    [finding] = sc["plan"]["findings"]
    assert sc["plan"]["ok"] is False
    assert (finding["status"], finding["memory_id"], finding["explanation"]) == ("breach", "meta-cap", BREACH)
    assert [d["predicate"] for d in sc["cap"]["derived"]] == ["budgetStatus"]
    story = sc["story"]
    assert story["goal"] == "November's Meta spend" and story["outcome"] == "held"
    assert [i["type"] for i in story["items"]] == ["tool_call", "decision"]
    assert "breached_constraint" in [st["status"] for st in story["items"][1]["statuses"]]
    assert sc["decision"]["id"] in [d["id"] for d in sc["relied"]["data"]]
    why_decided = sc["why"]  # read after a write not waited for: the server's read-your-writes
    assert why_decided["decision_id"] == sc["decision"]["id"] and why_decided["acting_for"] == "sam"
    assert {r["memory_id"] for r in why_decided["relied_on"]} == {"meta-cap", memory_id}
    assert [ev["type"] for ev in why_decided["events"]] == ["DecisionRecorded"]
    assert "breached_constraint" in [st["status"] for st in why_decided["statuses"]]
    assert "meta-cap" in [i["id"] for i in sc["summary"]["top"]]
    # the tool's answer is the route's, word for word
    direct = server.http.post(
        f"{server.url}/v1/tenants/{ACME}/plans/check",
        json={"spend": META_8K},
        headers={"Authorization": f"Bearer {bearer}"},
    )
    assert json.loads(text(got["plan"])) == direct.json()
    assert (
        got["decided"].isError
        and text(got["decided"]) == f"404: memory {sc['decision']['id']} not found (path)"
    )


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_the_agent_verbs_refuse_as_the_api_does(server: Server, transport: str) -> None:
    """A pipeline may not start a session (403 naming the rule), a plan on an unknown platform is
    422, and an acme id with a globex token is answered as a missing one: each as the API says it."""
    pipeline = token(server, ACME, role="pipeline", user="spend-etl")
    refused = run(server, transport, pipeline, lambda s: s.call_tool("start_session", {"goal": "x"}))
    direct = server.http.post(
        f"{server.url}/v1/tenants/{ACME}/sessions",
        json={"goal": "x"},
        headers={"Authorization": f"Bearer {pipeline}"},
    )
    assert direct.status_code == 403 and refused.isError and text(refused) == api_reason(direct)
    typo = {"spend": {**META_8K, "platform": "metta"}}
    bad = run(server, transport, token(server, ACME), lambda s: s.call_tool("check_plan", typo))
    direct = server.http.post(f"{server.url}/v1/tenants/{ACME}/plans/check", json=typo)
    assert direct.status_code == 422 and bad.isError and text(bad) == api_reason(direct)

    async def body(s: ClientSession) -> Any:
        return (
            await s.call_tool("justify", {"memory_id": "meta-cap"}),
            await s.call_tool("justify", {"memory_id": "no-such-memory"}),
            await s.call_tool("record_decision", {"decision": "x", "relied_on": ["meta-cap"]}),
            await s.call_tool("check_plan", {"spend": META_8K}),
            await s.call_tool("justify_decision", {"decision_id": "no-such-decision"}),
        )

    theirs, missing, cite, plan, no_decision = run(server, transport, token(server, GLOBEX), body)
    assert text(no_decision) == "404: decision no-such-decision not found (path)"
    assert text(theirs) == "404: memory meta-cap not found (path)"
    assert text(missing) == "404: memory no-such-memory not found (path)"
    assert cite.isError and text(cite).startswith("404: memory meta-cap not found")
    # acme's cap is not globex's: nothing of it in globex's answer, which knows no platform meta
    assert "meta-cap" not in text(plan) and "40,000" not in text(plan)
    assert plan.isError and text(plan).startswith("422: unknown platform 'meta'"), text(plan)


BEYOND = "0:999999999"


def test_the_session_carries_its_last_write_to_the_context_read(server: Server) -> None:
    """Read-your-writes through the session, as the SDK does it: a write answered on append moves
    the session's position; its next get_context is sent with ``after=`` that position (an explicit
    ``after`` is kept), reads and refusals do not move it, and ``wait: true`` still waits."""
    sent: list[httpx.Request] = []

    async def main() -> Any:
        async def record(request: httpx.Request) -> None:
            sent.append(request)

        async with httpx.AsyncClient(base_url=server.url, event_hooks={"request": [record]}) as client:
            caller = Caller(client, token(server, ACME), ACME)
            catalog, position = Catalog(), Position()
            label = f"Carried {uuid.uuid4().hex[:6]}"
            first = await call(catalog, caller, "get_context", {"q": label}, position)
            written = await call(catalog, caller, "remember", memory(label), position)
            await call(catalog, caller, "recall", {"q": label}, position)  # a read: no move
            context = await call(catalog, caller, "get_context", {"q": label}, position)
            mine = await call(catalog, caller, "get_context", {"after": BEYOND}, position)
            waited = await call(catalog, caller, "remember", {**memory(label + " b"), "wait": True}, position)
            return first, written, context, mine, waited, position.value

    _, written, context, mine, waited, last = asyncio.run(main())
    contexts = [r for r in sent if r.url.path.endswith("/context")]
    assert "after" not in contexts[0].url.params  # nothing written yet
    w = written.structuredContent
    assert w["applied"] is False
    assert contexts[1].url.params["after"] == f"{w['partition']}:{w['offset']}"
    assert "Carried" in context.structuredContent["text"]
    # an explicit after is sent as given, not the session's (here far past its partition's end:
    # "0:0" was once, until another test of the module wrote to partition 0 first)
    assert contexts[2].url.params["after"] == BEYOND
    assert mine.isError and text(mine).startswith(f"422: position {BEYOND} is not in the log"), text(mine)
    assert waited.structuredContent["applied"] is True
    assert last == f"{waited.structuredContent['partition']}:{waited.structuredContent['offset']}"
    remembers = [r for r in sent if r.url.path.endswith("/memories")]
    assert [r.url.params.get("wait") for r in remembers] == [None, "true"]
