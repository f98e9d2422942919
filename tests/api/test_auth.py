"""Bearer tokens at the edge: who is asking is proven, and a tenant's existence never leaks."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from engram.api.auth import BadToken, Verifier, mint

from engram.cli import main as engram
from engram.settings import load_settings
from tests.api.stand_in import SECRET, client

MEMORIES = "/v1/tenants/acme/memories"
SETTINGS = load_settings(auth_secret=SECRET)


def claims(**over: Any) -> dict[str, Any]:
    now = int(time.time())
    return {"iss": "engram", "tenant": "acme", "sub": "dana", "role": "operator", "teams": [],
            "iat": now, "exp": now + 600, **over}  # fmt: skip


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.mark.parametrize(
    ("headers", "reason"),
    [
        ({}, "a bearer token is required"),
        ({"Authorization": "Basic ZGFuYTpw"}, "a bearer token is required"),
        (bearer("not-a-jwt"), "not a valid token"),
        (bearer(jwt.encode(claims(), "another-secret-of-at-least-32-bytes!!", "HS256")), "Signature"),
        (bearer(jwt.encode(claims(exp=int(time.time()) - 5), SECRET, "HS256")), "expired"),
        (bearer(jwt.encode(claims(iss="elsewhere"), SECRET, "HS256")), "issuer"),
        (bearer(jwt.encode({k: x for k, x in claims().items() if k != "role"}, SECRET, "HS256")), "role"),
        (bearer(jwt.encode(claims(role="admin"), SECRET, "HS256")), "role must be one of"),
        (bearer(jwt.encode(claims(sub="dana\n"), SECRET, "HS256")), "subject is not an id"),
        (bearer(jwt.encode(claims(role="agent"), SECRET, "HS256")), "names the user it acts for"),
        (bearer(jwt.encode(claims(alg="none"), SECRET, "HS256").rsplit(".", 1)[0] + "."), "not a valid"),
    ],
)
def test_a_missing_or_bad_token_is_401_with_a_reason(headers: dict[str, str], reason: str) -> None:
    api = client()
    r = api.get(MEMORIES, headers={"Authorization": "", **headers})
    assert r.status_code == 401, r.text
    assert r.headers["www-authenticate"] == "Bearer"
    [item] = r.json()["detail"]
    assert item["loc"] == ["header", "Authorization"] and reason in item["msg"], item


def test_every_tenant_route_needs_a_token_and_health_does_not() -> None:
    api = client()
    doc = api.get("/openapi.json").json()
    tenant_routes = [(m, p) for p, ops in doc["paths"].items() for m in ops if p.startswith("/v1/tenants/")]
    assert len(tenant_routes) >= 10
    for method, path in tenant_routes:
        url = path.replace("{tenant}", "acme").replace("{memory_id}", "m1")
        r = api.request(method, url, headers={"Authorization": ""})
        assert r.status_code == 401, (method, path, r.text)
    assert api.get("/healthz", headers={"Authorization": ""}).status_code == 200


def test_a_token_for_another_tenant_cannot_tell_whether_a_tenant_exists() -> None:
    """acme's token on tenants that exist and that do not: one answer, the tenant's name aside."""
    api = client()
    bodies = set()
    for other in ("globex", "initech", "no-such-tenant"):
        for method, path in (("GET", "/memories"), ("GET", "/memories/m1"), ("POST", "/kpis"),
                             ("GET", "/graph"), ("POST", "/recall"), ("GET", "/context")):  # fmt: skip
            r = api.request(method, f"/v1/tenants/{other}{path}", json={})
            assert r.status_code == 404, (other, path, r.text)
            bodies.add(r.text.replace(other, "T"))
    assert len(bodies) == 1  # the same answer for every path and every tenant


def _pem(key: Any) -> str:
    return (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )


@pytest.mark.parametrize("algorithm", ["RS256", "ES256"])
def test_production_tokens_are_checked_against_a_public_key_or_a_jwks_file(
    tmp_path: Path, algorithm: str
) -> None:
    private = (
        rsa.generate_private_key(65537, 2048)
        if algorithm == "RS256"
        else ec.generate_private_key(ec.SECP256R1())
    )
    (tmp_path / "key.pem").write_text(_pem(private))
    jwk = json.loads(jwt.algorithms.get_default_algorithms()[algorithm].to_jwk(private.public_key()))
    (tmp_path / "jwks.json").write_text(json.dumps({"keys": [{**jwk, "kid": "k1", "alg": algorithm}]}))
    good = jwt.encode(claims(teams=["growth"]), private, algorithm, headers={"kid": "k1"})
    for setting in ({"auth_public_key": tmp_path / "key.pem"}, {"auth_jwks": tmp_path / "jwks.json"}):
        verifier = Verifier(load_settings(**setting))
        principal = verifier.verify(good).principal
        assert (principal.user, principal.role, principal.teams) == (
            "dana",
            "operator",
            frozenset({"growth"}),
        )
        with pytest.raises(BadToken):  # a token signed with the HS256 secret is not one of these
            verifier.verify(mint(SETTINGS, "acme", role="operator", user="dana"))
        assert client(**setting).get(MEMORIES, headers=bearer(good)).status_code == 200


def test_engram_token_mints_what_the_server_accepts(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENGRAM_AUTH_SECRET", SECRET)
    args = [
        "token",
        "acme",
        "--role",
        "agent",
        "--user",
        "drafter",
        "--on-behalf-of",
        "sam",
        "--teams",
        "growth,brand",
        "--ttl",
        "15m",
    ]
    assert engram(args) == 0
    token = capsys.readouterr().out.strip()
    principal = Verifier(SETTINGS).verify(token).principal
    assert (principal.subject, principal.user, principal.role) == ("drafter", "sam", "agent")
    assert principal.teams == frozenset({"growth", "brand"})
    assert 890 <= jwt.decode(token, options={"verify_signature": False})["exp"] - time.time() <= 900
    assert engram(["token", "acme", "--role", "agent", "--user", "drafter"]) == 1  # an agent names its user


WHO = {"source": "operator"}
MEMORY = {**WHO, "label": "L", "content": "C", "kind": "fact", "importance": 3}
KPI = {**WHO, "metric": "roas", "value": 1.0, "period": "2026-11"}
SAMS = {**MEMORY, "scope": "user", "stakeholders": {"user_id": "sam"}}
ANNS = {**MEMORY, "scope": "user", "stakeholders": {"user_id": "ann"}}
AS_DANA = {**MEMORY, "actor": {"id": "dana", "role": "operator"}}


@pytest.mark.parametrize(
    ("role", "user", "path", "body", "status", "reason"),
    [
        ("user", "sam", "memories", {**MEMORY, "scope": "company"}, 403, "by an operator, not a user"),
        ("user", "sam", "memories", ANNS, 403, "by its user (ann)"),
        ("pipeline", "etl", "memories", MEMORY, 403, "a pipeline may only emit"),
        ("auditor", "audrey", "kpis", KPI, 403, "from a pipeline or an operator"),
        ("user", "sam", "memories", AS_DANA, 422, "actor is the bearer token's"),
        # allowed: every check passes, and the stand-in has no log to append to
        ("user", "sam", "memories", SAMS, 503, "unavailable"),
        ("pipeline", "etl", "kpis", KPI, 503, "unavailable"),
        ("operator", "dana", "memories", AS_DANA, 503, "unavailable"),
    ],
)  # fmt: skip
def test_writes_are_the_tokens_to_make(
    role: str, user: str, path: str, body: dict, status: int, reason: str
) -> None:
    api = client()
    r = api.post(
        f"/v1/tenants/acme/{path}", json=body, headers=bearer(mint(SETTINGS, "acme", role=role, user=user))
    )
    assert r.status_code == status, r.text
    assert reason in r.json()["detail"][0]["msg"]


def test_each_principal_has_its_own_rate_limit() -> None:
    api = client(rate_limit_per_s=1.0, rate_limit_burst=3, rate_limit_cost_ms=1000.0)  # one token a request
    sam = bearer(mint(SETTINGS, "acme", role="user", user="sam"))
    answers = [api.get(MEMORIES, headers=sam).status_code for _ in range(4)]
    assert answers == [200, 200, 200, 429]
    limited = api.get(MEMORIES, headers=sam)
    assert limited.status_code == 429 and int(limited.headers["retry-after"]) >= 1
    assert "retry in" in limited.json()["detail"][0]["msg"]
    ann = bearer(mint(SETTINGS, "acme", role="user", user="ann"))
    assert api.get(MEMORIES, headers=ann).status_code == 200  # another principal is not held back


def test_a_bucket_refills_at_the_rate() -> None:
    from engram.api.limits import RateLimits

    limits = RateLimits(per_s=2.0, burst=2)
    key = ("acme", "sam")
    assert [limits.take(key, now=0.0) for _ in range(2)] == [0.0, 0.0]
    assert limits.take(key, now=0.0) == 0.5
    assert limits.take(key, now=0.5) == 0.0  # one token back after 1/rate seconds
    assert limits.take(key, now=0.5) == 0.5


def test_a_request_is_charged_its_own_time_not_the_collectors_walk_of_everyones_garbage() -> None:
    """A full collection runs in whichever request's allocation crosses the threshold; a flood of
    one tenant's large pages made one land in another tenant's cheap read (60-130 ms: its burst)."""
    import asyncio
    import gc

    from engram.api.limits import Busy, Collections

    Collections.install()
    heap = [[i, [i]] for i in range(300_000)]  # everyone's objects, which a full collection walks

    async def cheap_read_in_which_a_full_collection_lands() -> int:
        before = Collections.seconds()
        gc.collect()
        walked.append(Collections.seconds() - before)
        return sum(range(10_000))  # the read's own work

    walked: list[float] = []
    busy = Busy(cheap_read_in_which_a_full_collection_lands())

    async def run() -> int:
        return await busy

    assert asyncio.run(run()) == sum(range(10_000))
    assert walked[0] > 0.005, walked  # the collection took real time on this thread
    assert busy.seconds < walked[0] / 2, (busy.seconds, walked)  # and none of it was charged
    del heap


def test_sparql_is_for_operators_and_auditors() -> None:
    api = client()
    q = {"query": "SELECT * WHERE { ?s ?p ?o } LIMIT 1"}
    user = bearer(mint(SETTINGS, "acme", role="user", user="sam"))
    assert api.post("/v1/tenants/acme/sparql", json=q, headers=user).status_code == 403
    auditor = bearer(mint(SETTINGS, "acme", role="auditor", user="audrey"))
    r = api.post("/v1/tenants/acme/sparql", json=q, headers=auditor)
    assert r.status_code == 200 and r.json()["results"]["bindings"] == []  # no store yet: nothing
    assert api.post("/v1/tenants/acme/sparql", json={"query": ""}, headers=auditor).status_code == 422


def test_an_agent_writes_for_the_user_its_token_names() -> None:
    api = client()
    drafter = bearer(mint(SETTINGS, "acme", role="agent", user="drafter", on_behalf_of="sam"))
    assert api.post(MEMORIES, json=SAMS, headers=drafter).status_code == 503  # every check passed
    denied = api.post(MEMORIES, json=ANNS, headers=drafter)
    assert denied.status_code == 403 and "by its user (ann)" in denied.json()["detail"][0]["msg"]


def test_a_token_checked_before_is_refused_once_it_expires(monkeypatch: pytest.MonkeyPatch) -> None:
    """The claims of a token checked once are kept, never past its expiry."""
    settings = load_settings(auth_secret=SECRET)
    verifier = Verifier(settings)
    token = mint(settings, "acme", role="operator", user="dana", ttl_s=60)
    assert verifier.verify(token).tenant == "acme"
    assert verifier.verify(token).tenant == "acme"  # from what was kept
    later = time.time() + 61
    monkeypatch.setattr("engram.api.auth.time.time", lambda: later)
    monkeypatch.setattr("jwt.api_jwt.datetime", _Clock(later))
    with pytest.raises(BadToken, match="expired"):
        verifier.verify(token)
    tampered = token[:-2] + ("AA" if not token.endswith("AA") else "BB")
    with pytest.raises(BadToken):  # another token's bytes are checked, never answered from the kept
        verifier.verify(tampered)


class _Clock:
    """``datetime`` for PyJWT at a fixed moment (it reads ``datetime.now(tz=timezone.utc)``)."""

    def __init__(self, at: float) -> None:
        self.at = at

    def now(self, tz: Any = None) -> Any:
        import datetime

        return datetime.datetime.fromtimestamp(self.at, tz=tz)
