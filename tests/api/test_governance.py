"""Governance over real HTTP: the lifecycle routes, who sees what, and no leak across tenants or
scopes under many principals."""

from __future__ import annotations

import asyncio
import random
import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from engram.schemas.events import event_from_json
from engram.streams.producer import EventProducer
from engram.streams.topics import ensure_topics

from engram.settings import Settings
from tests.harness import Server, isolated_settings

SAM = {"role": "user", "user": "sam", "teams": ["growth"]}
ANN = {"role": "user", "user": "ann", "teams": ["brand"]}
WHO = {"source": "operator"}


def url(server: Server, tenant: str, path: str = "") -> str:
    return f"{server.url}/v1/tenants/{tenant}{path}"


def post(server: Server, tenant: str, path: str, body: dict[str, Any], **principal: Any) -> Any:
    headers = server.bearer(tenant, **principal) if principal else {}
    return server.http.post(
        url(server, tenant, path), params={"wait": "true"}, json={**WHO, **body}, headers=headers, timeout=40
    )


def test_the_lifecycle_over_http(server: Server) -> None:
    mem = {
        "label": "Meta cap",
        "content": "Max $40k/month on Meta",
        "kind": "objective",
        "importance": 5,
        "memory_class": "BudgetConstraintMemory",
        "expires_at": "2027-01-01T00:00:00Z",
        "purpose": "onboarding",
        "properties": {"platform": "meta", "amount": 40000.0, "currency": "USD", "period": "month"},
    }
    assert post(server, "acme", "/memories", {**mem, "memory_id": "cap"}).status_code == 202
    change = {**WHO, "label": "Meta monthly cap", "expires_at": None}
    patched = server.http.patch(
        url(server, "acme", "/memories/cap"), params={"wait": "true"}, json=change, timeout=40
    )
    assert patched.status_code == 202 and patched.json()["applied"], patched.text
    got = server.http.get(url(server, "acme", "/memories/cap")).json()
    assert (got["label"], got["expires_at"], got["content"]) == ("Meta monthly cap", None, mem["content"])
    spend = {"platform": "meta", "amount": 41000.0, "currency": "USD", "period": "2026-12"}
    assert post(server, "acme", "/spend", spend, role="pipeline", user="etl").status_code == 202
    assert (
        server.http.get(url(server, "acme", "/memories/cap")).json()["statuses"]["budgetStatus"]
        == "over_budget"
    )
    assert (
        post(
            server, "acme", "/clock", {"now": "2026-12-03T00:00:00Z"}, role="pipeline", user="clock"
        ).status_code
        == 202
    )
    # ask before overwrite: the same platform's cap again is a conflict with a person's memory
    asked = post(server, "acme", "/memories", {**mem, "memory_id": "cap2", "label": "Meta cap v2"})
    assert (
        asked.status_code == 409 and "cap ('Meta monthly cap', operator)" in asked.json()["detail"][0]["msg"]
    )
    restated = post(server, "acme", "/memories", {**mem, "label": "META MONTHLY CAP", "content": "Max $42k"})
    assert restated.status_code == 202 and restated.json()["memory_id"] == "cap"  # revised, not duplicated
    assert server.http.get(url(server, "acme", "/memories/cap")).json()["content"] == "Max $42k"
    both = {**mem, "memory_id": "cap2", "label": "Meta cap v2", "on_conflict": "keep_both"}
    assert post(server, "acme", "/memories", both).status_code == 202
    assert post(server, "acme", "/memories/cap/supersede", {"superseded_by": "cap2"}).status_code == 202
    assert server.http.get(url(server, "acme", "/memories/cap")).json()["active"] is False
    contradicted = post(server, "acme", "/memories/cap/restore", {})  # cap2, the same platform's cap, is live
    assert (
        contradicted.status_code == 409
        and "contradict the active cap2" in contradicted.json()["detail"][0]["msg"]
    )
    assert post(server, "acme", "/memories/cap2/forget", {"reason": "asked"}, **SAM).status_code == 403
    assert (
        post(server, "acme", "/legal-holds", {"memory_id": "cap2", "reason": "case 17"}, **SAM).status_code
        == 403
    )
    assert post(server, "acme", "/legal-holds", {"memory_id": "cap2", "reason": "case 17"}).status_code == 202
    assert server.http.get(url(server, "acme", "/memories/cap2")).json()["legal_hold"] == "case 17"
    held = post(server, "acme", "/memories/cap2/forget", {"reason": "asked"}, role="auditor", user="audrey")
    assert held.status_code == 409 and "legal hold (case 17)" in held.json()["detail"][0]["msg"], held.text
    assert post(server, "acme", "/legal-holds/cap2/release", {"reason": "closed"}).status_code == 202
    assert (
        post(
            server, "acme", "/memories/cap2/forget", {"reason": "asked"}, role="auditor", user="audrey"
        ).status_code
        == 202
    )
    forgotten = server.http.get(url(server, "acme", "/memories/cap2")).json()
    assert forgotten["content"] == "[redacted]" and forgotten["forgotten"] is True
    assert post(server, "acme", "/memories/cap/restore", {}).status_code == 202  # nothing contradicts it now
    assert post(server, "acme", "/memories/cap/restore", {}).status_code == 422  # not superseded now
    lineage = server.http.get(url(server, "acme", "/memories/cap/lineage")).json()
    assert lineage["purpose"] == "onboarding" and lineage["actor"] == {"id": "dana", "role": "operator"}
    assert lineage["superseded_by"] == [] and lineage["supersedes"] == []
    assert [e["offset"] for e in lineage["events"]] == sorted(e["offset"] for e in lineage["events"])
    assert len(lineage["events"]) == 5  # remembered, patched, re-stated, superseded, restored
    assert (
        server.http.get(url(server, "acme", "/memories/cap2/lineage")).json()["forgotten_reason"] == "asked"
    )
    assert (
        server.http.patch(url(server, "acme", "/memories/cap"), json={**WHO, "label": None}).status_code
        == 422
    )


def test_reads_show_what_the_principal_may_see(server: Server) -> None:
    assert (
        post(
            server,
            "acme",
            "/memories",
            {"memory_id": "co", "label": "Co", "content": "c", "kind": "fact", "importance": 3},
        ).status_code
        == 202
    )
    mine = {"memory_id": "sams", "label": "Mine", "content": "s", "kind": "preference", "importance": 3,
            "scope": "user", "stakeholders": {"user_id": "sam"}}  # fmt: skip
    assert post(server, "acme", "/memories", mine, **SAM).status_code == 202
    team = {"memory_id": "growths", "label": "Team", "content": "g", "kind": "fact", "importance": 3,
            "scope": "team", "stakeholders": {"team_ids": ["growth"]}}  # fmt: skip
    assert post(server, "acme", "/memories", team, **SAM).status_code == 403  # team memories: operators
    assert post(server, "acme", "/memories", team).status_code == 202

    def ids(**principal: Any) -> set[str]:
        r = server.http.get(url(server, "acme", "/memories"), headers=server.bearer("acme", **principal))
        return {m["id"] for m in r.json()["data"]}

    assert ids(**SAM) == {"co", "sams", "growths"}
    assert ids(**ANN) == {"co"}
    assert ids(role="auditor", user="audrey") == {"co", "sams", "growths"}
    for path in ("/memories/sams", "/memories/sams/derivations", "/memories/sams/lineage"):
        assert (
            server.http.get(url(server, "acme", path), headers=server.bearer("acme", **ANN)).status_code
            == 404
        )
        assert (
            server.http.get(url(server, "acme", path), headers=server.bearer("acme", **SAM)).status_code
            == 200
        )
    assert (
        server.http.get(url(server, "acme", "/graph"), headers=server.bearer("acme", **SAM)).status_code
        == 403
    )
    assert (
        server.http.get(
            url(server, "acme", "/graph"), headers=server.bearer("acme", role="auditor", user="a")
        ).status_code
        == 200
    )
    count = {
        "query": "PREFIX e: <https://engram.dev/ns#> SELECT (COUNT(?m) AS ?n) WHERE { ?m e:memoryId ?id }"
    }
    auditor, sam = server.bearer("acme", role="auditor", user="a"), server.bearer("acme", **SAM)
    r = server.http.post(url(server, "acme", "/sparql"), json=count, headers=auditor)
    assert r.status_code == 200 and r.json()["results"]["bindings"][0]["n"]["value"] == "3", r.text
    assert server.http.post(url(server, "acme", "/sparql"), json=count, headers=sam).status_code == 403


OPERATOR = {"id": "dana", "role": "operator"}
MEMORY_ID = re.compile(r"iso-\d\d\.(?:company|team\.t\d|user\.u\d)")


def line(tenant: str, memory_id: str, scope: str, actor: dict[str, str], **holders: Any) -> dict[str, Any]:
    payload = {"memory_id": memory_id, "label": scope, "content": f"a {scope} fact of {tenant}",
               "kind": "fact", "scope": scope, "stakeholders": holders, "importance": 4}  # fmt: skip
    return {
        "type": "MemoryRemembered",
        "tenant": tenant,
        "source": "operator",
        "actor": actor,
        "payload": payload,
    }


def test_fifty_tenants_and_random_principals_see_nothing_they_should_not(
    server: Server, settings: Settings
) -> None:
    """Every memory id names its tenant and scope owner; any id seen where it should not be is a leak."""
    rng = random.Random(20261203)
    tenants = [f"iso-{i:02d}" for i in range(50)]
    lines = []
    for t in tenants:
        lines.append(line(t, f"{t}.company", "company", OPERATOR))
        lines.append(line(t, f"{t}.team.t1", "team", OPERATOR, team_ids=["t1"]))
        for user in ("u1", "u2"):
            lines.append(line(t, f"{t}.user.{user}", "user", {"id": user, "role": "user"}, user_id=user))

    async def produce() -> None:
        async with EventProducer(settings) as producer:
            await producer.send_many(event_from_json(line) for line in lines)

    asyncio.run(produce())
    server.wait_ready(timeout=300)

    def may_see(seen: str, tenant: str, user: str, teams: list[str], role: str) -> bool:
        owner_tenant, scope, *rest = seen.split(".")
        if owner_tenant != tenant:
            return False
        if scope == "company" or role in ("operator", "auditor"):
            return True
        return (scope == "team" and rest[0] in teams) or (scope == "user" and rest[0] == user)

    requests = leaks = 0
    for _ in range(400):
        tenant, asked = rng.choice(tenants), rng.choice(tenants)
        role = rng.choice(["user", "user", "user", "agent", "operator", "auditor", "pipeline"])
        user = rng.choice(["u1", "u2", "u3"])
        teams = rng.sample(["t1", "t2"], rng.randint(0, 2))
        claims = {"on_behalf_of": user, "user": "drafter"} if role == "agent" else {"user": user}
        headers = server.bearer(tenant, role=role, teams=teams, **claims)
        target = f"{asked}.{rng.choice(['company', 'team.t1', 'user.u1', 'user.u2'])}"
        reads = [
            ("GET", "/memories", None),
            ("GET", f"/memories/{target}", None),
            ("GET", f"/memories/{target}/lineage", None),
            ("POST", "/recall", {"q": "fact"}),
            ("GET", "/context", None),
            ("GET", "/graph", None),
        ]
        for method, path, body in reads:
            r = server.http.request(method, url(server, asked, path), headers=headers, json=body, timeout=30)
            requests += 1
            assert r.status_code < 500, r.text
            if asked != tenant:
                assert r.status_code == 404, (tenant, asked, path, r.text)
                continue
            if r.status_code == 404:  # one the principal may not see is answered as one that is not there
                assert r.json()["detail"][0]["msg"] == f"memory {target} not found", r.text
                continue
            seen = set(MEMORY_ID.findall(r.text))
            role_seen = role if role != "pipeline" else "user"
            leaked = [mid for mid in seen if not may_see(mid, tenant, user, teams, role_seen)]
            leaks += len(leaked)
    print(f"isolation: {requests} requests, {leaks} leaks")
    assert leaks == 0


# -- issue #22, items 3 and 4: authorisation decides before anything reveals existence ----------
U1 = {"role": "user", "user": "u1"}
U2 = {"role": "user", "user": "u2"}
U2_AGENT = {"role": "agent", "user": "drafter", "on_behalf_of": "u2"}
CAP = {"label": "Meta cap", "content": "at most $1 on Meta", "kind": "objective", "importance": 4,
       "scope": "user", "stakeholders": {"user_id": "u1"}, "memory_class": "BudgetConstraintMemory",
       "properties": {"platform": "meta", "amount": 1.0, "currency": "USD", "period": "month"}}  # fmt: skip
OWN = {"memory_id": "own", "label": "Mine", "content": "u2's", "kind": "fact", "importance": 3,
       "scope": "user", "stakeholders": {"user_id": "u2"}}  # fmt: skip
TEAM = {"memory_id": "tmem", "label": "T1", "content": "t1's", "kind": "fact", "importance": 3,
        "scope": "team", "stakeholders": {"team_ids": ["t1"]}}  # fmt: skip


def written(r: Any) -> None:
    assert r.status_code == 202 and r.json()["applied"], r.text


@pytest.fixture(scope="module")
def hidden(broker: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One server, three tenants. In ``hid-a`` u1 has ``priv`` (a Meta cap) and ``old1`` (another,
    superseded by it) and the team t1 has ``tmem``; ``hid-b`` has none of them; in ``hid-c``,
    ``priv`` is u2's own. All three have u2's ``own``."""
    root = tmp_path_factory.mktemp("hidden")
    settings = isolated_settings(broker, root / "data")
    asyncio.run(ensure_topics(settings))
    srv = Server(settings, root / "server.log").start()
    srv.wait_ready()
    written(post(srv, "hid-a", "/memories", {**CAP, "memory_id": "priv"}, **U1))
    written(post(srv, "hid-a", "/memories", {**CAP, "memory_id": "old1", "on_conflict": "keep_both"}, **U1))
    written(post(srv, "hid-a", "/memories/old1/supersede", {"superseded_by": "priv"}, **U1))
    written(post(srv, "hid-a", "/memories", TEAM))
    for tenant in ("hid-a", "hid-b", "hid-c"):
        written(post(srv, tenant, "/memories", OWN, **U2))
    written(post(srv, "hid-c", "/memories", {**OWN, "memory_id": "priv", "label": "Mine too"}, **U2))
    yield srv
    srv.stop()


def probes(mid: str) -> list[tuple[str, str, dict[str, Any] | None]]:
    """Every route that takes a memory id, in the path or in the body; the one that would change
    ``own`` if it were wrongly accepted comes last."""
    mine = {"label": "Mine 2", "content": "c", "kind": "fact", "importance": 3, "scope": "user",
            "stakeholders": {"user_id": "u2"}, "on_conflict": "keep_both"}  # fmt: skip
    return [
        ("GET", f"/memories/{mid}", None),
        ("GET", f"/memories/{mid}?valid_at=2030-01-01T00:00:00Z", None),
        ("GET", f"/memories/{mid}/derivations", None),
        ("GET", f"/memories/{mid}/lineage", None),
        ("PATCH", f"/memories/{mid}", {"label": "mine now"}),
        ("POST", f"/memories/{mid}/supersede", {"superseded_by": "own"}),
        ("POST", f"/memories/{mid}/restore", {}),
        ("POST", f"/memories/{mid}/forget", {"reason": "r"}),
        ("POST", "/legal-holds", {"memory_id": mid, "reason": "r"}),
        ("POST", f"/legal-holds/{mid}/release", {"reason": "r"}),
        ("POST", "/memories", {**mine, "replaces": mid}),
        ("POST", "/memories", {**mine, "memory_id": f"{mid}-x", "replaces": mid, "on_conflict": "ask"}),
        ("POST", "/memories/own/supersede", {"superseded_by": mid}),
    ]


def ask(server: Server, tenant: str, method: str, path: str, body: Any, **principal: Any) -> Any:
    headers = server.bearer(tenant, **principal) if principal else {}
    path, _, query = path.partition("?")
    params = dict(p.split("=", 1) for p in query.split("&") if p)
    if method != "GET":
        params["wait"] = "true"
        body = {**WHO, **body}
    return server.http.request(
        method, url(server, tenant, path), params=params, json=body, headers=headers, timeout=40
    )


@pytest.mark.parametrize("principal", [U2, U2_AGENT], ids=["user", "agent"])
@pytest.mark.parametrize("mid", ["priv", "old1", "tmem"])
def test_a_memory_one_may_not_see_is_answered_byte_for_byte_as_one_that_does_not_exist(
    hidden: Server, principal: dict[str, Any], mid: str
) -> None:
    """The same request, the same id string: against u1's (or team t1's) memory in hid-a, and in
    hid-b where no memory has the id. Status and body are identical on every route."""
    for method, path, body in probes(mid):
        seen = ask(hidden, "hid-a", method, path, body, **principal)
        missing = ask(hidden, "hid-b", method, path, body, **principal)
        assert (seen.status_code, seen.content) == (missing.status_code, missing.content), (method, path)
        assert seen.status_code in (403, 404), (method, path, seen.text)
    mine = ask(hidden, "hid-a", "GET", "/memories/own", None, **principal).json()
    assert mine["active"] is True and mine["superseded_by"] is None
    assert ask(hidden, "hid-a", "GET", "/memories/priv", None, **U1).json()["supersedes"] == ["old1"]


def test_remembering_for_another_user_does_not_name_their_memories(hidden: Server) -> None:
    """A user-scoped memory written for u1 by u2 is refused for who writes it, before the conflict
    check could name u1's rival memories (their ids and labels)."""
    body = {**CAP, "memory_id": "mine-cap", "label": "Meta cap for u1"}
    seen = ask(hidden, "hid-a", "POST", "/memories", body, **U2)
    missing = ask(hidden, "hid-b", "POST", "/memories", body, **U2)
    assert (seen.status_code, seen.content) == (missing.status_code, missing.content)
    assert seen.status_code == 403 and "priv" not in seen.text, seen.text


def test_a_missing_id_is_404_on_every_route(hidden: Server) -> None:
    """For one who sees everything (an operator), a missing id: 404 "memory <id> not found" on
    every route, reads and writes alike (a write used to answer 422 "unknown memory")."""
    for method, path, body in probes("nope"):
        if path == "/memories" or path == "/memories/own/supersede":
            where = ["body", "replaces" if path == "/memories" else "superseded_by"]
        elif path == "/legal-holds":
            where = ["body", "memory_id"]
        else:
            where = ["path"]
        r = ask(hidden, "hid-b", method, path, body)
        assert r.status_code == 404, (method, path, r.text)
        assert r.json() == {"detail": [{"loc": where, "msg": "memory nope not found", "type": "not_found"}]}


def test_a_taken_id_is_answered_alike_whoever_holds_it(hidden: Server) -> None:
    """Ids are tenant-wide, so a taken one is refused (409); the answer is the same whether the
    memory is u1's (hid-a) or u2's own (hid-c): no owner, visibility or content in it. Left out,
    the id is minted by the server and unguessable."""
    body = {**OWN, "memory_id": "priv", "label": "Another", "on_conflict": "keep_both"}
    theirs = ask(hidden, "hid-a", "POST", "/memories", body, **U2)
    mine = ask(hidden, "hid-c", "POST", "/memories", body, **U2)
    assert (theirs.status_code, theirs.content) == (mine.status_code, mine.content)
    assert theirs.status_code == 409 and "u1" not in theirs.text and "revise" not in theirs.text, theirs.text
    unnamed = {k: value for k, value in body.items() if k != "memory_id"}
    minted = ask(hidden, "hid-b", "POST", "/memories", unnamed, **U2)
    assert minted.status_code == 202 and uuid.UUID(minted.json()["memory_id"]), minted.text


# -- issue #22, item 3's class: reads name no memory through another one's fields ----------------
# Every hidden memory's id (and label) says "secret"; every memory a reader sees links to one:
#   pub-new supersedes secret-u2 (u2's own, superseded by u2 with a company memory);
#   pub-old -> secret-fin -> pub-last (a company memory superseded by team fin's, itself superseded
#   by a company one: both directions, and a chain through a hidden memory);
#   team-a (teams t1, t2) conflicts with secret-t3 (teams t2, t3), same label: the rules pair them
#   through their shared team t2.
U1_T1 = {"role": "user", "user": "u1", "teams": ["t1"]}  # sees team-a; not secret-t3, secret-fin
OUTSIDER = {"role": "user", "user": "u1"}  # no team: sees neither team memory
U1_AGENT = {"role": "agent", "user": "drafter", "on_behalf_of": "u1", "teams": ["t1"]}
T2_MEMBER = {"role": "user", "user": "u5", "teams": ["t1", "t2", "t3"]}  # sees team-a and secret-t3
AUDITOR = {"role": "auditor", "user": "audrey"}


def fact(memory_id: str, label: str, scope: str = "company", **holders: Any) -> dict[str, Any]:
    return {"memory_id": memory_id, "label": label, "content": f"{label}: the plan", "kind": "fact",
            "importance": 4, "scope": scope, "stakeholders": holders, "on_conflict": "keep_both"}  # fmt: skip


def test_the_light_list_is_the_full_one_without_derivations_and_counts_what_each_reader_sees(
    hidden: Server,
) -> None:
    """``explain=false`` drops only ``derived`` (classes, statuses, conflicts as the full answer
    has them), and a user's count and pages are of what they may see, decided by the list query."""
    server, tenant = hidden, f"light-{uuid.uuid4().hex[:8]}"
    same = {"label": "Brand voice", "kind": "fact", "importance": 4, "on_conflict": "keep_both"}
    for body in (
        {**same, "memory_id": "co1", "content": "warm"},
        {**same, "memory_id": "co2", "content": "formal"},  # a conflict with co1: same label
        {"memory_id": "growths", "label": "Team", "content": "g", "kind": "fact", "importance": 3,
         "scope": "team", "stakeholders": {"team_ids": ["growth"]}},
        {"memory_id": "brands", "label": "Brand team", "content": "b", "kind": "fact", "importance": 3,
         "scope": "team", "stakeholders": {"team_ids": ["brand"]}},
    ):  # fmt: skip
        written(post(server, tenant, "/memories", body))
    mine = {"memory_id": "sams", "label": "Mine", "content": "s", "kind": "preference", "importance": 3,
            "scope": "user", "stakeholders": {"user_id": "sam"}}  # fmt: skip
    written(post(server, tenant, "/memories", mine, **SAM))

    def page(principal: dict[str, Any], **params: Any) -> dict[str, Any]:
        headers = server.bearer(tenant, **principal)
        r = server.http.get(url(server, tenant, "/memories"), params=params, headers=headers)
        assert r.status_code == 200, r.text
        return r.json()

    operator = {"role": "operator", "user": "dana"}
    for who, seen in ((operator, 5), (SAM, 4), (ANN, 3)):
        full, light = page(who), page(who, explain="false")
        assert full["count"] == light["count"] == len(full["data"]) == seen
        assert [{**m, "derived": []} for m in full["data"]] == light["data"]
        assert any(m["derived"] for m in full["data"])
        by_id = {m["id"]: m for m in light["data"]}
        assert (
            by_id["co1"]["conflicts_with"] == ["co2"]
            and "BudgetConstraintMemory" not in by_id["co1"]["classes"]
        )
        pages = [page(who, explain="false", limit=2, offset=k) for k in range(0, seen, 2)]
        assert {p["count"] for p in pages} == {seen}
        assert [m["id"] for p in pages for m in p["data"]] == [m["id"] for m in light["data"]]
    assert {m["id"] for m in page(SAM)["data"]} == {"co1", "co2", "sams", "growths"}
    assert {m["id"] for m in page(ANN)["data"]} == {"co1", "co2", "brands"}
    bad = server.http.get(url(server, tenant, "/memories"), params={"explain": "maybe"})
    assert bad.status_code == 422 and "explain" in bad.text


@pytest.fixture(scope="module")
def linked(hidden: Server) -> tuple[Server, str]:
    """Tenant ``lnk`` on the module's server, with the links above; returns it and the log
    position of its last write (for ``as_of``)."""
    s, t = hidden, "lnk"
    written(post(s, t, "/memories", fact("pub-new", "Launch plan")))
    written(post(s, t, "/memories", fact("secret-u2", "secret plan of u2", "user", user_id="u2"), **U2))
    written(post(s, t, "/memories/secret-u2/supersede", {"superseded_by": "pub-new"}, **U2))
    written(post(s, t, "/memories", fact("pub-old", "Pricing")))
    written(post(s, t, "/memories", fact("secret-fin", "secret pricing of t1", "team", team_ids=["fin"])))
    written(post(s, t, "/memories/pub-old/supersede", {"superseded_by": "secret-fin"}))
    written(post(s, t, "/memories", fact("pub-last", "Pricing, final")))
    written(post(s, t, "/memories/secret-fin/supersede", {"superseded_by": "pub-last"}))
    written(post(s, t, "/memories", fact("team-a", "Launch date", "team", team_ids=["t1", "t2"])))
    last = post(s, t, "/memories", fact("secret-t3", "Launch date", "team", team_ids=["t2", "t3"]))
    written(last)
    return s, f"{last.json()['partition']}:{last.json()['offset']}"


def reads(position: str) -> list[tuple[str, str, dict[str, Any] | None]]:
    """Every read that answers for a memory the readers see, each way it can be asked."""
    out: list[tuple[str, str, dict[str, Any] | None]] = [
        ("GET", "/memories", None),
        ("GET", "/memories?valid_at=2100-01-01T00:00:00Z", None),
        ("GET", f"/memories?as_of={position}", None),
        ("POST", "/recall", {"q": "plan pricing launch date"}),
        ("GET", "/recall?q=launch", None),
        ("GET", "/context?q=launch", None),
    ]
    for mid in ("pub-new", "pub-old", "pub-last", "team-a"):
        out += [
            ("GET", f"/memories/{mid}", None),
            ("GET", f"/memories/{mid}?as_of={position}", None),
            ("GET", f"/memories/{mid}/derivations", None),
            ("GET", f"/memories/{mid}/lineage", None),
        ]
        if mid != "pub-old":  # superseded: it held only until pub-last's chain began
            out.append(("GET", f"/memories/{mid}?valid_at=2100-01-01T00:00:00Z", None))
    return out


def read(server: Server, path: str, body: Any, method: str = "GET", **principal: Any) -> Any:
    headers = server.bearer("lnk", **principal)
    path, _, query = path.partition("?")
    params = dict(p.split("=", 1) for p in query.split("&") if p)
    r = server.http.request(method, url(server, "lnk", path), params=params, json=body, headers=headers)
    assert r.status_code == 200, (path, r.text)
    return r


@pytest.mark.parametrize("principal", [U1_T1, OUTSIDER, U1_AGENT], ids=["team-t1", "no-team", "agent"])
def test_no_read_names_a_memory_the_reader_may_not_see(
    linked: tuple[Server, str], principal: dict[str, Any]
) -> None:
    """Supersession both ways, a chain through a hidden memory, a conflict, and the derivations
    and explanations of each: no id or label of a hidden memory in any answer, now, at a valid
    time or as the system knew it (they used to show in supersedes, superseded_by, conflicts_with,
    derived and its inputs, the derivation trees and both lineage chains)."""
    server, position = linked
    leaks = []
    for method, path, body in reads(position):
        if "team-a" in path and "teams" not in principal:
            continue  # the outsider does not see team-a itself (404, as for a missing id)
        r = read(server, path, body, method, **principal)
        leaks += [(path, r.text[max(0, at - 80) : at + 40]) for at in _found(r.text, "secret")]
    assert leaks == [], "\n".join(map(str, leaks))


def _found(text: str, word: str) -> list[int]:
    return [m.start() for m in re.finditer(word, text)]


def test_the_links_a_reader_may_see_are_named(linked: tuple[Server, str]) -> None:
    """The filter hides what the reader may not see and nothing else: one who sees everything (an
    auditor) or every team sees each link, and a user sees a link between two company memories."""
    server, _ = linked

    def memory(mid: str, **principal: Any) -> Any:
        return read(server, f"/memories/{mid}", None, **principal).json()

    def chain(mid: str, **principal: Any) -> Any:
        got = read(server, f"/memories/{mid}/lineage", None, **principal).json()
        return got["supersedes"], got["superseded_by"]

    assert memory("pub-new", **AUDITOR)["supersedes"] == ["secret-u2"]
    assert memory("pub-new", **U2)["supersedes"] == ["secret-u2"]  # u2's own
    assert memory("pub-new", **U1)["supersedes"] == []
    assert memory("pub-old", **AUDITOR)["superseded_by"] == "secret-fin"
    assert memory("pub-old", **U1_T1)["superseded_by"] is None
    assert chain("pub-old", **AUDITOR) == ([], ["secret-fin", "pub-last"])
    assert chain("pub-last", **AUDITOR) == (["secret-fin", "pub-old"], [])
    assert chain("pub-old", **U1_T1) == ([], [])  # the chain stops where the hidden memory was
    assert chain("pub-last", **U1_T1) == ([], [])
    assert memory("team-a", **T2_MEMBER)["conflicts_with"] == ["secret-t3"]
    assert memory("team-a", **AUDITOR)["conflicts_with"] == ["secret-t3"]
    assert memory("team-a", **U1_T1)["conflicts_with"] == []
    derived = {d["predicate"] for d in memory("team-a", **U1_T1)["derived"]}
    assert "conflictsWith" not in derived and "stakeholderKey" in derived  # its own facts stay
