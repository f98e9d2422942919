"""Operations over a real server and broker: readiness within a lag bound (not zero lag) and the
Prometheus page (counters move with writes; no tenant id is ever a label)."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator

import httpx
import pytest
from engram.streams.producer import EventProducer
from engram.streams.topics import ensure_topics

from engram.settings import Settings
from tests.factories import event, remembered
from tests.harness import Server, isolated_settings

pytestmark = pytest.mark.integration

MAX_LAG = 600
BACKLOG = 2400
WHO = {"source": "operator", "actor": {"id": "dana", "role": "operator"}}


@pytest.fixture(scope="module")
def server(broker: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("ops")
    settings = isolated_settings(broker, root / "data").model_copy(
        # small batches: the watermark (and so the lag) moves in steps of 50, not 2,000
        update={"ready_max_lag": MAX_LAG, "projector_batch_max": 50, "embedder": "hashing"}
    )
    asyncio.run(ensure_topics(settings))
    srv = Server(settings, root / "server.log").start()
    srv.wait_ready()
    yield srv
    srv.stop()


async def produce_backlog(settings: Settings, tenants: list[str]) -> None:
    events = [
        event("MemoryRemembered", remembered(f"m{i}"), tenant=tenants[i % len(tenants)])
        for i in range(BACKLOG)
    ]
    async with EventProducer(settings) as producer:
        await producer.send_many(events)


def test_ready_while_behind_within_the_bound_and_503_beyond_it(server: Server) -> None:
    """A burst of 2,400 events: /readyz is 503 (with the reason) while more than
    ENGRAM_READY_MAX_LAG records are unhandled, and 200 again once fewer are, before the lag is 0."""
    asyncio.run(produce_backlog(server.settings, [f"ready-{n}" for n in range(8)]))
    seen: list[tuple[int, int, str | None]] = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        r = httpx.get(f"{server.url}/readyz", timeout=10)
        body = r.json()
        assert body["broker"] is True and body["max_lag"] == MAX_LAG, body
        seen.append((r.status_code, body["behind"], body["reason"]))
        if not body["lag"]:
            break
        time.sleep(0.02)
    summary = [(status, behind) for status, behind, _ in seen]
    print(f"readyz samples (status, behind): {summary}")
    assert not any(s == 200 and b > MAX_LAG for s, b in summary), summary
    assert not any(s == 503 and b <= MAX_LAG for s, b in summary), summary
    refused = [(b, why) for s, b, why in seen if s == 503]
    assert refused, summary  # the burst was seen above the bound
    assert all(why and f"{b} events behind" in why and "ENGRAM_READY_MAX_LAG" in why for b, why in refused)
    assert any(s == 200 and 0 < b <= MAX_LAG for s, b in summary), summary  # ready while behind
    assert seen[-1][:2] == (200, 0)


def sample(page: str, name: str, **labels: str) -> float:
    """The value of one sample of the Prometheus text page (0 if absent)."""
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in page.splitlines():
        found = re.fullmatch(rf"{name}(?:\{{(.*)\}})? (\S+)", line)
        if found and ",".join(sorted((found.group(1) or "").split(","))) == want:
            return float(found.group(2))
    return 0.0


def test_metrics_move_with_writes_and_name_no_tenant(server: Server) -> None:
    tenant = "metrics-tenant-7f3a"
    url = f"{server.url}/metrics"
    before = httpx.get(url, timeout=10).text
    for i in range(3):
        r = server.http.post(
            f"{server.url}/v1/tenants/{tenant}/memories",
            params={"wait": "true"},
            json={**WHO, "label": f"m {i}", "content": "c", "kind": "fact", "importance": 3},
        )
        assert r.status_code == 202, r.text
    assert server.http.get(f"{server.url}/v1/tenants/{tenant}/memories").status_code == 200
    r = httpx.get(url, timeout=10)  # no token: aggregates only
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    page = r.text
    applied = {"type": "MemoryRemembered", "outcome": "applied"}
    assert (
        sample(page, "engram_events_total", **applied) >= sample(before, "engram_events_total", **applied) + 3
    )
    route = "/v1/tenants/{tenant}/memories"
    writes = {"method": "POST", "route": route, "status": "2xx"}
    assert (
        sample(page, "engram_http_request_seconds_count", **writes)
        - sample(before, "engram_http_request_seconds_count", **writes)
        == 3
    )
    assert sample(page, "engram_http_request_seconds_count", method="GET", route=route, status="2xx") >= 1
    assert sample(page, "engram_projector_batch_seconds_count") > sample(
        before, "engram_projector_batch_seconds_count"
    )
    assert sample(page, "engram_rules_seconds_count") > 0
    assert sample(page, "engram_open_stores") >= 1
    assert sample(page, "engram_broker_up") == 1
    partitions = {m for m in re.findall(r'^engram_consumer_lag\{partition="(\d+)"\}', page, re.M)}
    assert partitions == {str(p) for p in range(server.settings.events_partitions)}
    assert "engram_snapshot_age_seconds" in page and "process_cpu_seconds_total" in page
    assert tenant not in page and "ready-0" not in page  # never a tenant id as a label
    httpx.get(f"{server.url}/v1/tenants/{tenant}/no-such-route", timeout=10)
    page = httpx.get(url, timeout=10).text
    assert "no-such-route" not in page
    assert sample(page, "engram_http_request_seconds_count", method="GET", route="other", status="4xx") >= 1
