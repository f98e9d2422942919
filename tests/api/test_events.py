"""``GET /v1/tenants/{tenant}/events`` over a real server and broker: the tenant's log, paged."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from aiokafka import AIOKafkaProducer
from engram.streams import codec
from engram.streams.topics import ensure_topics, partition_for

from engram.settings import Settings
from tests.factories import event
from tests.harness import Server, isolated_settings

pytestmark = pytest.mark.integration

PARTITIONS = 4
TENANT = "acme"
# a tenant on acme's partition, so every page of acme's is read past its records
NEIGHBOUR = next(
    f"n{i}"
    for i in itertools.count()
    if partition_for(f"n{i}", PARTITIONS) == partition_for(TENANT, PARTITIONS)
)
HOME = partition_for(TENANT, PARTITIONS)
OTHER = (HOME + 1) % PARTITIONS
WHO = {"source": "operator"}


@pytest.fixture(scope="module")
def log(
    broker: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Server, list[dict[str, Any]]]]:
    """A server and acme's writes (their 202 answers, in order), interleaved with its neighbour's."""
    root = tmp_path_factory.mktemp("events")
    settings = isolated_settings(broker, root / "data", partitions=PARTITIONS)
    asyncio.run(ensure_topics(settings))
    srv = Server(settings, root / "server.log").start()
    srv.wait_ready()
    written: list[dict[str, Any]] = []
    for i in range(3):
        written.append(post(srv, TENANT, "/memories", memory(f"m{i}")))
        post(srv, NEIGHBOUR, "/memories", memory(f"secret{i}"))
    written.append(patch(srv, TENANT, "m0", {"label": "m0 revised", "purpose": "correction"}))
    written.append(post(srv, TENANT, "/kpis", {"metric": "roas", "value": 2.5, "period": "2026-12"}))
    post(srv, NEIGHBOUR, "/kpis", {"metric": "roas", "value": 9.9, "period": "2026-12"})
    written.append(post(srv, TENANT, "/memories/m1/forget", {"reason": "retention"}))
    written.append(post(srv, TENANT, "/kpis", {"metric": "roas", "value": 2.7, "period": "2026-12"}))
    yield srv, written
    srv.stop()


def memory(memory_id: str) -> dict[str, Any]:
    return {"memory_id": memory_id, "label": f"label {memory_id}", "content": f"content {memory_id}",
            "kind": "fact", "importance": 3}  # fmt: skip


def post(srv: Server, tenant: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    r = srv.http.post(
        f"{srv.url}/v1/tenants/{tenant}{path}", params={"wait": "true"}, json={**WHO, **body}, timeout=40
    )
    assert r.status_code == 202, r.text
    return r.json()  # type: ignore[no-any-return]


def patch(srv: Server, tenant: str, memory_id: str, body: dict[str, Any]) -> dict[str, Any]:
    r = srv.http.patch(
        f"{srv.url}/v1/tenants/{tenant}/memories/{memory_id}",
        params={"wait": "true"},
        json={**WHO, **body},
        timeout=40,
    )
    assert r.status_code == 202, r.text
    return r.json()  # type: ignore[no-any-return]


def events(srv: Server, tenant: str = TENANT, **params: Any) -> httpx.Response:
    return srv.http.get(f"{srv.url}/v1/tenants/{tenant}/events", params=params)


def every_page(srv: Server, **params: Any) -> tuple[list[dict[str, Any]], int]:
    """Every event, by following ``next``; and the number of pages it took."""
    out, pages, cursor = [], 0, None
    while True:
        r = events(srv, **params, **({"cursor": cursor} if cursor else {}))
        assert r.status_code == 200, r.text
        body = r.json()
        out.extend(body["data"])
        pages += 1
        cursor = body["next"]
        if cursor is None:
            return out, pages
        assert pages < 50, "the cursor does not advance"


def test_pages_hold_every_event_of_the_tenant_once_and_no_other(log: tuple[Server, list[dict]]) -> None:
    srv, written = log
    got, pages = every_page(srv, limit=2)
    assert [e["event_id"] for e in got] == [w["event_id"] for w in written]  # all, in log order, once
    assert pages >= 3
    assert {e["tenant"] for e in got} == {TENANT}
    assert [e["position"] for e in got] == [f"{w['partition']}:{w['offset']}" for w in written]
    assert all(e["partition"] == HOME for e in got)

    first = got[0]
    assert first["type"] == "MemoryRemembered" and first["actor"] == {
        "id": "dana",
        "role": "operator",
        "on_behalf_of": None,
    }
    assert (
        first["source"] == "operator"
        and first["recorded_at"].endswith("Z")
        and first["occurred_at"].endswith("Z")
    )
    assert first["payload"]["label"] == "label m0" and "sealed" not in first["payload"]
    assert first["payload"]["embedding_dim"] == 384 and "embedding" not in first["payload"]
    revised = got[3]
    assert revised["type"] == "MemoryRevised" and revised["purpose"] == "correction"
    assert revised["payload"]["changes"] == {"label": "m0 revised"}
    # m1 was forgotten: its key is destroyed, so the log's copy of its content reads as erased
    m1 = next(e for e in got if e["payload"].get("memory_id") == "m1" and e["type"] == "MemoryRemembered")
    assert (m1["payload"]["label"], m1["payload"]["content"]) == ("(erased)", "(erased)")
    assert next(e for e in got if e["type"] == "MemoryForgotten")["payload"]["reason"] == "retention"

    whole = events(srv, limit=1000).json()
    assert [e["event_id"] for e in whole["data"]] == [w["event_id"] for w in written]
    assert whole["next"] is None and whole["skipped"] == 0
    neighbour = events(srv, NEIGHBOUR).json()["data"]
    assert len(neighbour) == 4 and {e["tenant"] for e in neighbour} == {NEIGHBOUR}


def test_only_operators_and_auditors_and_only_their_tenant(log: tuple[Server, list[dict]]) -> None:
    srv, _ = log
    for role, user, extra in (("auditor", "ida", {}), ("operator", "ops", {})):
        r = srv.http.get(
            f"{srv.url}/v1/tenants/{TENANT}/events", headers=srv.bearer(TENANT, role=role, user=user, **extra)
        )
        assert r.status_code == 200, r.text
    for claims in (
        {"role": "user", "user": "sam"},
        {"role": "pipeline", "user": "etl"},
        {"role": "agent", "user": "bot", "on_behalf_of": "sam"},
    ):
        r = srv.http.get(f"{srv.url}/v1/tenants/{TENANT}/events", headers=srv.bearer(TENANT, **claims))
        assert r.status_code == 403 and "operator or an auditor" in r.text, r.text
    # a token for another tenant: "not found", as for a tenant that does not exist
    r = srv.http.get(f"{srv.url}/v1/tenants/{TENANT}/events", headers=srv.bearer(NEIGHBOUR, role="auditor"))
    assert r.status_code == 404 and f"tenant {TENANT} not found" in r.text
    assert events(srv, "nobody-here").json() == {"data": [], "next": None, "skipped": 0}
    assert not (srv.settings.tenants_dir / "nobody-here").exists()  # reading a log makes no tenant


def test_position_and_time_bounds(log: tuple[Server, list[dict]]) -> None:
    srv, _ = log
    every = events(srv).json()["data"]
    at = [e["position"] for e in every]
    part = events(srv, **{"from": at[2], "to": at[5]}).json()
    assert [e["position"] for e in part["data"]] == at[2:5] and part["next"] is None
    assert [e["position"] for e in events(srv, **{"from": at[4]}).json()["data"]] == at[4:]
    assert [e["position"] for e in events(srv, to=at[1]).json()["data"]] == at[:1]
    assert events(srv, **{"from": at[3], "to": at[3]}).json()["data"] == []

    since, until = every[2]["recorded_at"], every[5]["recorded_at"]
    expected = [e["position"] for e in every if since <= e["recorded_at"] < until]
    assert expected and at[2] in expected and at[5] not in expected
    timed = events(srv, **{"from": since, "to": until}).json()
    assert [e["position"] for e in timed["data"]] == expected
    offset = since.replace("Z", "+00:00")  # an explicit offset, percent-encoded by the client
    assert [e["position"] for e in events(srv, **{"from": offset, "to": until}).json()["data"]] == expected
    # a time and a position together, and a page of a range continued by its cursor
    mixed, _ = every_page(srv, **{"from": since, "to": at[5], "limit": 1})
    assert [e["position"] for e in mixed] == at[2:5]
    assert events(srv, **{"from": "2999-01-01T00:00:00Z"}).json() == {"data": [], "next": None, "skipped": 0}
    assert [e["position"] for e in events(srv, to="1999-01-01").json()["data"]] == []
    assert events(srv, **{"from": "1970-01-01"}).json()["data"] == every


def test_type_filter(log: tuple[Server, list[dict]]) -> None:
    srv, _ = log
    kpis = events(srv, type="KpiObserved").json()["data"]
    assert [e["payload"]["value"] for e in kpis] == [2.5, 2.7]
    both, _ = every_page(srv, type=["MemoryRevised", "MemoryForgotten", "MemoryRevised"], limit=1)
    assert [e["type"] for e in both] == ["MemoryRevised", "MemoryForgotten"]
    assert events(srv, type="ClockTicked").json() == {"data": [], "next": None, "skipped": 0}


def raw(srv: Server, query: str) -> httpx.Response:
    """A query string sent as it is (httpx would encode or refuse what a hostile client sends)."""
    return srv.http.get(httpx.URL(f"{srv.url}/v1/tenants/{TENANT}/events?{query}"))


@pytest.mark.parametrize(
    ("query", "where", "reason"),
    [
        ("limit=NaN", "limit", "valid integer"),
        ("limit=1e3", "limit", "valid integer"),
        ("limit=0", "limit", "greater than or equal to 1"),
        ("limit=1001", "limit", "less than or equal to 1000"),
        ("limit=99999999999999999999999", "limit", "less than or equal to 1000"),
        ("type=%ED%A0%80", "type", "unknown event type"),
        ("type=MemoryRemembered&type=Nope", "type", "unknown event type 'Nope'; one of: MemoryRemembered"),
        ("from=1:x", "from", "not a partition:offset position"),
        (f"from={OTHER}:0", "from", f"this tenant's events are on partition {HOME}"),
        ("to=yesterday", "to", "neither an ISO-8601 time nor a partition:offset position"),
        ("to=2026-13-01", "to", "neither an ISO-8601 time nor a partition:offset position"),
        ("from=2026-01-01T00:00:00+01:00", "from", "send it as %2B"),
        ("from=2026-02-01&to=2026-01-01", "from", "is after to"),
        (f"from={HOME}:5&to={HOME}:2", "from", "is after to"),
        ("cursor=1:x", "cursor", "should match pattern"),
        (f"cursor={OTHER}:3", "cursor", f"this tenant's events are on partition {HOME}"),
        ("from=" + "9" * 65, "from", "at most 64 characters"),
        ("type=" + "&type=".join(["KpiObserved"] * 33), "type", "at most 32 items"),
        (
            "frm=2026-01-01",
            "frm",
            "unknown query parameter 'frm'; this route takes: cursor, from, limit, to, type",
        ),
    ],
)
def test_hostile_params_are_422_with_a_reason(
    log: tuple[Server, list[dict]], query: str, where: str, reason: str
) -> None:
    srv, _ = log
    r = raw(srv, query)
    assert r.status_code == 422, (query, r.status_code, r.text)
    (item,) = r.json()["detail"]
    assert item["loc"] == ["query", where] and reason in item["msg"], (query, item)


def test_poison_is_skipped_and_counted_never_shown(log: tuple[Server, list[dict]]) -> None:
    """Garbage, and a decodable event of another tenant under this tenant's key, are passed over."""
    srv, _ = log
    victim = "poisoned"
    foreign = codec.encode(event("KpiObserved", {"metric": "roas", "value": 1.0}, tenant=NEIGHBOUR))

    async def produce() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=srv.settings.kafka_bootstrap)
        await producer.start()
        try:
            partition = partition_for(victim, PARTITIONS)
            for value in (b"\xc3\x01not avro at all", foreign, b"{}"):
                await producer.send_and_wait(
                    srv.settings.events_topic, value, key=victim.encode(), partition=partition
                )
        finally:
            await producer.stop()

    asyncio.run(produce())
    good = post(srv, victim, "/kpis", {"metric": "roas", "value": 3.0, "period": "2026-12"})
    page = events(srv, victim).json()
    assert [e["event_id"] for e in page["data"]] == [good["event_id"]]
    assert page["skipped"] == 3 and page["next"] is None
    assert events(srv, victim, limit=1, type="KpiObserved").json()["data"][0]["payload"]["value"] == 3.0
