"""Recall and the per-turn context through a real server, a real broker and real indexes.

The server embeds with all-MiniLM-L6-v2 (the default), so "similar" here means what it means in
production.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from engram.schemas.events import event_from_json
from engram.streams.embedder import load_embedder
from engram.streams.objects import S3Objects, open_objects
from engram.streams.pipeline import embed_missing
from engram.streams.producer import EventProducer
from engram.streams.topics import ensure_topics

from engram.settings import Settings
from tests.harness import Server, isolated_settings
from tests.realtalk import available, load_chats, recall_at, remember_lines

pytestmark = pytest.mark.integration

OPERATOR = {"source": "operator", "actor": {"id": "dana", "role": "operator"}}
HEADLINE_NOISE = [
    ("Headline style", "Headlines use sentence case and stay under eight words."),
    ("Headline tests", "We A/B test three headlines per ad set before scaling."),
    ("Copy tone", "Ad copy is warm and plain; write headlines like a friend talking."),
    ("Hero headline", "The spring launch headline was 'Sleep better tonight'."),
    ("Headline length", "Short headlines beat long ones on mobile placements."),
    ("Drafting copy", "Drafts of ad headlines go to Sam for review before launch."),
    ("Headline words", "Avoid the words 'cheap' and 'free' in any headline."),
    ("Subject lines", "Email subject lines follow the same rules as ad headlines."),
]


@pytest.fixture(scope="module")
def rserver(broker: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Settings]]:
    root = tmp_path_factory.mktemp("recall")
    settings = isolated_settings(broker, root / "data")
    if settings.s3_endpoint:  # any S3 (ENGRAM_S3_ENDPOINT): a bucket of this module's own
        settings = settings.model_copy(update={"s3_bucket": settings.topic_prefix})
    asyncio.run(ensure_topics(settings))
    srv = Server(settings, root / "server.log").start()
    srv.wait_ready()
    yield srv, settings
    srv.stop()
    if settings.s3_endpoint:
        objects = open_objects(settings)
        assert isinstance(objects, S3Objects)
        for key in objects.list():
            objects.delete(key)
        objects.client.delete_bucket(Bucket=objects.bucket)


def tenant() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


def write(srv: Server, t: str, *, wait: bool = True, **body: Any) -> dict[str, Any]:
    """Written by the operator dana; a user-scoped memory by its user (as the rules want)."""
    payload = {**OPERATOR, "kind": "fact", "importance": 3, **body}
    headers = {}
    if payload.get("scope") == "user":
        user = payload["stakeholders"]["user_id"]
        headers = srv.bearer(t, role="user", user=user)
        payload["actor"] = {"id": user, "role": "user"}
    r = srv.http.post(
        f"{srv.url}/v1/tenants/{t}/memories",
        params={"wait": str(wait).lower()},
        json=payload,
        headers=headers,
        timeout=40,
    )
    assert r.status_code == 202, r.text
    return r.json()  # type: ignore[no-any-return]


def recall(srv: Server, t: str, **body: Any) -> list[dict[str, Any]]:
    r = srv.http.post(f"{srv.url}/v1/tenants/{t}/recall", json=body, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()["data"]  # type: ignore[no-any-return]


def as_user(srv: Server, t: str, user: str | None, teams: list[str] | None = None) -> dict[str, str]:
    """The bearer header of ``user`` of tenant ``t`` (none: the operator the client speaks as)."""
    return srv.bearer(t, role="user", user=user, teams=teams or []) if user else {}


def context(
    srv: Server, t: str, *, user: str | None = None, teams: list[str] | None = None, **params: Any
) -> dict[str, Any]:
    r = srv.http.get(
        f"{srv.url}/v1/tenants/{t}/context", params=params, headers=as_user(srv, t, user, teams), timeout=30
    )
    assert r.status_code == 200, r.text
    assert r.headers["cache-control"] == "no-store"
    return r.json()  # type: ignore[no-any-return]


def ids_in(ctx: dict[str, Any]) -> list[str]:
    return [it["id"] for b in ctx["blocks"] for it in b["items"]]


def meta_cap(srv: Server, t: str) -> None:
    write(
        srv,
        t,
        memory_id="meta-cap",
        label="Meta monthly cap",
        content="Never spend more than $40k/month on Meta.",
        kind="objective",
        importance=5,
        memory_class="BudgetConstraintMemory",
        properties={"platform": "meta", "amount": 40000.0, "currency": "USD", "period": "month"},
    )


def test_a_hard_constraint_is_in_the_context_where_vector_top_k_misses_it(
    rserver: tuple[Server, Settings],
) -> None:
    srv, _ = rserver
    t = tenant()
    meta_cap(srv, t)
    for i, (label, content) in enumerate(HEADLINE_NOISE):
        write(srv, t, memory_id=f"copy-{i}", label=label, content=content, kind="preference")
    q = "draft me three headlines"
    top5 = [h["id"] for h in recall(srv, t, q=q, limit=5, fusion="vector")]
    print({"vector_top5": top5})
    assert len(top5) == 5 and "meta-cap" not in top5  # similarity alone drops the constraint
    ctx = context(srv, t, q=q)
    assert "meta-cap" in ids_in(ctx)
    block = next(b for b in ctx["blocks"] if b["title"] == "Budget constraints")
    assert [it["id"] for it in block["items"]] == ["meta-cap"]
    assert "Meta monthly cap" in ctx["text"] and ctx["tokens"] > 0


def test_blocks_order_statuses_and_live_data(rserver: tuple[Server, Settings]) -> None:
    srv, _ = rserver
    t = tenant()
    meta_cap(srv, t)
    write(
        srv,
        t,
        memory_id="goal",
        label="Grow",
        content="Grow signups 20% this quarter",
        kind="objective",
        importance=4,
    )
    write(
        srv,
        t,
        memory_id="pref-a",
        label="Voice",
        content="Plain words, warm tone",
        kind="preference",
        importance=4,
    )
    write(
        srv,
        t,
        memory_id="pref-b",
        label="Emoji",
        content="Never use emoji in headlines",
        kind="preference",
        importance=5,
    )
    write(
        srv, t, memory_id="fact", label="HQ", content="Headquarters are in Lisbon", kind="fact", importance=4
    )
    write(srv, t, memory_id="low", label="Low", content="Lunch is at noon", kind="fact", importance=3)
    r = srv.http.post(
        f"{srv.url}/v1/tenants/{t}/kpis",
        params={"wait": "true"},
        json={
            "source": "pipeline",
            "actor": {"id": "etl", "role": "pipeline"},
            "metric": "roas",
            "value": 2.7,
            "period": "2026-11",
        },
        headers=srv.bearer(t, role="pipeline", user="etl"),
        timeout=30,
    )
    assert r.status_code == 202, r.text
    ctx = context(srv, t, q="emoji in headlines")
    assert [b["title"] for b in ctx["blocks"]] == ["Objectives", "Preferences", "Facts", "Budget constraints"]
    prefs = next(b for b in ctx["blocks"] if b["title"] == "Preferences")["items"]
    assert [it["id"] for it in prefs] == ["pref-b", "pref-a"]  # by similarity to q
    assert "low" not in ids_in(ctx)  # Medium is not a top tier
    cap = next(b for b in ctx["blocks"] if b["title"] == "Budget constraints")["items"][0]
    assert cap["set_by"] == {"source": "operator", "actor": "dana", "role": "operator"} and cap["set_at"]
    assert cap["owner"] == "company" and cap["importance_name"] == "Critical"
    assert ctx["snapshot"]["kpis"] == [
        {
            "metric": "roas",
            "value": 2.7,
            "period": "2026-11",
            "periodKind": "month",
            "periodStart": "2026-11-01T00:00:00Z",
            "periodEnd": "2026-12-01T00:00:00Z",
            "series": "kpi/roas",
            "observedAt": ctx["snapshot"]["kpis"][0]["observedAt"],
        }
    ]
    assert "## Live data" in ctx["text"] and "KPI roas: 2.7" in ctx["text"]


def test_precedence_user_over_company_and_the_accidental_flag(rserver: tuple[Server, Settings]) -> None:
    srv, _ = rserver
    t = tenant()
    write(
        srv,
        t,
        memory_id="tone-co",
        label="Emoji policy",
        content="No emoji anywhere.",
        kind="preference",
        importance=4,
    )
    write(
        srv,
        t,
        memory_id="tone-bob",
        label="Emoji policy",
        content="Emoji are fine in my drafts.",
        kind="preference",
        importance=4,
        scope="user",
        stakeholders={"user_id": "bob"},
        source="agent",
        actor={"id": "bob", "role": "user"},
    )
    bob = context(srv, t, user="bob")
    assert set(ids_in(bob)) == {"tone-co", "tone-bob"}
    [flag] = bob["conflicts"]
    assert flag["winner"] == "tone-bob" and flag["overridden"] == "tone-co"
    assert flag["looks_accidental"] is True and "looks accidental" in flag["note"]
    items = {it["id"]: it for b in bob["blocks"] for it in b["items"]}
    assert items["tone-co"]["overridden_by"] == ["tone-bob"] and items["tone-bob"]["owner"] == "user:bob"
    alice = context(srv, t, user="alice")
    assert ids_in(alice) == ["tone-co"] and alice["conflicts"] == []  # bob's memory is bob's


def test_the_cap_and_expiry_are_the_rules(rserver: tuple[Server, Settings]) -> None:
    srv, settings = rserver
    t = tenant()
    for i in range(22):
        write(
            srv, t, memory_id=f"c{i:02}", label=f"Rule {i}", content=f"company rule number {i}", importance=5
        )
    write(
        srv,
        t,
        memory_id="promo",
        label="Promo",
        content="Black Friday promo code BF26 is live",
        importance=5,
        scope="user",
        stakeholders={"user_id": "bob"},
        expires_at="2026-01-01T00:00:00Z",
    )
    before = context(srv, t, user="bob")
    assert sum(1 for i in ids_in(before) if i.startswith("c")) == 20  # :liveContextCap 20
    assert "promo" in ids_in(before)  # no clock yet: nothing has expired

    async def tick() -> None:
        ev = event_from_json(
            {
                "type": "ClockTicked",
                "tenant": t,
                "source": "system",
                "actor": {"id": "clock", "role": "pipeline"},
                "payload": {"now": "2026-06-01T00:00:00Z"},
            }
        )
        async with EventProducer(settings) as producer:
            pos = await producer.send(ev)
        r = srv.http.get(
            f"{srv.url}/v1/tenants/{t}/context",
            params={"after": f"{pos.partition}:{pos.offset}"},
            headers=as_user(srv, t, "bob"),
        )
        assert r.status_code == 200
        assert "promo" not in ids_in(r.json())

    asyncio.run(tick())
    assert all(h["id"] != "promo" for h in recall(srv, t, q="promo code", limit=5))


def test_budget_tokens_and_read_your_writes(rserver: tuple[Server, Settings]) -> None:
    srv, _ = rserver
    t = tenant()
    for i in range(6):
        write(
            srv,
            t,
            memory_id=f"m{i}",
            label=f"Meta note {i}",
            content="Meta spend note " + "detail " * (5 * i),
        )
    full = recall(srv, t, q="meta spend", limit=10)
    packed = recall(srv, t, q="meta spend", limit=10, budget_tokens=30)
    assert len(packed) < len(full) == 6
    assert sum(h["tokens"] for h in packed) <= 30 and all(h["tokens"] > 0 for h in packed)
    keys = {"bm25", "vector", "recency", "forgetting", "context", "time", "bm25_query"}
    assert all(set(h["signals"]) == keys for h in full)
    scores = [h["score"] for h in full]
    assert scores == sorted(scores, reverse=True)

    written = write(
        srv, t, wait=False, memory_id="fresh", label="Fresh", content="Pause TikTok ads", importance=5
    )
    ctx = context(srv, t, after=f"{written['partition']}:{written['offset']}")
    assert "fresh" in ids_in(ctx)
    assert recall(srv, t, q="TikTok", limit=1)[0]["id"] == "fresh"  # searchable as soon as readable


def test_a_superseded_memory_never_appears(rserver: tuple[Server, Settings]) -> None:
    srv, _ = rserver
    t = tenant()
    write(srv, t, memory_id="old", label="Meta cap", content="Max $30k/month on Meta", importance=5)
    write(
        srv,
        t,
        memory_id="new",
        label="Meta cap",
        content="Max $45k/month on Meta",
        importance=5,
        replaces="old",
    )
    assert [h["id"] for h in recall(srv, t, q="Meta cap per month", limit=10)] == ["new"]
    assert ids_in(context(srv, t, q="meta")) == ["new"]
    got = srv.http.get(f"{srv.url}/v1/tenants/{t}/recall", params={"q": "30k", "limit": 10}).json()["data"]
    assert all(h["id"] != "old" for h in got)


def test_valid_at_answers_from_the_validity_intervals(rserver: tuple[Server, Settings]) -> None:
    """Superseded on 1 March: asked at a valid time before, list, get, recall and context answer
    with the old belief; after, with the new one; before either held, with neither."""
    srv, _ = rserver
    t = tenant()
    write(srv, t, memory_id="old", label="Meta cap", content="Max $30k/month on Meta", importance=5,
          occurred_at="2026-01-01T00:00:00Z")  # fmt: skip
    write(srv, t, memory_id="new", label="Meta cap", content="Max $45k/month on Meta", importance=5,
          replaces="old", occurred_at="2026-03-01T00:00:00Z")  # fmt: skip
    base = f"{srv.url}/v1/tenants/{t}"
    old = srv.http.get(f"{base}/memories/old").json()
    assert (old["valid_from"], old["valid_to"]) == ("2026-01-01T00:00:00Z", "2026-03-01T00:00:00Z")
    assert srv.http.get(f"{base}/memories/new").json()["valid_to"] is None
    for at, expected in [
        ("2025-12-31T23:59:59Z", []),
        ("2026-01-01", ["old"]),  # a date is midnight UTC
        ("2026-02-28T23:59:59.999+00:00", ["old"]),
        ("2026-03-01T00:00:00Z", ["new"]),  # validity is half-open: [valid_from, valid_to)
        ("2026-03-01T01:00:00+01:00", ["new"]),
        ("2030-01-01T00:00:00Z", ["new"]),
    ]:
        listed = srv.http.get(f"{base}/memories", params={"valid_at": at}).json()
        assert [m["id"] for m in listed["data"]] == expected and listed["count"] == len(expected), at
        for memory_id in ("old", "new"):
            got = srv.http.get(f"{base}/memories/{memory_id}", params={"valid_at": at})
            assert got.status_code == (200 if memory_id in expected else 404), (at, memory_id, got.text)
        assert [h["id"] for h in recall(srv, t, q="Meta cap per month", valid_at=at)] == expected, at
        hits = srv.http.get(f"{base}/recall", params={"q": "Meta cap", "valid_at": at}).json()["data"]
        assert [h["id"] for h in hits] == expected, at
        assert ids_in(context(srv, t, q="meta", valid_at=at)) == expected, at
    gone = srv.http.get(f"{base}/memories/old", params={"valid_at": "2026-03-02T00:00:00Z"}).json()
    assert (
        "did not hold at 2026-03-02T00:00:00+00:00: it held from 2026-01-01T00:00:00Z to 2026-03-01"
        in str(gone)
    )
    for path in ("memories", "memories/old", "context"):
        # percent-encoded as sent: a lone surrogate's UTF-8 bytes, a trailing newline, and so on
        for bad in (
            "yesterday",
            "2026-13-01",
            "%ED%B0%80",
            "9" * 70,
            "NaN",
            "2026-01-01T00:00:00Z%0A",
            "",
            "%00",
        ):
            r = srv.http.get(f"{base}/{path}?valid_at={bad}")
            assert r.status_code == 422 and "valid_at" in r.text, (path, bad, r.text)


def test_as_of_answers_as_the_live_reads_did_then(rserver: tuple[Server, Settings]) -> None:
    """Record the live answers of a sequence of reads while events arrive, then ask ``as_of`` each
    of those moments: the answers are the same, field for field. A read's moment is the ``now``
    its recall answer states (the clock its recency and forgetting were computed against); asked
    at a log position instead, everything but that clock's fields is the same."""
    srv, _ = rserver
    t = tenant()
    base = f"{srv.url}/v1/tenants/{t}"

    def reads(**params: str) -> dict[str, Any]:
        listed = srv.http.get(f"{base}/memories", params=params)
        r = srv.http.post(f"{base}/recall", params=params, json={"q": "Meta cap spend month"})
        assert listed.status_code == 200 and r.status_code == 200, (listed.text, r.text)
        return {
            "list": listed.json(),
            "get": {
                m["id"]: srv.http.get(f"{base}/memories/{m['id']}", params=params).json()
                for m in listed.json()["data"]
            },
            "recall": r.json(),
            "context": context(srv, t, q="meta", **params),
        }

    def unclocked(answers: dict[str, Any]) -> dict[str, Any]:
        recall = answers["recall"]
        hits = [{**h, "score": None, "signals": {**h["signals"], "recency": None, "forgetting": None}}
                for h in recall["data"]]  # fmt: skip
        return {**answers, "recall": {**recall, "data": hits, "now": None}}

    steps: list[dict[str, Any]] = [
        {"memory_id": "old", "label": "Meta cap", "content": "Max $30k/month on Meta", "importance": 5},
        {
            "memory_id": "tone",
            "label": "Tone",
            "content": "Friendly, no jargon",
            "importance": 4,
            "kind": "preference",
        },
        {
            "memory_id": "new",
            "label": "Meta cap",
            "content": "Max $45k/month on Meta",
            "importance": 5,
            "replaces": "old",
        },
    ]
    moments = []
    for body in steps:
        at = write(srv, t, **body)
        moments.append((f"{at['partition']}:{at['offset']}", reads()))
        time.sleep(0.005)  # the next event is appended after this read's millisecond
    r = srv.http.post(f"{base}/kpis", params={"wait": "true"},
                      json={**OPERATOR, "metric": "roas", "value": 2.5, "period": "2026-11"})  # fmt: skip
    assert r.status_code == 202, r.text
    moments.append((f"{r.json()['partition']}:{r.json()['offset']}", reads()))
    time.sleep(0.005)
    write(srv, t, memory_id="later", label="Later", content="Written after every moment", importance=5)
    for position, live in moments:
        assert reads(as_of=live["recall"]["now"]) == live, live["recall"]["now"]  # field for field
        assert unclocked(reads(as_of=position)) == unclocked(live), position
    assert reads()["list"] != moments[-1][1]["list"]  # the present has moved on
    home = int(moments[0][0].split(":")[0])
    for bad, reason in [(f"{home + 1}:0", "partition"), ("yesterday", "ISO-8601"), ("1:x", "ISO-8601")]:
        r = srv.http.get(f"{base}/memories", params={"as_of": bad})
        assert r.status_code == 422 and reason in r.text and "as_of" in r.text, (bad, r.text)
    assert srv.http.get(f"{base}/memories", params={"as_of": "2000-01-01T00:00:00Z"}).json()["count"] == 0


def test_a_snapshot_on_demand_is_where_an_as_of_replay_starts(rserver: tuple[Server, Settings]) -> None:
    srv, settings = rserver
    t = tenant()
    base = f"{srv.url}/v1/tenants/{t}"
    assert srv.http.post(f"{base}/snapshots").status_code == 404  # no tenant yet: nothing to copy
    first = write(srv, t, memory_id="one", label="One", content="The first", importance=4)
    r = srv.http.post(f"{base}/snapshots")
    assert r.status_code == 201, r.text
    snap = r.json()
    fmt = "tar" if settings.s3_endpoint else "dir"  # a directory of hard links locally, a tar in S3
    assert (snap["partition"], snap["offset"], snap["handled"]) == (first["partition"], first["offset"], 1)
    assert snap["key"] == f"snapshots/{t}/{first['offset']:020d}" and snap["format"] == fmt
    second = write(srv, t, memory_id="two", label="Two", content="The second", importance=4)
    assert srv.http.get(f"{base}/snapshots").json()["data"] == [snap]
    for at, ids in [(first, ["one"]), (second, ["two", "one"])]:
        listed = srv.http.get(f"{base}/memories", params={"as_of": f"{at['partition']}:{at['offset']}"})
        assert [m["id"] for m in listed.json()["data"]] == ids
    user = srv.bearer(t, role="user", user="sam")
    assert srv.http.post(f"{base}/snapshots", headers=user).status_code == 403
    assert srv.http.get(f"{base}/snapshots", headers=user).status_code == 403


def test_an_old_history_is_ranked_against_the_tenants_clock(rserver: tuple[Server, Settings]) -> None:
    """A conversation from 2019 is not all "zero recency" against the server's 2026: recency and
    forgetting run on the tenant's clock (the latest valid time it holds, then its clock node once
    one ticks), and the turn next to the best hit comes in with the score it borrowed from it."""
    srv, settings = rserver
    t = tenant()
    said = {**OPERATOR, "source": "extraction", "confidence": 0.9}
    turns = [
        ("o1", "2019-03-01T10:00:00Z", "Sam asks", "Where should the team offsite be this spring?"),
        ("o2", "2019-03-01T10:01:00Z", "Lee answers", "Lisbon, in the first week of May."),
        ("o3", "2019-03-01T10:02:00Z", "Sam agrees", "Great, book it."),
    ]
    for memory_id, when, who, text in turns:  # distinct labels: an equal one would replace it
        conversation = {"conversation_id": "chat-2019", "turn_ids": [memory_id]}
        write(
            srv,
            t,
            **said,
            memory_id=memory_id,
            occurred_at=when,
            label=who,
            content=text,
            evidence=conversation,
        )
    write(srv, t, **OPERATOR, memory_id="budget", occurred_at="2019-01-30T10:02:00Z",
          label="Offsite budget", content="The team offsite budget is 20k.")  # fmt: skip

    def ask() -> dict[str, Any]:
        r = srv.http.post(f"{srv.url}/v1/tenants/{t}/recall", json={"q": "where is the team offsite"})
        assert r.status_code == 200, r.text
        return r.json()  # type: ignore[no-any-return]

    answer = ask()
    assert answer["clock"] == "2019-03-01T10:02:00.000Z" and answer["now"] > "2026", answer
    hits = {h["id"]: h["signals"] for h in answer["data"]}
    assert set(hits) == {"o1", "o2", "o3", "budget"}, answer
    assert hits["o3"]["recency"] == 1.0 and hits["o1"]["recency"] > 0.99  # minutes old, not years
    assert 0.45 < hits["budget"]["recency"] < 0.55, hits["budget"]  # 30 days: one half-life
    assert hits["o2"]["context"] and hits["o2"]["context"] > 0, hits  # next to the best hits
    assert hits["budget"]["context"] is None, hits  # in no conversation: no neighbours

    async def tick() -> None:
        clock = {"id": "clock", "role": "pipeline"}
        ev = event_from_json({"type": "ClockTicked", "tenant": t, "source": "system",
                              "actor": clock, "payload": {"now": "2019-03-31T10:02:00Z"}})  # fmt: skip
        async with EventProducer(settings) as producer:
            await producer.send(ev)

    asyncio.run(tick())
    deadline = time.monotonic() + 20
    while (answer := ask())["clock"] != "2019-03-31T10:02:00.000Z" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert answer["clock"] == "2019-03-31T10:02:00.000Z", answer  # the clock node, once it ticked
    hits = {h["id"]: h["signals"] for h in answer["data"]}
    assert 0.45 < hits["o3"]["recency"] < 0.55, hits["o3"]


def test_recall_refuses_bad_input_with_a_reason(rserver: tuple[Server, Settings]) -> None:
    srv, _ = rserver
    url = f"{srv.url}/v1/tenants/acme"
    bad_bodies = [
        {"q": ""},
        {"q": "x", "limit": 0},
        {"q": "x", "limit": True},
        {"q": "x", "min_confidence": "0.5"},
        {"q": "x", "kind": ["nonsense"]},
        {"q": "x", "fusion": "magic"},
        {"q": "x", "unknown": 1},
        {"q": "x" * 5000},
    ]
    for body in bad_bodies:
        r = srv.http.post(f"{url}/recall", json=body)
        assert r.status_code == 422, (body, r.text)
        assert r.json()["detail"][0]["msg"]
    for raw in ('{"q": "x", "min_confidence": NaN}', '{"q": "\\ud800"}'):
        r = srv.http.post(f"{url}/recall", content=raw, headers={"content-type": "application/json"})
        assert r.status_code == 422, (raw, r.text)
    for params in ({"q": "x", "min_confidence": "nan"}, {"q": "x", "limit": "1e3"}):
        r = srv.http.get(f"{url}/recall", params=params)
        assert r.status_code == 422, (params, r.text)
    assert srv.http.get(f"{url}/context", params={"after": "1:2\n"}).status_code == 422
    for beyond in ("0:999999999", "4096:0"):  # well formed, but no write of the log is there
        r = srv.http.get(f"{url}/context", params={"after": beyond}, timeout=10)
        assert r.status_code == 422 and "not in the log" in r.json()["detail"][0]["msg"], r.text
    nobody = srv.http.get(f"{srv.url}/v1/tenants/nobody-here/recall", params={"q": "x"}).json()
    assert nobody["data"] == [] and nobody["tokens"] == 0 and nobody["now"].endswith("Z")
    assert not (srv.settings.tenants_dir / "nobody-here").exists()  # a read creates no tenant


def test_the_memory_tool_comes_from_the_ontology(rserver: tuple[Server, Settings]) -> None:
    srv, _ = rserver
    tool = srv.http.get(f"{srv.url}/v1/tenants/acme/memory-tool").json()
    schema = tool["input_schema"]
    assert tool["name"] == "remember" and schema == tool["parameters"]
    classes = schema["properties"]["memory_class"]["enum"]
    assert {"BudgetConstraintMemory", "PerformanceTargetMemory", "HiringCriteriaMemory"} <= set(classes)
    assert "LiveContext" not in classes


REALTALK_CHAT = "4"
REALTALK_FLOOR_R10 = 0.55  # measured 0.653 on this chat (minilm-int8); a regression trips it


@pytest.mark.skipif(not available(), reason="REALTALK not found: set ENGRAM_REALTALK_DIR")
def test_recall_quality_floor_on_a_realtalk_chat(rserver: tuple[Server, Settings], tmp_path: Path) -> None:
    srv, settings = rserver
    [chat] = load_chats(names=[REALTALK_CHAT])
    events = [(i, event_from_json(line)) for i, line in enumerate(remember_lines(chat))]
    # the server's model: a vector of another model is not searched (the route would rank by BM25 alone)
    events = embed_missing(events, load_embedder(settings.embedder))

    async def produce() -> None:
        async with EventProducer(settings) as producer:
            await producer.send_many(ev for _, ev in events)

    asyncio.run(produce())
    srv.wait_ready(timeout=300)
    scores, by_vector = [], 0
    for question in chat.questions:
        hits = recall(srv, chat.tenant, q=question.text, limit=10)
        scores.append(recall_at([h["id"] for h in hits], question.evidence, 10))
        by_vector += all(h["signals"]["vector"] is not None for h in hits)
    assert by_vector == len(scores)  # both signals ranked every answer, not BM25 alone
    r10 = sum(scores) / len(scores)
    print({"chat": REALTALK_CHAT, "questions": len(scores), "R@10": round(r10, 4)})
    assert r10 >= REALTALK_FLOOR_R10


def test_a_revised_memory_is_recalled_by_its_new_meaning(rserver: tuple[Server, Settings]) -> None:
    """Issue 26: a revision of content embeds the memory anew, so a query that shares no word with
    either text finds it by the vector signal of its new meaning, and no longer by its old one."""
    srv, _ = rserver
    t = tenant()
    write(srv, t, memory_id="m", label="Note", content="Our office dog is a golden retriever named Biscuit.")
    write(srv, t, memory_id="n", label="Holiday", content="The office closes between Christmas and New Year.")

    def signals(q: str) -> dict[str, Any]:
        return next(h["signals"] for h in recall(srv, t, q=q, limit=10) if h["id"] == "m")

    money, pet = "advertising budget", "puppy"
    before_money, before_pet = signals(money)["vector"], signals(pet)["vector"]
    r = srv.http.patch(
        f"{srv.url}/v1/tenants/{t}/memories/m",
        params={"wait": "true"},
        json={**OPERATOR, "content": "Paid search may spend fifty thousand dollars each quarter."},
        timeout=40,
    )
    assert r.status_code == 202, r.text
    hits = recall(srv, t, q=money, limit=10)
    assert hits[0]["id"] == "m" and not hits[0]["signals"]["bm25"]  # no shared word: the vector found it
    after_money, after_pet = signals(money)["vector"], signals(pet)["vector"]
    assert after_money > before_money + 0.15, (before_money, after_money)
    assert after_pet < before_pet - 0.15, (before_pet, after_pet)
    # an as_of read replays the tenant and embeds the revised memory as the live indexes did
    base = f"{srv.url}/v1/tenants/{t}"
    live = srv.http.post(f"{base}/recall", json={"q": money}).json()
    past = srv.http.post(f"{base}/recall", params={"as_of": live["now"]}, json={"q": money}).json()
    assert past == live
