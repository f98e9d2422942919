"""The read-side verbs over a real server, a real broker and real indexes (MiniLM embeddings):
recognize, justify, resolve and summarise on small seeded tenants, what a principal may not see
(answered exactly as what does not exist), resolve's dry run against its apply, summarise's
determinism, justify as of a past log position, and hostile requests.

One server for the module; each test seeds tenants of its own."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from engram.settings import Settings
from tests.harness import Server, serving

pytestmark = pytest.mark.integration

SAM = {"role": "user", "user": "sam", "teams": ["growth"]}
ANN = {"role": "user", "user": "ann", "teams": ["brand"]}
WHO = {"source": "operator"}
CAP = {
    "memory_id": "cap",
    "label": "Meta cap",
    "content": "Max $40k a month on Meta ads.",
    "kind": "objective",
    "importance": 5,
    "memory_class": "BudgetConstraintMemory",
    "purpose": "onboarding",
    "properties": {"platform": "meta", "amount": 40000.0, "currency": "USD", "period": "month"},
}
VOICE = {
    "memory_id": "voice",
    "label": "Brand voice",
    "kind": "preference",
    "importance": 4,
    "content": "Our brand voice is warm, plain and friendly; never salesy.",
}
LAUNCH = {
    "memory_id": "launch",
    "label": "Launch day",
    "content": "The spring launch is on 3 March.",
    "kind": "fact",
    "importance": 3,
}
SECRET = {
    "memory_id": "secret",
    "label": "Secret plan",
    "content": "Sam plans to move budget to TikTok.",
    "kind": "fact",
    "importance": 3,
    "scope": "user",
    "stakeholders": {"user_id": "sam"},
}


@pytest.fixture(scope="module")
def srv(broker: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = serving(broker, tmp_path_factory.mktemp("verbs"))
    yield server
    server.stop()


def tenant() -> str:
    return f"v-{uuid.uuid4().hex[:10]}"


def call(
    srv: Server, method: str, t: str, path: str, body: Any = None, params: Any = None, **principal: Any
) -> Any:
    headers = srv.bearer(t, **principal) if principal else {}
    return srv.http.request(
        method, f"{srv.url}/v1/tenants/{t}{path}", json=body, params=params, headers=headers, timeout=60
    )


def write(srv: Server, t: str, body: dict[str, Any], path: str = "/memories", **principal: Any) -> Any:
    r = call(srv, "POST", t, path, {**WHO, **body}, {"wait": "true"}, **principal)
    assert r.status_code == 202 and r.json()["applied"], r.text
    return r.json()


def seed(srv: Server, t: str, *, secret: bool) -> None:
    """The company's cap, voice and launch day; with ``secret``, Sam's private plan too. Each at a
    valid time of its own, so two tenants seeded alike answer alike."""
    for day, memory in enumerate((CAP, VOICE, LAUNCH), start=1):
        write(srv, t, {**memory, "occurred_at": f"2026-01-0{day}T00:00:00Z"})
    if secret:
        write(srv, t, {**SECRET, "occurred_at": "2026-01-04T00:00:00Z"}, **SAM)


def recognize(srv: Server, t: str, **body: Any) -> Any:
    principal = body.pop("who", {})
    r = call(srv, "POST", t, "/recognize", body, **principal)
    assert r.status_code == 200, r.text
    return r


def reasons(r: Any) -> dict[str, str]:
    return {m["id"]: m["reason"] for m in r.json()["matches"]}


def test_recognize_answers_exact_structural_and_similar_matches(srv: Server) -> None:
    t = tenant()
    seed(srv, t, secret=True)
    exact = recognize(srv, t, label="  meta\tCAP ").json()
    assert exact["known"] and exact["matches"][0] == {
        "id": "cap",
        "reason": "exact",
        "label": "Meta cap",
        "memory_class": "BudgetConstraintMemory",
        "kind": "objective",
        "scope": "company",
        "active": True,
        "score": None,
        "key": None,
    }
    # another label, the same rules' key: a budget cap on the same platform, in the company's scope
    structural = recognize(
        srv,
        t,
        label="Meta spend ceiling",
        memory_class="BudgetConstraintMemory",
        scope="company",
        properties={"platform": "meta"},
    ).json()
    assert structural["matches"][0]["id"] == "cap" and structural["matches"][0]["reason"] == "structural"
    assert "platform=meta" in structural["matches"][0]["key"]
    assert (
        reasons(
            recognize(
                srv,
                t,
                label="Meta spend ceiling",
                memory_class="BudgetConstraintMemory",
                properties={"platform": "google"},
                min_score=0.99,
            )
        )
        == {}
    )
    similar = recognize(srv, t, label="Tone of our copy", content="Our brand's voice is friendly and warm.")
    first = similar.json()["matches"][0]
    assert (first["id"], first["reason"]) == ("voice", "similar") and first["score"] >= 0.5, similar.text
    nothing = recognize(srv, t, label="Quarterly hiring freeze", content="No new hires until July.")
    assert nothing.json() == {"known": False, "matches": []}
    # Sam sees his own plan; Ann does not, and is answered exactly as in a tenant where it never was
    assert reasons(recognize(srv, t, label="secret PLAN", who=SAM))["secret"] == "exact"
    other = tenant()
    seed(srv, other, secret=False)
    for body in (
        {"label": "Secret plan"},
        {"label": "Plans for TikTok", "content": SECRET["content"]},
        {"label": "Secret plan", "memory_class": "Memory", "scope": "user"},
    ):
        hidden = recognize(srv, t, **body, who=ANN)
        missing = recognize(srv, other, **body, who=ANN)
        assert "secret" not in reasons(hidden)
        assert hidden.content == missing.content, (hidden.text, missing.text)


def test_justify_gives_provenance_events_chain_and_derivation_trees(srv: Server) -> None:
    t = tenant()
    first = write(srv, t, CAP)
    revised = call(srv, "PATCH", t, "/memories/cap", {**WHO, "label": "Meta monthly cap"}, {"wait": "true"})
    assert revised.status_code == 202, revised.text
    spend = {"platform": "meta", "amount": 38000.0, "currency": "USD", "period": "2026-12"}
    write(srv, t, spend, "/spend", role="pipeline", user="etl")
    r = call(srv, "GET", t, "/memories/cap/justify")
    assert r.status_code == 200, r.text
    got = r.json()
    assert (got["label"], got["source"], got["purpose"]) == ("Meta monthly cap", "operator", "onboarding")
    assert got["actor"] == {"id": "dana", "role": "operator"} and got["active"] is True
    assert [e["offset"] for e in got["events"]] == sorted(e["offset"] for e in got["events"])
    assert len(got["events"]) == 2 and got["events"][0]["event_id"] == first["event_id"]
    assert got["statuses"]["budgetStatus"] == "near_limit" and got["as_of"] is None
    status = call(srv, "GET", t, "/memories/cap/justify", params={"status": "budgetStatus"}).json()
    assert [d["predicate"] for d in status["derived"]] == ["budgetStatus"]
    tree = status["derived"][0]["derivations"][0]
    assert tree["rule"].startswith("budget.dlog:") and "38,000" in tree["explanation"]
    assert any("because" in i for i in tree["inputs"])  # an inferred input, explained in turn
    none = call(srv, "GET", t, "/memories/cap/justify", params={"status": "targetStatus"})
    assert none.status_code == 404 and none.json()["detail"][0]["loc"] == ["query", "status"]
    # as of the first write's position: the label it had, one event, no spend yet
    past = call(
        srv, "GET", t, "/memories/cap/justify", params={"as_of": f"{first['partition']}:{first['offset']}"}
    )
    assert past.status_code == 200, past.text
    then = past.json()
    assert (then["label"], len(then["events"])) == ("Meta cap", 1) and "budgetStatus" not in then["statuses"]
    assert then["as_of"] == f"{first['partition']}:{first['offset']}"
    # the supersession chain, both ways
    write(srv, t, {**CAP, "memory_id": "cap2", "label": "Meta cap 2026", "on_conflict": "replace"})
    old = call(srv, "GET", t, "/memories/cap/justify").json()
    assert old["supersession"] == {"superseded_by": ["cap2"], "supersedes": []} and old["active"] is False
    assert call(srv, "GET", t, "/memories/cap2/justify").json()["supersession"]["supersedes"] == ["cap"]


def test_justify_answers_a_hidden_memory_as_a_missing_one(srv: Server) -> None:
    t = tenant()
    write(srv, t, SECRET, **SAM)
    assert call(srv, "GET", t, "/memories/secret/justify", **SAM).status_code == 200
    for params in ({}, {"status": "budgetStatus"}):
        hidden = call(srv, "GET", t, "/memories/secret/justify", params=params, **ANN)
        missing = call(srv, "GET", t, "/memories/nosuch/justify", params=params, **ANN)
        assert hidden.status_code == missing.status_code == 404
        assert hidden.content == missing.content.replace(b"nosuch", b"secret")


def conflicted(srv: Server, t: str) -> None:
    """Two company facts with one label (kept both: a structural conflict), the older one more
    confident; and a pair of Sam's own, the same way."""
    write(
        srv,
        t,
        {
            "memory_id": "d1",
            "label": "Launch day",
            "content": "3 March",
            "kind": "fact",
            "importance": 3,
            "confidence": 0.9,
            "occurred_at": "2026-01-01T00:00:00Z",
        },
    )
    write(
        srv,
        t,
        {
            "memory_id": "d2",
            "label": "launch DAY",
            "content": "10 March",
            "kind": "fact",
            "importance": 3,
            "confidence": 0.6,
            "on_conflict": "keep_both",
            "occurred_at": "2026-02-01T00:00:00Z",
        },
    )
    mine = {"kind": "preference", "importance": 3, "scope": "user", "stakeholders": {"user_id": "sam"}}
    write(srv, t, {**mine, "memory_id": "s1", "label": "Standup", "content": "at 9"}, **SAM)
    write(
        srv,
        t,
        {**mine, "memory_id": "s2", "label": "Standup", "content": "at 10", "on_conflict": "keep_both"},
        **SAM,
    )


def resolve(srv: Server, t: str, body: dict[str, Any], apply: bool = False, **principal: Any) -> Any:
    params = {"apply": str(apply).lower(), "wait": "true"}
    return call(srv, "POST", t, "/conflicts/resolve", {**WHO, **body}, params, **principal)


def active(srv: Server, t: str, memory_id: str) -> bool:
    return call(srv, "GET", t, f"/memories/{memory_id}").json()["active"]  # type: ignore[no-any-return]


def test_resolve_dry_run_apply_and_governance(srv: Server) -> None:
    t = tenant()
    conflicted(srv, t)
    before = call(srv, "GET", t, "/graph").text
    newer = resolve(srv, t, {"policy": "prefer_newer"})
    assert newer.status_code == 200, newer.text
    sets = {s["winner"]: s for s in newer.json()["sets"]}
    assert newer.json()["applied"] is False and set(sets) == {"d2", "s2"}
    assert sets["d2"]["members"] == ["d1", "d2"] and sets["d2"]["scope"] == "company"
    assert sets["d2"]["superseded"] == [
        {
            "memory_id": "d1",
            "superseded_by": "d2",
            "event": None,
            "reason": "newer: valid from 2026-02-01T00:00:00Z over 2026-01-01T00:00:00Z",
        }
    ]
    confident = resolve(srv, t, {"policy": "prefer_higher_confidence", "memory_ids": ["d2"]}).json()
    assert [(s["winner"], s["superseded"][0]["reason"]) for s in confident["sets"]] == [
        ("d1", "confidence 0.9 over 0.6")
    ]
    assert call(srv, "GET", t, "/graph").text == before  # a dry run writes nothing
    # Ann sees neither Sam's set nor, by id, his memories (as if they did not exist)
    assert [s["winner"] for s in resolve(srv, t, {"policy": "prefer_newer"}, **ANN).json()["sets"]] == ["d2"]
    hidden = resolve(srv, t, {"policy": "prefer_newer", "memory_ids": ["s1"]}, **ANN)
    missing = resolve(srv, t, {"policy": "prefer_newer", "memory_ids": ["zz"]}, **ANN)
    assert hidden.status_code == missing.status_code == 404
    assert hidden.content == missing.content.replace(b"zz", b"s1")
    # Sam may not supersede the company's memories: refused whole, nothing written
    refused = resolve(srv, t, {"policy": "prefer_newer"}, apply=True, **SAM)
    assert refused.status_code == 403, refused.text
    assert active(srv, t, "d1") and active(srv, t, "s1")
    mine = resolve(srv, t, {"policy": "prefer_newer", "memory_ids": ["s1"]}, apply=True, **SAM)
    assert mine.status_code == 202, mine.text
    assert mine.json()["sets"][0]["superseded"][0]["event"]["applied"] is True
    assert not active(srv, t, "s1") and active(srv, t, "s2")
    done = resolve(srv, t, {"policy": "prefer_higher_confidence"}, apply=True)
    assert done.status_code == 202 and done.json()["applied"] is True
    loser = call(srv, "GET", t, "/memories/d2").json()
    assert (loser["active"], loser["superseded_by"]) == (False, "d1")
    assert resolve(srv, t, {"policy": "prefer_newer"}).json()["sets"] == []  # nothing left to resolve
    unconflicted = resolve(srv, t, {"policy": "prefer_newer", "memory_ids": ["d1"]})
    assert unconflicted.status_code == 422 and "in no conflict" in unconflicted.json()["detail"][0]["msg"]


def test_summarise_is_deterministic_and_sees_only_what_the_reader_may(srv: Server) -> None:
    t, other = tenant(), tenant()
    seed(srv, t, secret=True)
    seed(srv, other, secret=False)
    write(
        srv,
        t,
        {"platform": "meta", "amount": 41000.0, "currency": "USD", "period": "2026-12"},
        "/spend",
        role="pipeline",
        user="etl",
    )
    r = call(srv, "GET", t, "/summary", params={"topic": "Meta ads budget"})
    assert r.status_code == 200, r.text
    got = r.json()
    assert "cap" in [i["id"] for i in got["top"]] and got["statuses"]["budgetStatus"] == {"over_budget": 1}
    assert got["topic"] == "Meta ads budget" and got["text"].startswith("# Summary: Meta ads budget\n")
    for _ in range(3):
        assert call(srv, "GET", t, "/summary", params={"topic": "Meta ads budget"}).content == r.content
    everything = call(srv, "GET", t, "/summary", params={"top": 2}).json()
    assert (everything["count"], everything["active"]) == (4, 4)
    assert everything["by_kind"] == {"fact": 2, "objective": 1, "preference": 1}
    assert [i["id"] for i in everything["top"]] == ["cap", "voice"]  # by importance
    assert everything["by_scope"] == {"company": 3, "user": 1}
    # Ann's summary is the one of a tenant without Sam's plan (the spend aside: same for both)
    write(
        srv,
        other,
        {"platform": "meta", "amount": 41000.0, "currency": "USD", "period": "2026-12"},
        "/spend",
        role="pipeline",
        user="etl",
    )
    for params in ({}, {"topic": "TikTok budget plans"}):
        mine = call(srv, "GET", t, "/summary", params=params, **ANN)
        theirs = call(srv, "GET", other, "/summary", params=params, **ANN)
        assert mine.status_code == 200 and mine.content == theirs.content
    assert call(srv, "GET", t, "/summary", **SAM).json()["count"] == 4


def test_summarise_a_session_and_as_of_a_moment(srv: Server) -> None:
    t = tenant()
    seed(srv, t, secret=False)  # the cap, the voice and the launch day
    write(srv, t, {"session_id": "s1", "goal": "December plan", "source": "agent"}, "/sessions")
    decided = {"decision_id": "d1", "session_id": "s1", "decision": "Hold Meta spend", "relied_on": ["cap"]}
    before = write(srv, t, {**decided, "source": "agent"}, "/decisions")
    write(
        srv, t, {"episode_id": "e1", "summary": "Drafts the copy", "source": "agent"}, "/sessions/s1/episodes"
    )
    link = {"from": "voice", "to": "episode:e1", "relation": "relates_to", "source": "agent"}
    write(srv, t, link, "/associations")

    def summary(**params: Any) -> Any:
        r = call(srv, "GET", t, "/summary", params=params)
        assert r.status_code == 200, r.text
        return r.json()

    got = summary(session="s1")
    assert sorted(i["id"] for i in got["top"]) == ["cap", "voice"] and got["count"] == 2  # not the launch day
    assert (got["session"], got["topic"], got["as_of"]) == ("s1", None, None)
    assert got["text"].startswith("# Summary: session s1\n")
    assert [i["id"] for i in summary(session="s1", topic="brand voice")["top"]] == ["voice"]
    position = f"{before['partition']}:{before['offset']}"
    then = summary(session="s1", as_of=position)  # the decision recorded, the association not yet
    assert ([i["id"] for i in then["top"]], then["as_of"]) == (["cap"], position)
    assert summary(as_of=position)["count"] == 3 == summary()["count"]
    for params, who in (({"session": "s1"}, ANN), ({"session": "nope"}, {})):
        r = call(srv, "GET", t, "/summary", params=params, **who)
        assert r.status_code == 404 and r.json()["detail"][0]["loc"] == ["query", "session"], r.text


HOSTILE: list[tuple[str, str, Any, Any]] = [
    ("POST", "/recognize", {}, None),
    ("POST", "/recognize", {"label": ""}, None),
    ("POST", "/recognize", {"label": "   "}, None),
    ("POST", "/recognize", {"label": "x", "extra": 1}, None),
    ("POST", "/recognize", {"label": "x", "limit": 1000}, None),
    ("POST", "/recognize", {"label": "x", "limit": True}, None),
    ("POST", "/recognize", {"label": "\ud800"}, None),
    ("POST", "/recognize", {"label": "x", "memory_class": "not a class"}, None),
    ("POST", "/recognize", {"label": "x", "scope": "galaxy"}, None),
    ("POST", "/recognize", {"label": "x", "min_score": float("nan")}, None),
    ("POST", "/recognize", {"label": "x", "properties": {"bad name": 1}}, None),
    ("POST", "/recognize", ["label"], None),
    ("POST", "/conflicts/resolve", {**WHO, "policy": "prefer_luck"}, None),
    ("POST", "/conflicts/resolve", {**WHO}, None),
    ("POST", "/conflicts/resolve", {"policy": "prefer_newer"}, None),
    ("POST", "/conflicts/resolve", {**WHO, "policy": "prefer_newer", "memory_ids": []}, None),
    ("POST", "/conflicts/resolve", {**WHO, "policy": "prefer_newer", "memory_ids": ["../x"]}, None),
    (
        "POST",
        "/conflicts/resolve",
        {**WHO, "policy": "prefer_newer", "actor": {"id": "eve", "role": "operator"}},
        None,
    ),
    ("POST", "/conflicts/resolve", {**WHO, "policy": "prefer_newer"}, {"apply": "maybe"}),
    ("GET", "/memories/cap/justify", None, {"status": "a b"}),
    ("GET", "/memories/cap/justify", None, {"as_of": "yesterday"}),
    ("GET", "/memories/cap/justify", None, {"why": "x"}),
    ("GET", "/memories/..%2Fx/justify", None, None),
    ("GET", "/summary", None, {"top": "-1"}),
    ("GET", "/summary", None, {"topic": "   "}),
    ("GET", "/summary", None, {"topic": ""}),
    ("GET", "/summary", None, {"session": "s1"}),
    ("GET", "/summary", None, {"session": "../s1"}),
    ("GET", "/summary", None, {"as_of": "yesterday"}),
]


def test_hostile_requests_are_refused_with_a_reason(srv: Server) -> None:
    t = tenant()
    write(srv, t, CAP)
    for method, path, body, params in HOSTILE:
        raw = None if body is None else json.dumps(body).encode()  # escapes a lone surrogate, says NaN
        r = srv.http.request(
            method,
            f"{srv.url}/v1/tenants/{t}{path}",
            content=raw,
            params=params,
            headers={"Content-Type": "application/json"},
        )
        assert r.status_code in (400, 404, 422), (path, body, params, r.status_code, r.text)
        detail = r.json()["detail"]
        assert detail and detail[0]["msg"] and "input" not in detail[0], (path, body, r.text)
    stranger = srv.http.post(
        f"{srv.url}/v1/tenants/{t}/recognize",
        json={"label": "x"},
        headers=srv.bearer("elsewhere", role="operator"),
    )
    assert stranger.status_code == 404  # another tenant's token: the tenant is not found
