"""Produce -> projected -> read, through a real server, a real broker and real on-disk stores."""

from __future__ import annotations

import asyncio
import dataclasses
import time

import httpx
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from engram.schemas.events import Actor
from engram.streams import codec

from engram.settings import Settings
from tests.factories import event, remembered
from tests.harness import Server

pytestmark = pytest.mark.integration

WHO = {"source": "operator", "actor": {"id": "dana", "role": "operator"}}


def remember(server: Server, tenant: str, **body: object) -> httpx.Response:
    """Written by the operator dana; a user-scoped memory by its user (as the rules want)."""
    payload: dict = {**WHO, "label": "L", "content": "C", "kind": "fact", "importance": 3, **body}
    headers = {}
    if payload.get("scope") == "user" and isinstance(payload.get("stakeholders"), dict):
        user = payload["stakeholders"].get("user_id")
        if user:
            headers = server.bearer(tenant, role="user", user=user)
            payload.pop("actor")
    return server.http.post(
        f"{server.url}/v1/tenants/{tenant}/memories",
        params={"wait": "true"},
        json=payload,
        headers=headers,
        timeout=40,
    )


def test_write_wait_then_read(server: Server) -> None:
    r = remember(
        server,
        "acme",
        memory_id="roas-target",
        label="ROAS target",
        kind="objective",
        importance=5,
        memory_class="PerformanceTargetMemory",
        properties={"metric": "roas", "goal": 3.0},
    )
    assert r.status_code == 202, r.text
    body = r.json()
    assert body["applied"] is True and body["memory_id"] == "roas-target" and body["offset"] >= 0
    got = server.http.get(f"{server.url}/v1/tenants/acme/memories/roas-target").json()
    assert got["label"] == "ROAS target" and got["properties"] == {"metric": "roas", "goal": 3.0}
    assert got["importance_name"] == "Critical" and got["active"] is True

    assert (
        remember(
            server, "acme", memory_id="pref", kind="preference", scope="user", stakeholders={"user_id": "sam"}
        ).status_code
        == 202
    )
    lst = server.http.get(f"{server.url}/v1/tenants/acme/memories").json()
    assert lst["count"] == 2
    assert [
        m["id"]
        for m in server.http.get(
            f"{server.url}/v1/tenants/acme/memories", params={"kind": "preference"}
        ).json()["data"]
    ] == ["pref"]
    assert [
        m["id"]
        for m in server.http.get(
            f"{server.url}/v1/tenants/acme/memories", params={"scope": "company"}
        ).json()["data"]
    ] == ["roas-target"]
    by_class = server.http.get(
        f"{server.url}/v1/tenants/acme/memories", params={"class": "PerformanceTargetMemory"}
    ).json()
    assert [m["id"] for m in by_class["data"]] == ["roas-target"]

    r = remember(server, "acme", memory_id="roas-target-2", replaces="roas-target", kind="objective")
    assert r.status_code == 202, r.text
    active = server.http.get(f"{server.url}/v1/tenants/acme/memories", params={"active": "true"}).json()
    assert sorted(m["id"] for m in active["data"]) == ["pref", "roas-target-2"]
    inactive = server.http.get(f"{server.url}/v1/tenants/acme/memories", params={"active": "false"}).json()
    assert [m["id"] for m in inactive["data"]] == ["roas-target"]


def test_kpi_write_is_projected(server: Server) -> None:
    for value in (2.7, 3.2):
        r = server.http.post(
            f"{server.url}/v1/tenants/acme/kpis",
            params={"wait": "true"},
            json={**WHO, "source": "pipeline", "metric": "roas", "value": value, "period": "2026-12"},
            timeout=40,
        )
        assert r.status_code == 202 and r.json()["applied"], r.text
    nq = server.http.get(f"{server.url}/v1/tenants/acme/graph").text
    assert '<urn:engram:kpi:roas:2026-12> <https://engram.dev/ns#value> "3.2"' in nq
    assert '"2.7"' not in nq


def test_tenants_are_isolated(server: Server) -> None:
    assert remember(server, "tenant-a", memory_id="secret").status_code == 202
    assert server.http.get(f"{server.url}/v1/tenants/tenant-b/memories/secret").status_code == 404
    assert server.http.get(f"{server.url}/v1/tenants/tenant-b/memories").json() == {"data": [], "count": 0}
    assert server.http.get(f"{server.url}/v1/tenants/tenant-b/graph").text == ""
    assert server.http.get(f"{server.url}/v1/tenants/tenant-a/memories").json()["count"] == 1


@pytest.mark.parametrize(
    ("body", "status", "reason"),
    [
        ({"importance": 9}, 422, "less than or equal to 5"),
        ({"scope": "user"}, 422, "needs stakeholders.user_id"),
        ({"kind": "rumour"}, 422, "kind"),
        ({"replaces": "ghost"}, 404, "memory ghost not found"),
        ({"memory_class": "not a class"}, 422, "memory_class"),
        ({"source": None}, 422, "source"),
    ],
)
def test_bad_writes_get_4xx_with_reason(server: Server, body: dict, status: int, reason: str) -> None:
    r = remember(server, "acme", **body)
    assert r.status_code == status, r.text
    assert reason in r.text
    assert "Traceback" not in r.text


def test_bad_paths_and_payloads(server: Server) -> None:
    assert server.http.get(f"{server.url}/v1/tenants/Not_A_Tenant/memories").status_code == 422
    assert server.http.get(f"{server.url}/v1/tenants/acme/memories/ghost").status_code == 404
    assert server.http.get(f"{server.url}/v1/tenants/acme/memories", params={"limit": 0}).status_code == 422
    assert remember(server, "acme", memory_id="seed").status_code == 202
    bad_class = server.http.get(f"{server.url}/v1/tenants/acme/memories", params={"class": "http://x/%zz"})
    assert bad_class.status_code == 422
    assert remember(server, "acme", memory_class="http://x/%zz").status_code == 422
    assert remember(server, "acme", expires_at="9999-12-31T23:00:00-05:00").status_code == 422
    assert remember(server, "acme", properties={"supersededBy": "x"}).status_code == 422
    r = server.http.post(
        f"{server.url}/v1/tenants/acme/memories",
        content=b"{not json",
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 422
    assert server.http.get(f"{server.url}/healthz").json() == {"status": "ok"}
    assert server.http.get(f"{server.url}/readyz").json()["ready"] is True


async def _poison_then_good(settings: Settings) -> list[tuple[bytes | None, bytes | None, dict[str, bytes]]]:
    good = event("MemoryRemembered", remembered("m9", label="l", content="c"))
    bad_domain = dataclasses.replace(  # passes Avro, fails the domain rules (importance 9)
        good,
        event_id="00000000-0000-4000-8000-000000000009",
        actor=Actor("etl", "pipeline"),
        source="pipeline",
        payload=dataclasses.replace(good.payload, importance=9),
    )
    records = [
        (b"acme", b"\x00garbage"),
        (
            b"\xff\xfe",
            codec.encode(event("KpiObserved", {"metric": "roas", "value": 1.0, "period": "2026-11"})),
        ),
        (b"other", codec.encode(event("KpiObserved", {"metric": "roas", "value": 1.0, "period": "2026-11"}))),
        (b"acme", codec.encode(bad_domain)),
        (b"acme", codec.encode(event("MemoryRevised", {"memory_id": "ghost", "changes": {"label": "x"}}))),
        (
            b"acme",
            codec.encode(
                event(
                    "MemoryRemembered",
                    {
                        "memory_id": "nogoal",
                        "label": "l",
                        "content": "c",
                        "kind": "objective",
                        "scope": "company",
                        "importance": 3,
                        "memory_class": "PerformanceTargetMemory",
                        "properties": {"metric": "roas"},
                    },
                )
            ),
        ),
    ]
    good = event(
        "MemoryRemembered",
        {
            "memory_id": "after-poison",
            "label": "l",
            "content": "c",
            "kind": "fact",
            "scope": "company",
            "importance": 3,
        },
    )
    producer = AIOKafkaProducer(
        bootstrap_servers=settings.kafka_bootstrap, enable_idempotence=True, acks="all"
    )
    await producer.start()
    try:
        for key, value in records:
            await producer.send_and_wait(settings.events_topic, key=key, value=value)
        await producer.send_and_wait(
            settings.events_topic, key=b"acme", value=codec.encode(good), headers=codec.headers(good)
        )
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(
        settings.dead_letters_topic,
        bootstrap_servers=settings.kafka_bootstrap,
        auto_offset_reset="earliest",
        group_id=None,
    )
    await consumer.start()
    got: list[tuple[bytes | None, bytes | None, dict[str, bytes]]] = []
    try:
        deadline = time.monotonic() + 60
        while len(got) < len(records) and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=1000)
            for msgs in batch.values():
                got.extend((m.key, m.value, dict(m.headers)) for m in msgs)
    finally:
        await consumer.stop()
    assert sorted((k or b"", v or b"") for k, v, _ in got) == sorted(records)  # original bytes kept
    order = {rec: i for i, rec in enumerate(records)}
    return sorted(got, key=lambda g: order[(g[0], g[1])])


def test_poisoned_records_go_to_dead_letters_and_the_stream_goes_on(
    server: Server, settings: Settings
) -> None:
    got = asyncio.run(_poison_then_good(settings))
    reasons = [h["dead-letter-reason"].decode() for _, _, h in got]
    assert "missing C3 01" in reasons[0]
    assert "not a tenant id" in reasons[1]
    assert "differs from record key" in reasons[2]
    assert "importance must be an integer 1-5" in reasons[3]
    assert "memory ghost not found" in reasons[4]
    assert "shape violations: :PerformanceTargetMemory: :goal is required" in reasons[5]
    assert all(h["original-topic"] == settings.events_topic.encode() for _, _, h in got)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        r = server.http.get(f"{server.url}/v1/tenants/acme/memories/after-poison")
        if r.status_code == 200:
            break
        time.sleep(0.2)
    assert r.status_code == 200, "the good event after the poison was not applied"
    assert server.proc is not None and server.proc.poll() is None


def test_derived_status_follows_the_live_kpi_through_the_api(server: Server) -> None:
    r = remember(
        server,
        "acme",
        memory_id="roas",
        label="ROAS target",
        kind="objective",
        importance=5,
        memory_class="PerformanceTargetMemory",
        properties={"metric": "roas", "goal": 3.0},
    )
    assert r.status_code == 202, r.text
    for value, status in ((2.7, "below"), (3.2, "met")):
        k = server.http.post(
            f"{server.url}/v1/tenants/acme/kpis",
            params={"wait": "true"},
            timeout=40,
            json={**WHO, "source": "pipeline", "metric": "roas", "value": value, "period": "2026-12"},
        )
        assert k.status_code == 202, k.text
        got = server.http.get(f"{server.url}/v1/tenants/acme/memories/roas").json()
        assert got["statuses"]["targetStatus"] == status
        derived = next(d for d in got["derived"] if d["predicate"] == "targetStatus")
        assert derived["rule"].startswith("targets.dlog:")
        assert f"roas is {value:g}" in derived["explanation"]
        kpi_input = next(i for i in derived["inputs"] if i["predicate"] == "value")
        assert kpi_input == {
            "subject": "urn:engram:kpi:roas:2026-12",
            "predicate": "value",
            "object": f"{value:g}",
            "asserted": True,
        }
    assert {"ActiveMemory", "PerformanceTargetMemory", "MarketingMemory", "Memory"} <= set(got["classes"])
    trees = server.http.get(f"{server.url}/v1/tenants/acme/memories/roas/derivations").json()
    assert any(i["predicate"] == "targetStatus" for i in trees["inferred"])
    cls = "https://engram.dev/ns#PerformanceTargetMemory"
    about = server.http.get(f"{server.url}/v1/tenants/acme/graph/inferred", params={"subject": cls}).json()
    closure = next(i for i in about["inferred"] if i["value"] == "Memory")
    assert closure["derivations"][0]["rule"].startswith("subclass.dlog:")
    bad = server.http.get(f"{server.url}/v1/tenants/acme/graph/inferred", params={"subject": "not an iri"})
    assert bad.status_code == 422


def test_shape_violations_are_422_before_anything_is_produced(server: Server) -> None:
    r = remember(
        server,
        "acme",
        memory_id="cap",
        memory_class="BudgetConstraintMemory",
        properties={"platform": "meta"},
    )
    assert r.status_code == 422
    assert ":amount is required" in r.text
    r = remember(server, "acme", memory_class="GhostMemory")
    assert r.status_code == 422 and "unknown class :GhostMemory" in r.text
    assert server.http.get(f"{server.url}/v1/tenants/acme/memories").json()["count"] == 0
