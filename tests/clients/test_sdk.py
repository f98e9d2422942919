"""engram-client against a real server: the verbs, read-your-writes, retries that apply a write
once, and refusals that carry the API's reason."""

from __future__ import annotations

import asyncio
import time
import uuid

import httpx
import pytest
from engram_client import (
    Accepted,
    AsyncEngram,
    Conflict,
    ConnectionFailed,
    Context,
    Engram,
    Forbidden,
    Invalid,
    Memory,
    NotFound,
    RateLimited,
    Recall,
    Retry,
    Unauthorized,
)
from engram_client.calls import Calls

from tests.clients.conftest import FaultyProxy, Live, canned

pytestmark = pytest.mark.integration

FAST = Retry(attempts=4, backoff=0.05, max_wait=5)


def tenant() -> str:
    return f"t{uuid.uuid4().hex[:10]}"


def sent_params(client: Engram) -> list[httpx.URL]:
    """Record the URL of every request the client sends (an httpx event hook)."""
    urls: list[httpx.URL] = []
    client.http.event_hooks["request"].append(lambda request: urls.append(request.url))
    return urls


def test_remember_recall_and_context_read_your_writes(live: Live) -> None:
    t = tenant()
    with Engram(live.url, live.token(t)) as mem:
        assert mem.tenant == t  # from the token's claim
        urls = sent_params(mem)
        accepted = mem.remember(
            "Meta budget cap",
            "Meta ad spend stays under 40,000 USD a month, agreed with finance.",
            kind="fact",
            importance=5,
        )
        assert isinstance(accepted, Accepted) and accepted.memory_id and not accepted.applied
        assert mem.position == accepted.position == f"{accepted.partition}:{accepted.offset}"

        context = mem.context("how much may we spend on Meta?")  # no wait=true, no polling
        assert isinstance(context, Context)
        assert accepted.memory_id in [item.id for item in context.items]
        assert "Meta budget cap" in context.text
        assert urls[-1].params["after"] == accepted.position  # the position went with the read

        recall = mem.recall("meta spending limit", limit=3)
        assert isinstance(recall, Recall)
        assert recall.data[0].id == accepted.memory_id and recall.data[0].score > 0

        memory = mem.get_memory(accepted.memory_id)
        assert isinstance(memory, Memory)
        assert (memory.label, memory.kind, memory.importance, memory.source) == (
            "Meta budget cap",
            "fact",
            5,
            "agent",
        )
        page = mem.list_memories(kind="fact", limit=10)
        assert page.count == 1 and page.data[0].id == accepted.memory_id


def test_the_position_is_the_furthest_write_and_an_explicit_after_wins(live: Live) -> None:
    t = tenant()
    with Engram(live.url, live.token(t)) as mem:
        first = mem.remember("Tone", "Ad copy is warm and plain.", kind="preference", importance=4)
        second = mem.observe_kpi("roas", 3.2, "2026-11")
        assert second.offset > first.offset and mem.position == second.position
        urls = sent_params(mem)
        mem.context(after=first.position)
        assert urls[-1].params["after"] == first.position
        # a position past the end of the log is refused by the server: proof it reads what is sent
        mem.position = f"{second.partition}:{second.offset + 10_000}"
        with pytest.raises(Invalid, match="is not in the log"):
            mem.context()


def test_revise_supersede_forget_and_live_data(live: Live) -> None:
    t = tenant()
    with Engram(live.url, live.token(t)) as mem:
        old = mem.remember("Launch date", "The spring launch is on 3 March.", importance=4, wait=True)
        assert old.applied
        mem.revise(old.memory_id or "", {"content": "The spring launch is on 10 March."}, wait=True)
        assert mem.get_memory(old.memory_id or "").content == "The spring launch is on 10 March."
        new = mem.remember(
            "Launch date moved", "The spring launch moved to 17 March.", importance=4, on_conflict="keep_both"
        )
        mem.supersede(old.memory_id or "", new.memory_id or "", wait=True)
        superseded = mem.get_memory(old.memory_id or "")
        assert superseded.superseded_by == new.memory_id and not superseded.active
        assert len(mem.lineage(old.memory_id or "").model_extra or {}) > 0
        mem.forget(new.memory_id or "", reason="test", wait=True)
        assert mem.get_memory(new.memory_id or "").forgotten
        assert mem.observe_spend("meta", 34_000, "USD", "2026-12", wait=True).applied
        snapshot = mem.context().snapshot
        assert [s["platform"] for s in snapshot["spend"]] == ["meta"]


def test_refusals_carry_the_api_reason(live: Live) -> None:
    t = tenant()
    with Engram(live.url, live.token(t)) as operator, Engram(live.url, live.token(t, role="user")) as user:
        with pytest.raises(NotFound) as missing:
            operator.get_memory("no-such-memory")
        assert missing.value.status == 404 and "no-such-memory" in missing.value.reason
        assert missing.value.type == "not_found"

        taken = operator.remember("Region", "We sell in the EU only.", memory_id="region", wait=True)
        with pytest.raises(Conflict) as conflict:
            operator.remember("Region again", "We sell in the US too.", memory_id="region")
        assert conflict.value.status == 409 and "already exists" in conflict.value.reason

        with pytest.raises(Forbidden) as forbidden:
            user.forget(taken.memory_id or "", reason="tidy up")
        assert forbidden.value.status == 403 and forbidden.value.reason
        assert "operator" in forbidden.value.reason or "auditor" in forbidden.value.reason

        with pytest.raises(Invalid) as invalid:
            operator.remember("Bad", "importance out of range", importance=9)
        assert invalid.value.status == 422
        assert any(e["loc"][-1] == "importance" for e in invalid.value.errors)

    with Engram(live.url, "not-a-jwt", tenant=t) as stranger, pytest.raises(Unauthorized) as unknown:
        stranger.list_memories()
    assert unknown.value.status == 401 and unknown.value.reason


def test_a_write_whose_answer_was_dropped_is_retried_and_applied_once(live: Live, proxy: FaultyProxy) -> None:
    t = tenant()
    proxy.drop = 1  # the server handles the first request; the client never hears the answer
    with Engram(proxy.url, live.token(t), retry=FAST) as mem:
        accepted = mem.remember("Retried", "Sent twice, applied once.", importance=4)
        keys = [line for r in proxy.requests for line in r.split(b"\r\n") if line.lower().startswith(b"idem")]
        assert len(keys) == 2 and keys[0] == keys[1]  # two requests, one key
        page = mem.list_memories()
        assert [m.id for m in page.data] == [accepted.memory_id]
        assert len(mem.get_memory(accepted.memory_id or "").lineage) == 1  # one event


def test_without_the_key_the_same_resend_writes_twice(live: Live) -> None:
    """The control for the test above: resent without a key, the same request is a second event
    (ask before overwrite makes it a revision of the first memory, not a new one)."""
    t = tenant()
    body = {"source": "agent", "label": "Unkeyed", "content": "Sent twice.", "kind": "fact", "importance": 4}
    headers = {"Authorization": f"Bearer {live.token(t)}"}
    for _ in range(2):
        url = f"{live.url}/v1/tenants/{t}/memories?wait=true"
        httpx.post(url, json=body, headers=headers).raise_for_status()
    with Engram(live.url, live.token(t)) as mem:
        (memory,) = mem.list_memories().data
        assert len(memory.lineage) == 2


def test_503_and_429_are_retried_after_retry_after(live: Live, proxy: FaultyProxy) -> None:
    t = tenant()
    proxy.answers = [canned(503, "the event log is unavailable", retry_after="1"), canned(429, "slow down")]
    with Engram(proxy.url, live.token(t), retry=FAST) as mem:
        started = time.monotonic()
        accepted = mem.remember("After a 503", "Applied once the log is back.", importance=4)
        assert time.monotonic() - started >= 1.0  # waited as Retry-After said
        assert len(proxy.requests) == 3 and mem.get_memory(accepted.memory_id or "").label == "After a 503"

    proxy.answers = [canned(429, "over the rate limit", retry_after="0")] * FAST.attempts
    with Engram(proxy.url, live.token(t), retry=FAST) as mem, pytest.raises(RateLimited) as limited:
        mem.recall("anything")
    assert limited.value.reason == "over the rate limit" and limited.value.retry_after == 0


def test_no_server_is_a_connection_failure_after_the_retries() -> None:
    with socket_closed_port() as port, Engram(f"http://127.0.0.1:{port}", "x", tenant="t", retry=FAST) as mem:
        refused = pytest.raises(ConnectionFailed, match="after 4 attempts")
        with refused:
            mem.remember("Nobody", "is listening")


class socket_closed_port:
    """A port nothing listens on (bound, never listening, released at exit)."""

    def __enter__(self) -> int:
        import socket

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        return int(self.sock.getsockname()[1])

    def __exit__(self, *exc: object) -> None:
        self.sock.close()


def test_the_async_client(live: Live) -> None:
    t = tenant()

    async def turn() -> None:
        async with AsyncEngram(live.url, live.token(t)) as mem:
            accepted = await mem.remember(
                "Weekly report", "The weekly report goes out on Mondays.", kind="context", importance=5
            )
            assert mem.position == accepted.position
            context, recall = await asyncio.gather(mem.context(), mem.recall("when is the report sent"))
            assert accepted.memory_id in [i.id for i in context.items]
            assert recall.data[0].id == accepted.memory_id
            with pytest.raises(NotFound, match="not found"):
                await mem.get_memory("missing")

    asyncio.run(turn())


# The verbs issue 24 adds (recognize, justify, associate, resolve, summarise, episodes_in,
# check_plan, record_decision) were written while their routes were being built. Each one the
# server serves must be at the path and method the client calls; those it does not serve yet are
# listed, not tested.
PROVISIONAL = {
    "recognize": lambda c: c.recognize("x"),
    "justify": lambda c: c.justify("m1"),
    "associate": lambda c: c.associate("m1", "m2", "relates_to"),
    "resolve": lambda c: c.resolve("prefer_newer"),
    "summarise": lambda c: c.summarise(topic="x"),
    "episodes_in": lambda c: c.episodes_in("s1"),
    "check_plan": lambda c: c.check_plan({"spend": {}}),
    "record_decision": lambda c: c.record_decision("x"),
}


def test_the_provisional_verbs_name_routes_the_server_serves_if_it_has_them(live: Live) -> None:
    paths = httpx.get(f"{live.url}/openapi.json").json()["paths"]
    calls = Calls("acme")
    served = []
    for name, build in PROVISIONAL.items():
        call = build(calls)
        template = "/v1/tenants/{tenant}" + call.path.removeprefix("/v1/tenants/acme")
        matches = [p for p in paths if _same_template(p, template)]
        if matches:
            served.append(name)
            assert call.method.lower() in paths[matches[0]], f"{name}: {call.method} {template}"
    print("provisional verbs the server serves:", served or "none yet")


def _same_template(route: str, path: str) -> bool:
    a, b = route.strip("/").split("/"), path.strip("/").split("/")
    return len(a) == len(b) and all(x == y or x.startswith("{") for x, y in zip(a, b, strict=True))
