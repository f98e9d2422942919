"""Hostile records straight on Kafka, and idempotent writes, against a real `engram serve`.

Asserts what the projection contract promises whatever arrives: every poisoned record is
dead-lettered once with its reason (original bytes kept), no record is retried or stalls the
stream, a refused record never creates a tenant, and every tenant's live graph equals its replay
from the log. The property test drives random mixes of valid and hostile records.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import json
import math
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from engram.projections.read import export_nquads
from engram.schemas.events import Actor
from engram.streams import codec
from engram.streams.replay import replay_tenant
from engram.streams.topics import ensure_topics
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engram.settings import Settings
from tests.factories import event, remembered, unchecked_event
from tests.harness import Server, isolated_settings

pytestmark = pytest.mark.integration

WHO = {"source": "operator", "actor": {"id": "dana", "role": "operator"}}
NOBODY = {"user_id": None, "team_ids": []}


def uid(n: int) -> str:
    return f"00000000-0000-4000-8000-{n:012x}"


def raw(
    etype: str, payload: dict[str, Any], *, tenant: str, event_id: str, at: str = "2026-11-01T00:00:00Z"
) -> bytes:
    """An event encoded with Avro only: the domain rules are not consulted, as a rogue producer."""
    when = datetime.fromisoformat(at.replace("Z", "+00:00"))
    return codec.encode(
        unchecked_event(event_id, tenant, when, Actor("etl", "pipeline"), "pipeline", etype, payload)
    )


def valid(etype: str, payload: dict[str, Any], *, tenant: str, event_id: str, **extra: Any) -> bytes:
    return codec.encode(event(etype, payload, tenant=tenant, event_id=event_id, **extra))


async def produce(settings: Settings, records: list[tuple[bytes | None, bytes | None]]) -> None:
    producer = AIOKafkaProducer(  # allows what the broker allows, more than engram's producer does
        bootstrap_servers=settings.kafka_bootstrap,
        enable_idempotence=True,
        acks="all",
        max_request_size=1_100_000,
    )
    await producer.start()
    try:
        for key, value in records:
            await producer.send(settings.events_topic, key=key, value=value)
        await producer.flush()
    finally:
        await producer.stop()


async def dead_letters(
    settings: Settings, expected: int, timeout: float = 60
) -> list[tuple[bytes | None, bytes | None, dict[str, bytes]]]:
    consumer = AIOKafkaConsumer(
        settings.dead_letters_topic,
        bootstrap_servers=settings.kafka_bootstrap,
        auto_offset_reset="earliest",
        group_id=None,
    )
    await consumer.start()
    got: list[tuple[bytes | None, bytes | None, dict[str, bytes]]] = []
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=500)
            for msgs in batch.values():
                got.extend((m.key, m.value, dict(m.headers)) for m in msgs)
            if len(got) >= expected and not batch:
                break
    finally:
        await consumer.stop()
    return got


def replayed(settings: Settings, tenant: str, root: Path) -> str:
    graph = asyncio.run(replay_tenant(settings, tenant, root))
    out = export_nquads(graph) if graph is not None else ""
    del graph
    gc.collect()
    return out


def live(server: Server, tenant: str) -> str:
    r = server.http.get(f"{server.url}/v1/tenants/{tenant}/graph", timeout=30)
    assert r.status_code == 200, r.text
    return r.text


def hostile_records(
    tenant: str,
) -> tuple[list[tuple[bytes | None, bytes | None]], list[tuple[bytes | None, bytes | None, str]]]:
    """Valid records interleaved with every hostile kind; returns (all records, the poisoned ones
    with the reason each must be dead-lettered with)."""
    kpi = {"metric": "roas", "value": 2.0, "period": "2026-11"}
    frame = valid("KpiObserved", kpi, tenant=tenant, event_id=uid(1))
    surrogate = raw("KpiObserved", {**kpi, "period": "SURR"}, tenant=tenant, event_id=uid(900)).replace(
        b"SURR", b"\xed\xa0\x80A"
    )
    poisoned: list[tuple[bytes | None, bytes | None, str]] = [
        (tenant.encode(), b"\x00garbage", "missing C3 01"),
        (tenant.encode(), frame + b"\x00trailing", "unexpected bytes after the Avro record"),
        (tenant.encode(), surrogate, "corrupt Avro body"),
        (tenant.encode(), None, "missing C3 01"),
        (tenant.encode(), b"\xc3\x01" + b"x" * 1_048_300, "unknown writer schema"),  # at the broker's limit
        (tenant.encode() + b"\n", frame, "not a tenant id"),
        (b"\xff\xfe", frame, "not a tenant id"),
        (None, frame, "not a tenant id"),
        (b"ghost-" + tenant.encode(), frame, "differs from record key"),
        (
            b"ghost2-" + tenant.encode(),
            raw("KpiObserved", {**kpi, "value": math.nan}, tenant="ghost2-" + tenant, event_id=uid(901)),
            "finite",
        ),
        (
            tenant.encode(),
            raw("KpiObserved", {**kpi, "value": math.nan}, tenant=tenant, event_id=uid(902)),
            "finite",
        ),
        (
            tenant.encode(),
            raw("KpiObserved", {**kpi, "value": math.inf}, tenant=tenant, event_id=uid(903)),
            "finite",
        ),
        (
            tenant.encode(),
            raw("KpiObserved", {**kpi, "metric": "roas\n"}, tenant=tenant, event_id=uid(904)),
            "metric must match",
        ),
        (
            tenant.encode(),
            raw(
                "MemoryRemembered",
                {**remembered("x\n"), "stakeholders": NOBODY},
                tenant=tenant,
                event_id=uid(905),
            ),
            "memory_id must match",
        ),
        (
            tenant.encode(),
            raw(
                "MemoryRemembered",
                {**remembered("p1", properties={"p\n": 1}), "stakeholders": NOBODY},
                tenant=tenant,
                event_id=uid(906),
            ),
            "property name",
        ),
        (
            tenant.encode(),
            raw(
                "StakeholderChanged",
                {"user_id": "u\n", "team_ids": [], "role": "user"},
                tenant=tenant,
                event_id=uid(907),
            ),
            "user_id must match",
        ),
        (
            tenant.encode(),
            raw("KpiObserved", kpi, tenant=tenant, event_id=uid(1).upper()),
            "already used for a",
        ),
        (
            tenant.encode(),
            valid("KpiObserved", {**kpi, "value": 9.0}, tenant=tenant, event_id=uid(1)),
            "already used for a different event",
        ),
        (
            tenant.encode(),
            valid("MemoryRemembered", remembered("m1", label="again"), tenant=tenant, event_id=uid(908)),
            "already exists",
        ),
        (
            tenant.encode(),
            valid(
                "MemoryRevised",
                {"memory_id": "ghost", "changes": {"label": "x"}},
                tenant=tenant,
                event_id=uid(909),
            ),
            "memory ghost not found",
        ),
    ]
    records: list[tuple[bytes | None, bytes | None]] = [
        (tenant.encode(), frame),
        (tenant.encode(), valid("MemoryRemembered", remembered("m1"), tenant=tenant, event_id=uid(2))),
    ]
    for i, (key, value, _) in enumerate(poisoned):
        records.append((key, value))
        records.append(
            (
                tenant.encode(),
                valid(
                    "ClockTicked",
                    {"now": f"2026-11-{i % 28 + 1:02d}T00:00:00.5Z"},
                    tenant=tenant,
                    event_id=uid(100 + i),
                ),
            )
        )
    records.append((tenant.encode(), frame))  # the same record again: a duplicate, skipped, not dead-lettered
    records.append(
        (
            tenant.encode(),
            valid("ClockTicked", {"now": "2026-12-01T00:00:00.500Z"}, tenant=tenant, event_id=uid(3)),
        )
    )
    records.append(
        (
            tenant.encode(),
            valid("ClockTicked", {"now": "2026-12-01T00:00:00.5Z"}, tenant=tenant, event_id=uid(4)),
        )
    )
    return records, poisoned


def test_hostile_records_are_dead_lettered_once_and_live_equals_replay(
    server: Server, settings: Settings, tmp_path: Path
) -> None:
    tenants = ["hostile-a", "hostile-b"]
    every: list[tuple[bytes | None, bytes | None]] = []
    poisoned: list[tuple[bytes | None, bytes | None, str]] = []
    for tenant in tenants:
        records, bad = hostile_records(tenant)
        every += records
        poisoned += bad
    started = time.monotonic()
    asyncio.run(produce(settings, every))
    server.wait_ready(timeout=60)
    took = time.monotonic() - started
    letters = asyncio.run(dead_letters(settings, len(poisoned)))
    assert len(letters) == len(poisoned), [h["dead-letter-reason"] for _, _, h in letters]
    pending = list(poisoned)
    for key, value, headers in letters:
        match = next(p for p in pending if (p[0], p[1] or b"") == (key, value or b""))
        pending.remove(match)
        assert match[2] in headers["dead-letter-reason"].decode(), (match, headers["dead-letter-reason"])
    assert pending == []
    log = server.log_path.read_text()
    assert "retrying" not in log, "a deterministic refusal was retried"
    assert took < 30, f"{len(every)} records took {took:.1f}s"
    for tenant in tenants:
        graph = live(server, tenant)
        assert '<urn:engram:clock> <https://engram.dev/ns#now> "2026-12-01T00:00:00.5Z"' in graph
        assert '#label> "again"' not in graph and '"9"^^' not in graph
        assert graph == replayed(settings, tenant, tmp_path / tenant)
    for ghost in ("ghost-hostile-a", "ghost2-hostile-a", "hostile-a\n"):
        assert not (settings.tenants_dir / ghost).exists()
    assert not (settings.tenants_dir / "ghost-hostile-a").exists()
    assert live(server, "ghost2-hostile-b") == ""
    print(
        json.dumps(
            {
                "records": len(every),
                "poisoned": len(poisoned),
                "dead_lettered": len(letters),
                "seconds": round(took, 2),
            }
        )
    )


# -- replay == live over random mixes ------------------------------------------------------------

IDS = ["m0", "m1", "m2", "m3"]
EVENT_IDS = [uid(5000 + i) for i in range(12)]


@st.composite
def record_mix(draw: st.DrawFn, tenant: str) -> list[tuple[bytes | None, bytes | None]]:
    out: list[tuple[bytes | None, bytes | None]] = []
    key = tenant.encode()
    for _ in range(draw(st.integers(3, 25))):
        eid = draw(
            st.sampled_from(EVENT_IDS)
        )  # a small pool: ids get reused, with and without the same content
        m = draw(st.sampled_from(IDS))
        kind = draw(
            st.sampled_from(
                [
                    "remember",
                    "revise",
                    "supersede",
                    "restore",
                    "forget",
                    "kpi",
                    "tick",
                    "repeat",
                    "garbage",
                    "trailing",
                    "nan",
                    "newline",
                ]
            )
        )
        if kind == "repeat" and out:
            out.append(draw(st.sampled_from(out)))
            continue
        ms = draw(st.sampled_from(["", ".5", ".500", ".050"]))
        at = f"2026-11-0{draw(st.integers(1, 3))}T00:00:00{ms}Z"
        match kind:
            case "remember":
                payload = remembered(m, importance=draw(st.integers(1, 5)), expires_at=at)
                value = valid("MemoryRemembered", payload, tenant=tenant, event_id=eid)
            case "revise":
                changes = draw(
                    st.sampled_from(
                        [{"label": "x"}, {"expires_at": at}, {"expires_at": None}, {"importance": 5}]
                    )
                )
                value = valid(
                    "MemoryRevised", {"memory_id": m, "changes": changes}, tenant=tenant, event_id=eid
                )
            case "supersede":
                other = draw(st.sampled_from([i for i in IDS if i != m]))
                value = valid(
                    "MemorySuperseded", {"memory_id": m, "superseded_by": other}, tenant=tenant, event_id=eid
                )
            case "restore":
                value = valid("MemoryRestored", {"memory_id": m}, tenant=tenant, event_id=eid)
            case "forget":
                value = valid("MemoryForgotten", {"memory_id": m}, tenant=tenant, event_id=eid)
            case "kpi":
                kpi = {"metric": "roas", "value": draw(st.sampled_from([1.0, 2.5, 4.0])), "period": "2026-11"}
                value = valid("KpiObserved", kpi, tenant=tenant, event_id=eid, occurred_at=at)
            case "tick":
                value = valid("ClockTicked", {"now": at}, tenant=tenant, event_id=eid)
            case "trailing":
                value = valid("ClockTicked", {"now": at}, tenant=tenant, event_id=eid) + b"\x01"
            case "nan":
                value = raw(
                    "KpiObserved",
                    {"metric": "roas", "value": math.nan, "period": "2026-11"},
                    tenant=tenant,
                    event_id=eid,
                )
            case "newline":
                value = raw("MemoryRestored", {"memory_id": m + "\n"}, tenant=tenant, event_id=eid)
            case _:
                value = draw(st.binary(max_size=40))
        out.append((key, value))
    return out


def test_replay_equals_live_for_random_mixes_of_valid_and_hostile_records(
    server: Server, settings: Settings, tmp_path: Path
) -> None:
    tenants: list[str] = []

    @settings_for_property
    @given(data=st.data())
    def produce_one_tenant(data: st.DataObject) -> None:
        tenant = f"mix-{len(tenants)}-{uuid.uuid4().hex[:6]}"
        tenants.append(tenant)
        asyncio.run(produce(settings, data.draw(record_mix(tenant))))

    produce_one_tenant()
    server.wait_ready(timeout=120)
    differing = [t for t in tenants if live(server, t) != replayed(settings, t, tmp_path / t)]
    print(json.dumps({"tenants": len(tenants), "live_differs_from_replay": len(differing)}))
    assert len(tenants) >= 20 and differing == []


settings_for_property = settings(
    max_examples=25, deadline=None, database=None, suppress_health_check=list(HealthCheck), derandomize=True
)


# -- idempotent writes over HTTP ----------------------------------------------------------------


def post(server: Server, path: str, body: dict[str, Any], wait: bool = True) -> httpx.Response:
    return server.http.post(
        f"{server.url}/v1/tenants/acme/{path}", params={"wait": str(wait).lower()}, json=body, timeout=40
    )


def test_a_retried_write_is_applied_once_and_a_reused_id_is_409(server: Server) -> None:
    target = {
        **WHO,
        "memory_id": "roas",
        "label": "ROAS target",
        "content": "3.0",
        "kind": "objective",
        "importance": 5,
        "memory_class": "PerformanceTargetMemory",
        "properties": {"metric": "roas", "goal": 3.0},
    }
    assert post(server, "memories", target).status_code == 202
    low = {
        **WHO,
        "source": "pipeline",
        "metric": "roas",
        "value": 2.0,
        "period": "2026-12",
        "event_id": uid(1),
    }
    high = {**low, "value": 4.0, "event_id": uid(2)}
    first = post(server, "kpis", low)
    assert first.status_code == 202 and first.json()["applied"] is True
    assert post(server, "kpis", high).status_code == 202
    status = server.http.get(f"{server.url}/v1/tenants/acme/memories/roas").json()["statuses"]["targetStatus"]
    assert status == "met"
    for wait in (True, False):
        retry = post(server, "kpis", low, wait=wait)  # a client retrying the first write
        assert retry.status_code == 202 and retry.json() == first.json(), retry.text
    assert (
        server.http.get(f"{server.url}/v1/tenants/acme/memories/roas").json()["statuses"]["targetStatus"]
        == "met"
    )
    reused = post(server, "kpis", {**low, "value": 1.0})
    assert reused.status_code == 409 and "already used for a different event" in reused.text
    note = {**WHO, "event_id": uid(3), "label": "L", "content": "C", "kind": "fact", "importance": 3}
    created = post(server, "memories", note)
    assert created.status_code == 202 and post(server, "memories", note).json() == created.json()
    again = post(server, "memories", {**target, "label": "other"})
    assert again.status_code == 409 and "already exists" in again.text


def test_parallel_creates_of_one_memory_id_are_one_202_and_the_rest_409(server: Server) -> None:
    body = {**WHO, "memory_id": "race", "label": "L", "content": "C", "kind": "fact", "importance": 3}
    with concurrent.futures.ThreadPoolExecutor(max_workers=50) as pool:
        codes = list(pool.map(lambda _: post(server, "memories", body).status_code, range(50)))
    assert sorted(codes) == [202] + [409] * 49, codes


def test_a_dead_letter_too_large_for_an_old_dead_letter_topic_keeps_its_reason(
    broker: Settings, tmp_path: Path
) -> None:
    """A dead-letter topic created before its 4 MiB limit refuses the biggest records' copies: the
    dead letter then carries the reason and the origin without the bytes, and the stream goes on."""
    s = isolated_settings(broker, tmp_path / "data")

    async def old_topics() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=s.kafka_bootstrap)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(s.dead_letters_topic, 1, 1)])
        finally:
            await admin.close()
        await ensure_topics(s)

    asyncio.run(old_topics())
    srv = Server(s, tmp_path / "server.log").start()
    try:
        srv.wait_ready()
        tick = valid("ClockTicked", {"now": "2026-11-01T00:00:00Z"}, tenant="big", event_id=uid(1))
        asyncio.run(produce(s, [(b"big", b"\xc3\x01" + b"x" * 1_048_470), (b"big", tick)]))
        srv.wait_ready(timeout=30)
        (letter,) = asyncio.run(dead_letters(s, 1))
        assert letter[1] is None and b"unknown writer schema" in letter[2]["dead-letter-reason"]
        assert letter[2]["dead-letter-dropped"].startswith(b"1048472 bytes")
        assert "<urn:engram:clock> <https://engram.dev/ns#now>" in live(srv, "big")
        assert "retrying" not in srv.log_path.read_text()
    finally:
        srv.stop()


# -- records the Kafka client itself cannot parse, and every compression codec ---------------------


class _RawHeaderKey(str):
    """A header key aiokafka's pure-Python builder writes as bytes that are not UTF-8."""

    def encode(self, *_args: object, **_kwargs: object) -> bytes:  # type: ignore[override]
        return b"\xff\xfe"


def test_unparseable_records_and_misplaced_ones_are_dead_lettered_and_compressed_ones_apply(
    server: Server, settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from aiokafka.producer import message_accumulator
    from aiokafka.producer import producer as producer_module
    from aiokafka.record.default_records import _DefaultRecordBatchBuilderPy
    from engram.streams.topics import partition_for

    tenant = "parse-a"
    home = partition_for(tenant, settings.events_partitions)

    def kpi(metric: str, n: int) -> bytes:
        payload = {"metric": metric, "value": float(n), "period": "2026-11"}
        return valid("KpiObserved", payload, tenant=tenant, event_id=uid(7000 + n))

    async def go() -> None:
        for n, codec_name in enumerate(("gzip", "snappy", "lz4", "zstd")):
            producer = AIOKafkaProducer(
                bootstrap_servers=settings.kafka_bootstrap, compression_type=codec_name
            )
            await producer.start()
            try:
                await producer.send_and_wait(
                    settings.events_topic, key=tenant.encode(), value=kpi(codec_name, n)
                )
            finally:
                await producer.stop()
        for module in (message_accumulator, producer_module):  # the rogue producer: the Python builder
            monkeypatch.setattr(module, "DefaultRecordBatchBuilder", _DefaultRecordBatchBuilderPy)
        producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap)
        await producer.start()
        try:
            await producer.send_and_wait(
                settings.events_topic,
                key=tenant.encode(),
                value=kpi("bad_header", 10),
                headers=[(_RawHeaderKey("k"), b"v")],
            )
            await producer.send_and_wait(
                settings.events_topic,
                key=tenant.encode(),
                value=kpi("elsewhere", 11),
                partition=(home + 1) % settings.events_partitions,
            )
            await producer.send_and_wait(settings.events_topic, key=tenant.encode(), value=kpi("after", 12))
        finally:
            await producer.stop()

    asyncio.run(go())
    server.wait_ready(timeout=60)
    letters = asyncio.run(dead_letters(settings, 2))
    reasons = sorted(h["dead-letter-reason"].decode() for _, _, h in letters)
    assert len(reasons) == 2, reasons
    assert "header key b'\\xff\\xfe' is not UTF-8" in reasons[1], reasons
    assert "the one its key hashes to" in reasons[0], reasons
    graph = live(server, tenant)
    for metric in ("gzip", "snappy", "lz4", "zstd", "after"):
        assert f"<urn:engram:kpi:{metric}:2026-11>" in graph, metric
    assert "<urn:engram:kpi:bad_header:" not in graph and "<urn:engram:kpi:elsewhere:" not in graph
    assert graph == replayed(settings, tenant, tmp_path / "replay")
    assert "Traceback" not in server.log_path.read_text()
