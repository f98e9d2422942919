"""The HTTP edge in process: strict finite input, one error shape, limits, OpenAPI, explanations.

The app runs without its lifespan (no broker): a stand-in runtime knows no tenant, and every case
here is decided before a write reaches the log.
"""

from __future__ import annotations

import asyncio
import json
import string
import uuid
from pathlib import Path
from typing import Any

import pytest
from engram.api.deps import IDEMPOTENCY_NAMESPACE, event_id_for
from engram.api.limits import RequestLimits
from engram.commands.answers import RecentWrites
from engram.projections.knowledge import DEFAULT_RULES_DIR
from engram.projections.read import typed
from engram.projections.rules.syntax import load_rules
from engram.schemas import vocabulary as v
from fastapi.testclient import TestClient
from pyoxigraph import Literal, NamedNode

from engram.settings import load_settings
from tests.api.stand_in import client
from tests.corpus import Body, http_bodies

WHO = {"source": "operator", "actor": {"id": "dana", "role": "operator"}}
MEMORY = {**WHO, "label": "L", "content": "C", "kind": "fact", "importance": 3}
KPI = {**WHO, "metric": "roas", "value": 1.5, "period": "2026-12"}
MEMORIES = "/v1/tenants/acme/memories"
KPIS = "/v1/tenants/acme/kpis"


@pytest.fixture(scope="module")
def api() -> TestClient:
    return client()


def post_raw(api: TestClient, path: str, text: str, **headers: str) -> Any:
    return api.post(
        path, content=text.encode("utf-8"), headers={"content-type": "application/json", **headers}
    )


def assert_one_shape(r: Any, status: int) -> list[dict[str, Any]]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    body = r.json()
    assert set(body) == {"detail"} and isinstance(body["detail"], list) and body["detail"]
    for item in body["detail"]:
        assert set(item) == {"loc", "msg", "type"}, item
        assert (
            isinstance(item["loc"], list) and isinstance(item["msg"], str) and isinstance(item["type"], str)
        )
    return body["detail"]  # type: ignore[no-any-return]


# -- item 7: non-finite numbers and lone surrogates ---------------------------------------------
NON_FINITE = ["NaN", "Infinity", "-Infinity", "1e309", "-1e309"]


@pytest.mark.parametrize("number", NON_FINITE)
@pytest.mark.parametrize(
    ("path", "template"),
    [
        (MEMORIES, {**MEMORY, "importance": "@"}),
        (MEMORIES, {**MEMORY, "confidence": "@"}),
        (MEMORIES, {**MEMORY, "properties": {"goal": "@"}}),
        (MEMORIES, {**MEMORY, "embedding": [0.5, "@"], "embedding_model": "m"}),
        (KPIS, {**KPI, "value": "@"}),
    ],
)
def test_non_finite_numbers_are_422(api: TestClient, path: str, template: dict, number: str) -> None:
    text = json.dumps(template).replace('"@"', number)
    detail = assert_one_shape(post_raw(api, path, text), 422)
    assert "NaN" not in json.dumps(detail) and "Infinity" not in json.dumps(detail)


@pytest.mark.parametrize(
    "body",
    [
        {**MEMORY, "label": "x\ud800"},
        {**MEMORY, "content": "\udfff"},
        {**MEMORY, "actor": {"id": "a\ud800", "role": "r"}},
        {**MEMORY, "properties": {"p\ud800": 1}},
        {**MEMORY, "properties": {"p": "v\udc00"}},
        {**MEMORY, "scope": "team", "stakeholders": {"team_ids": ["t\ud800"]}},
        {**MEMORY, "purpose": "\ud800", "correlation_id": "\ud800"},
        {**KPI, "period": "\ud800"},
    ],
)
def test_lone_surrogates_are_422_and_the_answer_is_json(api: TestClient, body: dict) -> None:
    text = json.dumps(body)  # ensure_ascii: "\\ud800" on the wire, a lone surrogate once parsed
    path = KPIS if "metric" in body else MEMORIES
    detail = assert_one_shape(post_raw(api, path, text), 422)
    assert any("Unicode" in d["msg"] for d in detail), detail


def test_validation_errors_never_echo_the_input(api: TestClient) -> None:
    huge = "A" * 300_000
    r = post_raw(api, MEMORIES, json.dumps({**MEMORY, "label": huge, "importance": "x" * 100_000}))
    detail = assert_one_shape(r, 422)
    assert len(r.content) < 4_000 and "AAAA" not in r.text
    assert {tuple(d["loc"]) for d in detail} >= {("body", "label"), ("body", "importance")}
    bad_key = post_raw(api, MEMORIES, json.dumps({**MEMORY, "x" * 10_000: 1}))
    assert len(assert_one_shape(bad_key, 422)[0]["loc"][1]) < 400  # an unknown name is cut short
    too_deep = post_raw(api, MEMORIES, '{"label": ' + "[" * 50_000 + "]" * 50_000 + "}")
    assert_one_shape(too_deep, 400)  # the JSON parser gives up: a malformed body, never a 500
    assert len(too_deep.content) < 4_000
    not_json = post_raw(api, MEMORIES, '{"label": ' + "[" * 50_000)
    assert_one_shape(not_json, 400)
    assert len(not_json.content) < 4_000


# -- item 9: strict types -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("path", "change"),
    [
        (MEMORIES, {"importance": True}),
        (MEMORIES, {"importance": "3"}),
        (MEMORIES, {"importance": 3.5}),
        (MEMORIES, {"confidence": "0.5"}),
        (MEMORIES, {"confidence": True}),
        (MEMORIES, {"label": 5}),
        (MEMORIES, {"properties": {"goal": [1]}}),
        (MEMORIES, {"properties": {"goal": {"a": 1}}}),
        (MEMORIES, {"properties": {"goal": 2**64}}),
        (MEMORIES, {"embedding": [True], "embedding_model": "m"}),
        (MEMORIES, {"embedding": [0.5]}),
        (MEMORIES, {"actor": {"id": "\x1d", "role": "r"}}),
        (MEMORIES, {"memory_class": "http://x/\x9e"}),
        (MEMORIES, {"expires_at": 1_800_000_000}),
        (MEMORIES, {"occurred_at": 0}),
        (MEMORIES, {"stakeholders": {"user_id": 7}, "scope": "user"}),
        (MEMORIES, {"memory_id": "x\n"}),
        (MEMORIES, {"properties": {"p\n": 1}}),
        (KPIS, {"value": True}),
        (KPIS, {"value": "1.5"}),
        (KPIS, {"metric": "roas\n"}),
        (KPIS, {"unknown": 1}),
    ],
)
def test_types_are_not_coerced(api: TestClient, path: str, change: dict) -> None:
    base = KPI if path == KPIS else MEMORY
    assert_one_shape(api.post(path, json={**base, **change}), 422)


def test_strict_models_still_take_what_json_means() -> None:
    from engram.api.models import KpiCreate, MemoryCreate

    kpi = KpiCreate.model_validate({**KPI, "value": 3})  # an integer is a number
    assert MemoryCreate.model_validate({**MEMORY, "importance": 4.0}).importance == 4  # JSON Schema's integer
    assert kpi.value == 3.0 and isinstance(kpi.value, float)
    m = MemoryCreate.model_validate(
        {**MEMORY, "confidence": 1, "properties": {"a": True, "b": 2, "c": 2.5, "d": "x", "e": None}}
    )
    assert m.properties == {"a": True, "b": 2, "c": 2.5, "d": "x", "e": None}
    assert [type(x) for x in m.properties.values()] == [bool, int, float, str, type(None)]
    assert m.model_validate({**MEMORY, "expires_at": "2027-01-01T00:00:00Z"}).expires_at is not None


# -- item 12: one error shape, 405 Allow, OpenAPI -------------------------------------------------
def test_string_details_and_starlette_errors_have_the_one_shape(api: TestClient) -> None:
    assert assert_one_shape(api.get("/v1/tenants/acme/nowhere"), 404)[0]["type"] == "not_found"
    assert assert_one_shape(api.get(f"{MEMORIES}/ghost"), 404)[0]["loc"] == ["path"]
    assert_one_shape(api.get("/v1/tenants/Not_A_Tenant/memories"), 422)
    assert_one_shape(api.get("/v1/tenants/acme/graph/inferred", params={"subject": "not an iri"}), 422)
    assert_one_shape(api.get(MEMORIES, params={"class": "http://x/%zz"}), 422)
    # shaped like an IRI, refused by the store: nothing can be about it
    r = api.get("/v1/tenants/acme/graph/inferred", params={"subject": "http://x/\x7f"})
    assert r.status_code in (200, 422)


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("PUT", MEMORIES, "GET, POST"),
        ("DELETE", MEMORIES, "GET, POST"),
        ("OPTIONS", MEMORIES, "GET, POST"),
        ("GET", KPIS, "POST"),
        ("POST", "/healthz", "GET"),
        ("PATCH", "/v1/tenants/acme/graph", "GET"),
    ],
)
def test_405_lists_every_method_of_the_path(api: TestClient, method: str, path: str, allowed: str) -> None:
    r = api.request(method, path)
    assert_one_shape(r, 405)
    assert r.headers["allow"] == allowed


def test_openapi_documents_the_refusals_with_the_one_schema(api: TestClient) -> None:
    doc = api.get("/openapi.json").json()
    ref = "#/components/schemas/ErrorBody"
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            codes = set(op["responses"])
            assert {"400", "408", "413"} <= codes, (method, path)
            for code, answer in op["responses"].items():
                if code.startswith("4"):
                    assert answer["content"]["application/json"]["schema"] == {"$ref": ref}, (path, code)
    for path in (MEMORIES, KPIS):
        post = doc["paths"][path.replace("acme", "{tenant}")]["post"]
        assert {"409", "413", "422", "503", "504"} <= set(post["responses"])
        assert any(p["name"] == "Idempotency-Key" and p["in"] == "header" for p in post["parameters"])
    assert "404" in doc["paths"]["/v1/tenants/{tenant}/memories/{memory_id}"]["get"]["responses"]
    graph = doc["paths"]["/v1/tenants/{tenant}/graph"]["get"]["responses"]["200"]["content"]
    assert set(graph) == {"application/n-quads"}
    statuses = doc["components"]["schemas"]["MemoryPublic"]["properties"]["statuses"]
    assert {t["type"] for t in statuses["additionalProperties"]["anyOf"]} == {"integer", "number", "string"}
    item = doc["components"]["schemas"]["ErrorItem"]
    assert set(item["required"]) == {"loc", "msg", "type"}


def test_graph_answers_n_quads(api: TestClient) -> None:
    r = api.get("/v1/tenants/acme/graph")
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/n-quads")


def test_status_literals_are_typed() -> None:
    xsd = v.XSD
    assert typed(Literal("85", datatype=NamedNode(xsd + "integer"))) == 85
    assert typed(Literal("85.5", datatype=NamedNode(xsd + "decimal"))) == 85.5
    assert typed(Literal("8.5E1", datatype=NamedNode(xsd + "double"))) == 85.0
    assert isinstance(typed(Literal("3", datatype=NamedNode(xsd + "integer"))), int)
    assert typed(Literal("near_limit")) == "near_limit"


# -- item 8: body limit (declared and chunked), item 13: body timeout, Host allow-list -------------
def test_body_over_the_limit_is_413_with_the_limit() -> None:
    small = client(max_body_bytes=1000)
    body = json.dumps({**MEMORY, "content": "x" * 2000})
    declared = post_raw(small, MEMORIES, body)
    assert "1000 bytes" in assert_one_shape(declared, 413)[0]["msg"]

    def chunks() -> Any:
        for _ in range(4):
            yield b" " * 400

    chunked = small.post(MEMORIES, content=chunks(), headers={"content-type": "application/json"})
    assert "1000 bytes" in assert_one_shape(chunked, 413)[0]["msg"]
    assert post_raw(small, MEMORIES, json.dumps({**MEMORY, "importance": 9})).status_code == 422


def _asgi(app: Any, messages: list[dict[str, Any]], *, stall: bool = False) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []
    scope = {"type": "http", "method": "POST", "path": "/", "headers": [], "query_string": b""}

    async def receive() -> dict[str, Any]:
        if messages:
            return messages.pop(0)
        if stall:
            await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    return sent


async def _reads_body(scope: Any, receive: Any, send: Any) -> None:
    while (await receive()).get("more_body"):
        pass
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


def test_a_stalled_body_is_408_and_closes() -> None:
    app = RequestLimits(_reads_body, max_body_bytes=100, body_timeout_s=0.2)
    sent = _asgi(app, [{"type": "http.request", "body": b"12", "more_body": True}], stall=True)
    assert sent[0]["status"] == 408
    assert (b"connection", b"close") in sent[0]["headers"]
    assert b"ENGRAM_BODY_TIMEOUT_S" in sent[1]["body"]
    whole = _asgi(app, [{"type": "http.request", "body": b"12", "more_body": False}])
    assert whole[0]["status"] == 200


def test_chunked_body_is_counted() -> None:
    app = RequestLimits(_reads_body, max_body_bytes=10, body_timeout_s=5)
    parts = [{"type": "http.request", "body": b"123456", "more_body": True}] * 2
    sent = _asgi(app, [*parts, {"type": "http.request", "body": b"", "more_body": False}])
    assert sent[0]["status"] == 413


def test_host_allow_list() -> None:
    strict = client(allowed_hosts="api.example.com, *.example.org")
    assert strict.get("/healthz", headers={"host": "api.example.com"}).status_code == 200
    assert strict.get("/healthz", headers={"host": "a.example.org:8000"}).status_code == 200
    r = strict.get("/healthz", headers={"host": "evil.example.net"})
    assert assert_one_shape(r, 400)[0]["loc"] == ["header", "host"]
    assert client().get("/healthz", headers={"host": "anything"}).status_code == 200


def test_new_settings_defaults() -> None:
    s = load_settings()
    assert (s.max_body_bytes, s.header_timeout_s, s.body_timeout_s, s.allowed_hosts) == (
        1_048_576,
        10.0,
        30.0,
        "*",
    )
    assert load_settings(allowed_hosts=" a.com , b.com,").allowed_host_list == ["a.com", "b.com"]


# -- Idempotency-Key ---------------------------------------------------------------------------------
def test_idempotency_key_maps_to_the_event_id() -> None:
    key = "3f1e8e9a-2c2b-4c1d-9a77-0d1f2e3a4b5c"
    assert event_id_for("acme", key, None) == uuid.UUID(key)
    assert event_id_for("acme", key.upper(), uuid.UUID(key)) == uuid.UUID(key)
    derived = event_id_for("acme", "order-42", None)
    assert derived == uuid.uuid5(IDEMPOTENCY_NAMESPACE, "acme\norder-42")
    assert event_id_for("acme", "order-42", None) == derived  # stable
    assert event_id_for("other", "order-42", None) != derived  # per tenant
    assert event_id_for("acme", None, None) is None
    with pytest.raises(Exception) as refused:
        event_id_for("acme", "order-42", uuid.uuid4())
    assert refused.value.status_code == 422  # type: ignore[attr-defined]


@pytest.mark.parametrize("key", ["x" * 256, "caf\u00e9", "tab\there", ""])
def test_bad_idempotency_keys_are_422(api: TestClient, key: str) -> None:
    r = api.post(KPIS, json=KPI, headers={"Idempotency-Key": key.encode("latin-1")})
    detail = assert_one_shape(r, 422)
    assert any(d["loc"][:2] == ["header", "Idempotency-Key"] for d in detail), detail


def test_idempotency_key_and_a_different_body_event_id_are_422(api: TestClient) -> None:
    r = api.post(KPIS, json={**KPI, "event_id": str(uuid.uuid4())}, headers={"Idempotency-Key": "k-1"})
    assert assert_one_shape(r, 422)[0]["type"] == "idempotency_key_mismatch"


def test_recent_writes_are_bounded() -> None:
    w = RecentWrites(keep=2)
    for i, t in enumerate("abc"):
        w.note(t, 0, i)
    assert w.get("a") is None and w.get("c") == (0, 2)


# -- every derived fact has an explanation -------------------------------------------------------
def test_every_rule_has_an_explanation_naming_only_its_variables() -> None:
    program = load_rules(Path(DEFAULT_RULES_DIR))
    assert program.rules
    for rule in program.rules:
        assert rule.explain, f"{rule.source} has no #@explain sentence"
        names = {n for _, n, _, _ in string.Formatter().parse(rule.explain) if n}
        assert names <= rule.positive_vars, (rule.source, names - rule.positive_vars)


@pytest.mark.parametrize(
    ("path", "unknown"),
    [
        ("/v1/tenants/acme/memories?kynd=fact", "kynd"),
        ("/v1/tenants/acme/recall?q=x&asof=2026-06-01", "asof"),
        ("/v1/tenants/acme/context?q=x&valid_on=2026-06-01", "valid_on"),
        ("/v1/tenants/acme/memories/m1?user=bob", "user"),
        ("/healthz?verbose=1", "verbose"),
    ],
)
def test_unknown_query_parameters_are_refused_by_name(api: TestClient, path: str, unknown: str) -> None:
    [item] = assert_one_shape(api.get(path), 422)
    assert item["loc"] == ["query", unknown] and item["type"] == "unknown_parameter"
    assert "this route takes" in item["msg"]


def test_known_query_parameters_still_pass(api: TestClient) -> None:
    assert (
        api.get("/v1/tenants/acme/memories?kind=fact&scope=user&class=Memory&active=true&limit=5").status_code
        == 200
    )
    assert api.get("/v1/tenants/acme/recall?q=x&kind=fact&class=Memory&fusion=bm25").status_code == 200


def test_the_memories_list_takes_an_importance_floor_of_a_tier(api: TestClient) -> None:
    assert api.get("/v1/tenants/acme/memories?min_importance=4").status_code == 200
    for bad in ("0", "6", "high"):
        [item] = assert_one_shape(api.get(f"/v1/tenants/acme/memories?min_importance={bad}"), 422)
        assert item["loc"] == ["query", "min_importance"], item


def test_the_docs_page_needs_no_internet(api: TestClient) -> None:
    page = api.get("/docs").text
    assert "cdn." not in page and "unpkg" not in page and "jsdelivr" not in page
    scripts = [part.split('"')[1] for part in page.split("src=")[1:]] + [
        part.split('"')[1] for part in page.split('href="')[1:] if part.split('"')[0].endswith(".css")
    ]
    assert any(s.endswith("swagger-ui-bundle.js") for s in scripts), page
    for asset in scripts:
        if asset.startswith("/"):
            assert api.get(asset).status_code == 200, asset
    assert api.get("/redoc").status_code == 200


def test_a_store_another_process_holds_is_503_with_a_reason(tmp_path: Path) -> None:
    """Two servers on one data directory: the second cannot open a tenant's RocksDB store. That
    is the deployment's fault, not the client's and not a crash: 503, why, and when to retry."""
    from engram.projections.stores import TenantStores

    holder = TenantStores(tmp_path)
    assert holder.get("acme", create=True) is not None  # this opener keeps the lock
    api = client(stores=TenantStores(tmp_path))
    r = api.get("/v1/tenants/acme/memories")
    assert r.status_code == 503, r.text
    assert r.headers["retry-after"] == "5"
    [item] = r.json()["detail"]
    assert "locked by another process" in item["msg"] and "acme" in item["msg"]
    assert "Traceback" not in r.text


# -- issue 22 item 8: one strict JSON reading of every body; a route without a body refuses one -----
BODIES = http_bodies()


@pytest.mark.parametrize("case", BODIES, ids=[b.why for b in BODIES])
def test_hostile_body_corpus(api: TestClient, case: Body) -> None:
    r = api.request(
        case.method,
        f"/v1/tenants/acme/{case.path}",
        content=case.content,
        headers={"content-type": case.content_type},
    )
    detail = assert_one_shape(r, case.status)
    assert case.msg in json.dumps(detail[0], ensure_ascii=False), (case.why, detail)


def test_every_route_reads_its_body_with_the_one_parser() -> None:
    """Duplicate keys are refused on every route that takes a body, the SPARQL one included."""
    api = client()
    routes = [
        (method, path)
        for path, operations in api.app.openapi()["paths"].items()
        for method, operation in operations.items()
        if "requestBody" in operation
    ]
    assert len(routes) >= 10 and ("post", "/v1/tenants/{tenant}/sparql") in routes, routes
    for method, path in routes:
        url = path.replace("{tenant}", "acme").replace("{memory_id}", "m1")
        r = api.request(
            method, url, content=b'{"a": 1, "a": 2}', headers={"content-type": "application/json"}
        )
        assert r.status_code == 422 and "repeated keys in a JSON object: 'a'" in r.text, (
            method,
            path,
            r.text,
        )
