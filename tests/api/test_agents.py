"""Agent work over real HTTP (one server for the module, on the local Kafka broker): sessions and
their narrative, decisions and which relied on a constraint, associations, the plan check on the
demo tenant's numbers, hostile bodies, ids the caller may not see (404 byte for byte as missing),
and the tenant's live graph equal to its replay from the log."""

from __future__ import annotations

import asyncio
import gc
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from engram.projections.read import export_nquads
from engram.streams.replay import replay_tenant
from engram.streams.topics import ensure_topics

from engram.settings import Settings
from tests.harness import Server, isolated_settings

T = "agents"
SAM_AGENT = {"role": "agent", "user": "ads-agent", "on_behalf_of": "sam"}
SAM = {"role": "user", "user": "sam"}
ANN = {"role": "user", "user": "ann"}
PIPELINE = {"role": "pipeline", "user": "etl"}
DIGEST = "sha256:" + "3c" * 32
CAP = {
    "memory_id": "meta-cap",
    "label": "Meta monthly cap",
    "content": "Never more than $40k/month on Meta.",
    "kind": "objective",
    "importance": 5,
    "memory_class": "BudgetConstraintMemory",
    "properties": {"platform": "meta", "amount": 40000.0, "currency": "USD", "period": "month"},
}
TARGET = {
    "memory_id": "roas-target",
    "label": "ROAS target",
    "content": "Keep ROAS at or above 3.5.",
    "kind": "objective",
    "importance": 5,
    "memory_class": "PerformanceTargetMemory",
    "properties": {"metric": "roas", "goal": 3.5},
}
SAMS = {
    "memory_id": "sams",
    "label": "Report format",
    "content": "tables, not prose",
    "kind": "preference",
    "importance": 3,
    "scope": "user",
    "stakeholders": {"user_id": "sam"},
}


def post(
    s: Server, path: str, body: dict[str, Any], who: dict[str, Any] | None = None, **kw: Any
) -> httpx.Response:
    headers = s.bearer(T, **who) if who else {}
    return s.http.post(
        f"{s.url}/v1/tenants/{T}{path}", params={"wait": "true"}, json=body, headers=headers, timeout=40, **kw
    )


def get(s: Server, path: str, who: dict[str, Any] | None = None, **params: Any) -> httpx.Response:
    headers = s.bearer(T, **who) if who else {}
    return s.http.get(f"{s.url}/v1/tenants/{T}{path}", params=params, headers=headers, timeout=40)


def written(r: httpx.Response) -> dict[str, Any]:
    assert r.status_code == 202 and r.json()["applied"], r.text
    return r.json()  # type: ignore[no-any-return]


def check(s: Server, plan: dict[str, Any], who: dict[str, Any] | None = None) -> httpx.Response:
    return s.http.post(
        f"{s.url}/v1/tenants/{T}/plans/check",
        json=plan,
        headers=s.bearer(T, **(who or SAM_AGENT)),
        timeout=40,
    )


def meta(amount: Any, period: str = "2026-11", **extra: Any) -> dict[str, Any]:
    return {"spend": {"platform": "meta", "amount": amount, "currency": "USD", "period": period, **extra}}


@pytest.fixture(scope="module")
def server(broker: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The demo tenant's numbers (Meta cap 40,000 USD a month, 34,000 spent in 2026-11, ROAS target
    3.5) and Sam's own memory, on one server."""
    root = tmp_path_factory.mktemp("agents")
    settings = isolated_settings(broker, root / "data")
    asyncio.run(ensure_topics(settings))
    srv = Server(settings, root / "server.log").start()
    srv.wait_ready()
    for memory in (CAP, TARGET):
        written(post(srv, "/memories", {"source": "onboarding", **memory}))
    written(post(srv, "/memories", {"source": "agent", **SAMS}, SAM_AGENT))
    spend = {
        "source": "pipeline",
        "platform": "meta",
        "amount": 34000.0,
        "currency": "USD",
        "period": "2026-11",
    }
    written(post(srv, "/spend", spend, PIPELINE))
    yield srv
    srv.stop()


def test_the_plan_check_examples_on_the_demo_numbers(server: Server) -> None:
    breach = check(server, meta(8000))
    assert breach.status_code == 200, breach.text
    (found,) = breach.json()["findings"]
    assert breach.json()["ok"] is False
    assert (found["status"], found["memory_id"]) == ("breach", "meta-cap")
    assert found["explanation"] == "breaches meta-cap: spend 34,000 + 8,000 = 42,000 of cap 40,000 USD = 105%"
    assert found["values"]["pct"] == 105 and found["rule"].startswith("plans.dlog:")
    near = check(server, meta(1000)).json()
    assert near["ok"] is True and [f["status"] for f in near["findings"]] == ["near_limit"]
    assert "35,000 of cap 40,000 USD = 87.5% (threshold 85%)" in near["findings"][0]["explanation"]
    within = check(server, meta(8000, "2026-12")).json()  # no December spend yet: 20%
    assert within == {"ok": True, "findings": []}
    target = check(server, {"target_change": {"metric": "roas", "value": 3.0}}).json()
    assert target["findings"][0]["explanation"] == (
        "breaches roas-target: roas would be 3, under the goal of 3.5 (higher is better)"
    )


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        (meta(1, platform="myspace"), 422, "unknown platform 'myspace'"),
        ({"target_change": {"metric": "roass", "value": 1}}, 422, "unknown metric 'roass'"),
        (meta(-1), 422, "greater than or equal to 0"),
        (meta(8000, "unspecified"), 422, "spend.period must name a calendar period"),
        (meta(8000, "2026-13"), 422, "2026-13"),
        (
            {**meta(1), "target_change": {"metric": "roas", "value": 1}},
            422,
            "exactly one of spend or target_change",
        ),
        ({}, 422, "exactly one of spend or target_change"),
        (meta("8000"), 422, "number"),
    ],
)
def test_hostile_plans_are_4xx_with_a_reason(
    server: Server, body: dict[str, Any], status: int, says: str
) -> None:
    r = check(server, body)
    assert r.status_code == status, r.text
    assert says in r.text


def test_nan_and_oversize_bodies_are_refused(server: Server) -> None:
    headers = {**server.bearer(T, **SAM_AGENT), "content-type": "application/json"}
    url = f"{server.url}/v1/tenants/{T}/plans/check"
    raw = b'{"spend": {"platform": "meta", "amount": NaN, "currency": "USD", "period": "2026-11"}}'
    nan = server.http.post(url, content=raw, headers=headers)
    assert nan.status_code in (400, 422) and nan.json()["detail"], nan.text
    inf = server.http.post(url, content=raw.replace(b"NaN", b"1e309"), headers=headers)
    assert inf.status_code == 422 and "finite" in inf.text, inf.text
    huge = server.http.post(url, content=b'{"spend": "' + b"x" * 2_000_000 + b'"}', headers=headers)
    assert huge.status_code == 413, huge.text
    long = post(server, "/decisions", {"decision": "x" * 5000}, SAM_AGENT)
    assert long.status_code == 422 and "decision" in long.text


def test_a_session_its_narrative_and_the_decision_flagged(server: Server) -> None:
    session = written(post(server, "/sessions", {"goal": "December Meta plan"}, SAM_AGENT))["id"]
    episode = written(
        post(server, f"/sessions/{session}/episodes", {"summary": "Sam asks for reach"}, SAM_AGENT)
    )
    call = {"tool": "check_plan", "arguments_digest": DIGEST, "outcome": "ok", "episode_id": episode["id"]}
    written(post(server, f"/sessions/{session}/tool-calls", call, SAM_AGENT))
    decision = {
        "decision_id": "more-meta",
        "session_id": session,
        "episode_id": episode["id"],
        "decision": "Add 8k on Meta",
        "relied_on": ["meta-cap"],
        "live_data": ["spend:meta:USD:2026-11"],
        **meta(8000),
    }
    written(post(server, "/decisions", decision, SAM_AGENT))
    written(post(server, f"/sessions/{session}/end", {"outcome": "escalated"}, SAM_AGENT))
    story = get(server, f"/sessions/{session}/episodes", SAM_AGENT)
    assert story.status_code == 200, story.text
    items = story.json()["items"]
    assert [i["type"] for i in items] == ["episode", "tool_call", "decision"]
    assert story.json()["outcome"] == "escalated" and story.json()["acting_for"] == "sam"
    assert items[2]["statuses"] == [
        {
            "status": "breached_constraint",
            "explanation": "breached_constraint: the action it decided on breaches meta-cap",
        }
    ]
    one = get(server, "/decisions/more-meta", SAM).json()
    assert one["breaches"] == ["meta-cap"] and one["live_data"] == ["spend:meta:USD:2026-11"]
    relied = get(server, "/decisions", SAM_AGENT, relied_on="meta-cap").json()
    assert [d["id"] for d in relied["data"]] == ["more-meta"] and relied["count"] == 1
    assert get(server, "/decisions", ANN, relied_on="meta-cap").json()["count"] == 0  # sam's decision
    # without relied_on: every decision the reader may see, a page at a time
    assert [d["id"] for d in get(server, "/decisions", SAM).json()["data"]] == ["more-meta"]
    assert get(server, "/decisions", ANN).json() == {"data": [], "count": 0}
    every = get(server, "/decisions", limit=1).json()
    assert every["count"] >= 1 and len(every["data"]) == 1
    assert get(server, "/decisions", limit=0).status_code == 422
    late = post(server, f"/sessions/{session}/tool-calls", call | {"episode_id": None}, SAM_AGENT)
    assert late.status_code == 409 and "has ended" in late.text
    # another user's session, decision and memory are answered exactly as missing ones
    for path in (f"/sessions/{session}/episodes", "/decisions/more-meta"):
        hidden, missing = (
            get(server, path, ANN),
            get(server, path.replace(session, "nope").replace("more-meta", "nope"), ANN),
        )
        assert hidden.status_code == missing.status_code == 404
        assert hidden.json()["detail"][0]["msg"].replace(session, "X").replace("more-meta", "X") == (
            missing.json()["detail"][0]["msg"].replace("nope", "X")
        )
    hidden_rel, missing_rel = (
        get(server, "/decisions", ANN, relied_on="sams"),
        get(server, "/decisions", ANN, relied_on="zzzz"),
    )
    assert hidden_rel.status_code == missing_rel.status_code == 404
    assert hidden_rel.text.replace("sams", "X") == missing_rel.text.replace("zzzz", "X")


def test_justify_a_decision(server: Server) -> None:
    """A decision's provenance in one answer: who recorded it for whom, its session and episode,
    what it relied on (cited, and associated as supporting it), every event that touched it in log
    order, and its status with the rule derivation tree; a memory the reader may not see is left out
    everywhere, and a decision it may not see is 404 as a missing one."""
    session = written(post(server, "/sessions", {"goal": "Justify"}, SAM_AGENT))["id"]
    episode = written(post(server, f"/sessions/{session}/episodes", {"summary": "asks"}, SAM_AGENT))["id"]
    recorded = written(
        post(
            server,
            "/decisions",
            {
                "decision_id": "why-meta",
                "session_id": session,
                "episode_id": episode,
                "decision": "Add 8k on Meta",
                "relied_on": ["meta-cap"],
                "live_data": ["spend:meta:USD:2026-11"],
                **meta(8000),
            },
            SAM_AGENT,
        )
    )
    linked = written(
        post(
            server,
            "/associations",
            {"from": "roas-target", "to": "decision:why-meta", "relation": "supports"},
            SAM,
        )
    )
    why = get(server, "/decisions/why-meta/justify", SAM)
    assert why.status_code == 200, why.text
    j = why.json()
    assert (j["decision_id"], j["decision"], j["session_id"], j["episode_id"]) == (
        "why-meta", "Add 8k on Meta", session, episode
    )  # fmt: skip
    assert j["actor"] == {"id": "ads-agent", "role": "agent"} and j["acting_for"] == "sam"
    assert j["source"] == "agent" and j["live_data"] == ["spend:meta:USD:2026-11"]
    assert {(r["memory_id"], r["how"]) for r in j["relied_on"]} == {
        ("meta-cap", "cited"), ("roas-target", "supports")
    }  # fmt: skip
    assert [(ev["event_id"], ev["type"]) for ev in j["events"]] == [
        (recorded["event_id"], "DecisionRecorded"), (linked["event_id"], "MemoriesAssociated")
    ]  # fmt: skip
    assert [ev["offset"] for ev in j["events"]] == sorted(ev["offset"] for ev in j["events"])
    assert j["breaches"] == ["meta-cap"]
    assert [s["status"] for s in j["statuses"]] == ["breached_constraint"]
    (status,) = [d for d in j["derived"] if d["predicate"] == "decisionStatus"]
    (tree,) = status["derivations"]
    assert tree["rule"].startswith("plans.dlog:") and "breaches meta-cap" in tree["explanation"]
    assert any(i.get("because") for i in tree["inputs"])  # down to the breach's own derivation
    # an operator sees it too; ann may not see sam's decision, which is 404 as a missing one
    assert get(server, "/decisions/why-meta/justify").json()["relied_on"] == j["relied_on"]
    hidden, missing = (
        get(server, "/decisions/why-meta/justify", ANN),
        get(server, "/decisions/nope/justify", ANN),
    )
    assert hidden.status_code == missing.status_code == 404
    assert hidden.text.replace("why-meta", "X") == missing.text.replace("nope", "X")
    # as the system knew it before the association: no supporting memory, one event
    before = get(
        server, "/decisions/why-meta/justify", SAM, as_of=f"{linked['partition']}:{linked['offset'] - 1}"
    )
    assert before.status_code == 200, before.text
    assert [r["memory_id"] for r in before.json()["relied_on"]] == ["meta-cap"]
    assert len(before.json()["events"]) == 1 and before.json()["as_of"]
    # an operator links ann's own memory to sam's decision: sam's answer names neither it nor the link
    anns = {
        **SAMS,
        "memory_id": "anns",
        "label": "Ann's format",
        "stakeholders": {"user_id": "ann"},
        "source": "agent",
    }
    written(post(server, "/memories", anns, {"role": "agent", "user": "ads-agent", "on_behalf_of": "ann"}))
    hidden_link = written(
        post(server, "/associations", {"from": "anns", "to": "decision:why-meta", "relation": "supports"})
    )
    seen_by_sam = get(server, "/decisions/why-meta/justify", SAM).json()
    assert "anns" not in why.text and "anns" not in json.dumps(seen_by_sam)
    assert hidden_link["event_id"] not in [ev["event_id"] for ev in seen_by_sam["events"]]
    assert [ev["event_id"] for ev in seen_by_sam["events"]] == [ev["event_id"] for ev in j["events"]]
    seen_by_operator = get(server, "/decisions/why-meta/justify").json()
    assert "anns" in {r["memory_id"] for r in seen_by_operator["relied_on"]}
    assert hidden_link["event_id"] in [ev["event_id"] for ev in seen_by_operator["events"]]


def test_writes_naming_what_the_caller_may_not_see_are_404_as_missing(server: Server) -> None:
    session = written(post(server, "/sessions", {}, SAM_AGENT))["id"]
    cases = [
        (f"/sessions/{session}/episodes", f"/sessions/nope-{session[:4]}/episodes", {"summary": "x"}),
        (f"/sessions/{session}/end", f"/sessions/nope-{session[:4]}/end", {}),
    ]
    for hidden_path, missing_path, body in cases:
        hidden, missing = post(server, hidden_path, body, ANN), post(server, missing_path, body, ANN)
        assert hidden.status_code == missing.status_code == 404, (hidden.text, missing.text)
        assert hidden.json()["detail"][0]["msg"].replace(session, "X") == missing.json()["detail"][0][
            "msg"
        ].replace(f"nope-{session[:4]}", "X")
    for field, value in (("relied_on", ["sams"]), ("session_id", session)):
        hidden = post(server, "/decisions", {"decision": "x", field: value}, ANN)
        missing = post(
            server, "/decisions", {"decision": "x", field: ["zzzz"] if field == "relied_on" else "zzzz"}, ANN
        )
        assert hidden.status_code == missing.status_code == 404
        assert hidden.json()["detail"][0]["msg"].replace("sams", "X").replace(session, "X") == missing.json()[
            "detail"
        ][0]["msg"].replace("zzzz", "X")


def test_associate_links_what_both_ends_show_and_rules_use(server: Server) -> None:
    link = written(
        post(server, "/associations", {"from": "sams", "to": "meta-cap", "relation": "refines"}, SAM)
    )
    assert link["id"]
    derived = get(server, "/memories/sams", SAM).json()["derived"]
    assert {(d["predicate"], d["value"]) for d in derived} >= {("refines", "meta-cap")}
    written(post(server, "/decisions", {"decision_id": "tone", "decision": "use tables"}, SAM_AGENT))
    written(
        post(server, "/associations", {"from": "sams", "to": "decision:tone", "relation": "supports"}, SAM)
    )
    assert [d["id"] for d in get(server, "/decisions", SAM, relied_on="sams").json()["data"]] == ["tone"]
    pairs = [  # (hidden end, the same with a missing id): sam's memory, sam's decision
        ({"from": "sams", "to": "meta-cap"}, {"from": "zzzz", "to": "meta-cap"}),
        ({"from": "meta-cap", "to": "decision:tone"}, {"from": "meta-cap", "to": "decision:zzzz"}),
    ]
    for hidden_body, missing_body in pairs:
        hidden = post(server, "/associations", {**hidden_body, "relation": "supports"}, ANN)
        missing = post(server, "/associations", {**missing_body, "relation": "supports"}, ANN)
        assert hidden.status_code == missing.status_code == 404, (hidden.text, missing.text)
        said = hidden.json()["detail"][0]["msg"].replace("sams", "X").replace("tone", "X")
        assert said == missing.json()["detail"][0]["msg"].replace("zzzz", "X")
    assert (
        post(
            server, "/associations", {"from": "sams", "to": "meta-cap", "relation": "hates"}, SAM
        ).status_code
        == 422
    )
    assert (
        post(server, "/associations", {"from": "sams", "to": "sams", "relation": "supports"}, SAM).status_code
        == 422
    )
    refused = post(
        server,
        "/associations",
        {"from": "meta-cap", "to": "roas-target", "relation": "supports", "source": "pipeline"},
        PIPELINE,
    )
    assert refused.status_code == 403 and "a pipeline may only emit" in refused.text


def test_an_association_is_removed_by_its_user_and_what_it_implied_goes(server: Server) -> None:
    written(post(server, "/decisions", {"decision_id": "unlink", "decision": "Pause TikTok"}, SAM_AGENT))
    body = {"from": "roas-target", "to": "decision:unlink", "relation": "supports"}
    link = written(post(server, "/associations", body, SAM))["id"]

    def relied_on() -> list[str]:
        return [d["id"] for d in get(server, "/decisions", SAM, relied_on="roas-target").json()["data"]]

    assert "unlink" in relied_on()
    hidden = post(server, f"/associations/{link}/remove", {}, ANN)  # sam's: ann is told it is missing
    missing = post(server, "/associations/zzzz/remove", {}, ANN)
    assert hidden.status_code == missing.status_code == 404, (hidden.text, missing.text)
    assert hidden.text.replace(link, "X") == missing.text.replace("zzzz", "X")
    assert hidden.json()["detail"][0]["loc"] == ["path"]
    for bad in ({"reason": "  "}, {"reason": "x", "extra": 1}):
        assert post(server, f"/associations/{link}/remove", bad, SAM).status_code == 422
    assert post(server, "/associations/..%2Fx/remove", {}, SAM).status_code in (404, 422)
    removed = written(post(server, f"/associations/{link}/remove", {"reason": "wrong decision"}, SAM))
    assert removed["id"] == link
    assert "unlink" not in relied_on()
    why = get(server, "/decisions/unlink/justify", SAM).json()
    assert why["relied_on"] == [] and [e["type"] for e in why["events"]] == ["DecisionRecorded"]
    again = post(server, f"/associations/{link}/remove", {}, SAM)
    assert again.status_code == 404 and f"association {link} not found" in again.text


def test_live_equals_replay(server: Server, tmp_path: Path) -> None:
    """Last in the module: every write above, replayed from the log, makes the same graph."""
    live = server.http.get(f"{server.url}/v1/tenants/{T}/graph", timeout=30)
    assert live.status_code == 200
    graph = asyncio.run(replay_tenant(server.settings, T, tmp_path / "replay"))
    assert graph is not None
    replayed = export_nquads(graph)
    del graph
    gc.collect()
    assert "DecisionRecord" in replayed and replayed == live.text
