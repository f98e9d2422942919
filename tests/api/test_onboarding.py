"""Onboarding over real HTTP (one server for the module, on the local Kafka broker): an empty tenant
onboarded in one request is complete with three ids; a partial body lists what is missing; a retry
writes nothing new; only an operator onboards; hostile bodies are 422s with reasons; the memories
are in the per-turn context with source onboarding."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from engram.streams.topics import ensure_topics

from engram.settings import Settings
from tests.harness import Server, isolated_settings

TARGET = {
    "label": "ROAS target",
    "content": "Keep ROAS at or above 3.",
    "target": {"metric": "roas", "goal": 3},
}
BUDGET = {
    "label": "Meta monthly cap",
    "content": "Never spend more than $40k/month on Meta.",
    "budget": {"platform": "meta", "amount": 40000, "currency": "USD", "period": "month"},
}
FACT = {"label": "Markets", "content": "Acme sells outdoor gear in the US and Canada."}
PREFERENCE = {"label": "Tone", "content": "Plain, warm, no exclamation marks."}
FULL = {"objective": BUDGET, "fact": FACT, "preference": PREFERENCE}


@pytest.fixture(scope="module")
def server(broker: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("onboarding")
    settings = isolated_settings(broker, root / "data")
    asyncio.run(ensure_topics(settings))
    srv = Server(settings, root / "server.log").start()
    srv.wait_ready()
    yield srv
    srv.stop()


def fresh() -> str:
    return f"onb-{uuid.uuid4().hex[:10]}"


def onboard(s: Server, t: str, body: Any, who: dict[str, Any] | None = None) -> httpx.Response:
    headers = s.bearer(t, **who) if who else {}
    return s.http.post(
        f"{s.url}/v1/tenants/{t}/onboarding", params={"wait": "true"}, json=body, headers=headers, timeout=40
    )


def status(s: Server, t: str, who: dict[str, Any] | None = None) -> httpx.Response:
    headers = s.bearer(t, **who) if who else {}
    return s.http.get(f"{s.url}/v1/tenants/{t}/onboarding", headers=headers, timeout=40)


def memory(s: Server, t: str, memory_id: str) -> dict[str, Any]:
    r = s.http.get(f"{s.url}/v1/tenants/{t}/memories/{memory_id}", timeout=40)
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def test_an_empty_tenant_onboarded_in_one_request_is_complete(server: Server) -> None:
    t = fresh()
    before = status(server, t).json()
    assert before == {
        "present": {"objective": [], "fact": [], "preference": []},
        "missing": ["objective", "fact", "preference"],
        "complete": False,
    }
    r = onboard(server, t, FULL)
    assert r.status_code == 202, r.text
    written = r.json()
    assert all(written[slot]["applied"] for slot in ("objective", "fact", "preference"))
    after = status(server, t).json()
    assert after["complete"] is True and after["missing"] == []
    ids = {slot: written[slot]["memory_id"] for slot in ("objective", "fact", "preference")}
    assert after["present"] == {slot: [ids[slot]] for slot in ids}
    cap, fact, pref = (memory(server, t, ids[slot]) for slot in ("objective", "fact", "preference"))
    assert (cap["memory_class"], cap["kind"], cap["importance"]) == ("BudgetConstraintMemory", "objective", 5)
    assert cap["properties"] == {"platform": "meta", "amount": 40000, "currency": "USD", "period": "month"}
    assert (fact["kind"], fact["importance"], pref["kind"], pref["importance"]) == (
        "fact",
        4,
        "preference",
        4,
    )
    for m in (cap, fact, pref):
        assert (m["source"], m["scope"], m["confidence"], m["actor"]["role"]) == (
            "onboarding",
            "company",
            1.0,
            "operator",
        )


def test_a_partial_body_fills_what_it_gives_and_lists_what_is_missing(server: Server) -> None:
    t = fresh()
    r = onboard(server, t, {"fact": {**FACT, "importance": 3}})
    assert r.status_code == 202, r.text
    assert r.json()["objective"] is None and r.json()["preference"] is None
    got = status(server, t).json()
    assert got["missing"] == ["objective", "preference"] and got["complete"] is False
    assert got["present"]["fact"] == [r.json()["fact"]["memory_id"]]
    assert memory(server, t, r.json()["fact"]["memory_id"])["importance"] == 3
    r = onboard(server, t, {"objective": TARGET, "preference": PREFERENCE})
    assert r.status_code == 202, r.text
    target = memory(server, t, r.json()["objective"]["memory_id"])
    assert (target["memory_class"], target["properties"]) == (
        "PerformanceTargetMemory",
        {"metric": "roas", "goal": 3},
    )
    assert status(server, t).json()["complete"] is True


def test_a_retry_writes_nothing_new(server: Server) -> None:
    t = fresh()
    first = onboard(server, t, FULL)
    assert first.status_code == 202, first.text
    again = onboard(server, t, FULL)
    assert again.status_code == 202, again.text
    for slot in ("objective", "fact", "preference"):
        a, b = first.json()[slot], again.json()[slot]
        assert (a["event_id"], a["memory_id"], a["partition"], a["offset"]) == (
            b["event_id"],
            b["memory_id"],
            b["partition"],
            b["offset"],
        )
    listed = server.http.get(f"{server.url}/v1/tenants/{t}/memories", timeout=40).json()
    assert listed["count"] == 3
    assert status(server, t).json()["present"] == {
        slot: [first.json()[slot]["memory_id"]] for slot in ("objective", "fact", "preference")
    }


def test_a_restated_target_is_a_revision_not_a_duplicate(server: Server) -> None:
    """The same label and metric with a new goal: remember's restatement, one memory."""
    t = fresh()
    first = onboard(server, t, {"objective": TARGET})
    assert first.status_code == 202, first.text
    raised = {**TARGET, "target": {"metric": "roas", "goal": 3.5}}
    second = onboard(server, t, {"objective": raised})
    assert second.status_code == 202, second.text
    (only,) = status(server, t).json()["present"]["objective"]
    assert only == first.json()["objective"]["memory_id"]
    assert memory(server, t, only)["properties"]["goal"] == 3.5


@pytest.mark.parametrize(
    "who",
    [
        {"role": "user", "user": "sam"},
        {"role": "agent", "user": "bot", "on_behalf_of": "sam"},
        {"role": "auditor", "user": "audit"},
        {"role": "pipeline", "user": "etl"},
    ],
)
def test_only_an_operator_onboards(server: Server, who: dict[str, Any]) -> None:
    t = fresh()
    r = onboard(server, t, FULL, who)
    assert r.status_code == 403, r.text
    assert r.json()["detail"][0]["msg"] == "only an operator onboards a tenant"
    assert status(server, t).json()["complete"] is False
    if who["role"] != "auditor":
        assert status(server, t, who).status_code == 403
    else:
        assert status(server, t, who).status_code == 200


def test_another_tenants_token_is_answered_as_no_such_tenant(server: Server) -> None:
    t = fresh()
    elsewhere = server.bearer("elsewhere", role="operator")
    r = server.http.post(f"{server.url}/v1/tenants/{t}/onboarding", json=FULL, headers=elsewhere, timeout=40)
    assert r.status_code == 404, r.text


HOSTILE: list[tuple[str, Any, str]] = [
    ("both kinds", {"objective": {**TARGET, "budget": BUDGET["budget"]}}, "either a target"),
    ("neither kind", {"objective": FACT}, "either a target"),
    ("unknown metric", {"objective": {**TARGET, "target": {"metric": "vibes", "goal": 3}}}, "unknown metric"),
    ("metric not a name", {"objective": {**TARGET, "target": {"metric": "RO AS", "goal": 3}}}, "pattern"),
    (
        "negative amount",
        {"objective": {**BUDGET, "budget": {**BUDGET["budget"], "amount": -5}}},
        "greater than",
    ),
    ("zero amount", {"objective": {**BUDGET, "budget": {**BUDGET["budget"], "amount": 0}}}, "greater than"),
    (
        "amount as text",
        {"objective": {**BUDGET, "budget": {**BUDGET["budget"], "amount": "40000"}}},
        "number",
    ),
    (
        "bad period",
        {"objective": {**BUDGET, "budget": {**BUDGET["budget"], "period": "fortnight"}}},
        "'month'",
    ),
    ("bad currency", {"objective": {**BUDGET, "budget": {**BUDGET["budget"], "currency": "usd"}}}, "pattern"),
    ("empty", {}, "nothing to onboard"),
    ("unknown slot", {"fact": FACT, "goal": FACT}, "not permitted"),
    ("unknown field", {"fact": {**FACT, "source": "agent"}}, "not permitted"),
    ("oversize label", {"fact": {**FACT, "label": "x" * 513}}, "at most 512"),
    ("oversize content", {"preference": {**PREFERENCE, "content": "x" * 32_769}}, "at most 32768"),
    ("blank label", {"fact": {**FACT, "label": "   "}}, "pattern"),
    ("importance 9", {"fact": {**FACT, "importance": 9}}, "less than or equal"),
    ("importance true", {"fact": {**FACT, "importance": True}}, "integer"),
    ("unknown class", {"fact": {**FACT, "memory_class": "NoSuchMemory"}}, "NoSuchMemory"),
    ("a list", [FULL], "object"),
]


@pytest.mark.parametrize(("name", "body", "reason"), HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_bodies_are_refused_with_reasons(server: Server, name: str, body: Any, reason: str) -> None:
    t = fresh()
    r = onboard(server, t, body)
    assert r.status_code == 422, r.text
    assert reason in r.text, r.text
    assert status(server, t).json()["present"] == {"objective": [], "fact": [], "preference": []}


@pytest.mark.parametrize(
    "text",
    [
        '{"objective": {"label": "x", "content": "y", "budget": {"platform": "meta", "amount": NaN, '
        '"currency": "USD"}}}',
        '{"objective": {"label": "x", "content": "y", "target": {"metric": "roas", "goal": Infinity}}}',
        '{"fact": {"label": "\\ud800", "content": "y"}}',
        '{"preference": {"label": "x", "content": "y", "importance": 1e309}}',
    ],
    ids=["NaN", "Infinity", "lone surrogate", "1e309"],
)
def test_non_finite_numbers_and_lone_surrogates_are_422(server: Server, text: str) -> None:
    t = fresh()
    r = server.http.post(
        f"{server.url}/v1/tenants/{t}/onboarding",
        content=text.encode(),
        headers={"content-type": "application/json"},
        timeout=40,
    )
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["msg"], r.text


def test_an_invalid_slot_writes_none_of_the_others(server: Server) -> None:
    """The metric is checked against the ontology before anything is appended."""
    t = fresh()
    bad = {**FULL, "objective": {**TARGET, "target": {"metric": "vibes", "goal": 1}}}
    r = onboard(server, t, bad)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "objective", "target", "metric"]
    assert server.http.get(f"{server.url}/v1/tenants/{t}/memories", timeout=40).json()["count"] == 0


def test_the_onboarded_memories_are_in_the_context_with_source_onboarding(server: Server) -> None:
    t = fresh()
    r = onboard(server, t, FULL)
    assert r.status_code == 202, r.text
    agent = server.bearer(t, role="agent", user="bot", on_behalf_of="sam")
    ctx = server.http.get(
        f"{server.url}/v1/tenants/{t}/context",
        params={"q": "draft three headlines"},
        headers=agent,
        timeout=40,
    )
    assert ctx.status_code == 200, ctx.text
    items = {item["id"]: item for block in ctx.json()["blocks"] for item in block["items"]}
    for slot in ("objective", "fact", "preference"):
        item = items[r.json()[slot]["memory_id"]]
        assert item["set_by"]["source"] == "onboarding", item
    assert "(onboarding)" in ctx.json()["text"]
