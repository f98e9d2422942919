"""The write path on a real server: a refused write costs no embedding and leaves no key, the bulk
route answers each item in order and a retry of it writes nothing new, and writes that arrive
together are finished and produced together."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from engram.settings import Settings
from tests.harness import Server, serving

pytestmark = pytest.mark.integration

TENANT = "intake-co"
WHO = {"source": "operator", "actor": {"id": "dana", "role": "operator"}}


@pytest.fixture(scope="module")
def server(broker: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = serving(broker, tmp_path_factory.mktemp("intake"))
    yield srv
    srv.stop()


def memory(label: str, **extra: Any) -> dict[str, Any]:
    return {**WHO, "label": label, "content": f"{label}, in words", "kind": "fact", "importance": 3, **extra}


def metric(server: Server, name: str) -> float:
    """A counter's or histogram sum's value on the server's /metrics page (0 before it is set)."""
    text = httpx.get(f"{server.url}/metrics", timeout=10).text
    found = re.search(rf"^{re.escape(name)} ([0-9.e+]+)$", text, re.M)
    return float(found.group(1)) if found else 0.0


def key_files(server: Server, tenant: str) -> int:
    return len(list((Path(server.settings.data_dir) / "keys" / tenant).glob("*.key")))


def events_of(server: Server, tenant: str) -> list[str]:
    r = server.http.get(f"{server.url}/v1/tenants/{tenant}/events", params={"limit": 1000})
    assert r.status_code == 200, r.text
    return [e["event_id"] for e in r.json()["data"]]


def test_a_refused_write_embeds_nothing_and_makes_no_key(server: Server) -> None:
    tenant = "intake-refused"
    first = server.http.post(f"{server.url}/v1/tenants/{tenant}/memories?wait=true", json=memory("first"))
    assert first.status_code == 202, first.text
    embedded, keys = metric(server, "engram_write_embedded_texts_total"), key_files(server, tenant)
    assert embedded >= 1 and keys == 1  # the counters count: the first write embedded and keyed
    auditor = server.bearer(tenant, role="auditor", user="ann")
    refusals = [
        (
            {"source": "operator", "label": "an auditor's", "content": "c", "kind": "fact", "importance": 3},
            auditor,
            403,
        ),
        (memory("replacing nothing", replaces="m-not-there"), {}, 404),  # names a memory that is not
        (memory("taken", memory_id=first.json()["memory_id"]), {}, 409),  # an id that is taken
    ]
    for body, headers, status in refusals:
        url = f"{server.url}/v1/tenants/{tenant}/memories"
        r = httpx.post(url, json=body, headers=headers) if headers else server.http.post(url, json=body)
        assert r.status_code == status, r.text
    assert metric(server, "engram_write_embedded_texts_total") == embedded
    assert key_files(server, tenant) == keys
    second = server.http.post(f"{server.url}/v1/tenants/{tenant}/memories", json=memory("second"))
    assert second.status_code == 202, second.text
    assert metric(server, "engram_write_embedded_texts_total") == embedded + 1
    assert key_files(server, tenant) == keys + 1


def test_the_bulk_route_answers_each_item_in_order_and_a_retry_writes_nothing_new(server: Server) -> None:
    tenant = "intake-bulk"
    taken = server.http.post(f"{server.url}/v1/tenants/{tenant}/memories?wait=true", json=memory("taken"))
    assert taken.status_code == 202, taken.text
    items = [
        memory("bulk one"),
        {**WHO, "content": "no label", "kind": "fact", "importance": 3},  # invalid
        memory("bulk two"),
        memory("replacing nothing", replaces="m-not-there"),  # not found
        memory("taken again", memory_id=taken.json()["memory_id"]),  # conflict
        memory("bulk three"),
    ]
    url = f"{server.url}/v1/tenants/{tenant}/memories:batch"
    headers = {"Idempotency-Key": "bulk-request-1"}
    r = server.http.post(url, params={"wait": "true"}, json={"memories": items}, headers=headers)
    assert r.status_code == 200, r.text
    answer = r.json()
    got = [(a["index"], a["status"], a["outcome"]) for a in answer["results"]]
    assert got == [
        (0, 202, "accepted"),
        (1, 422, "invalid"),
        (2, 202, "accepted"),
        (3, 404, "not_found"),
        (4, 409, "conflict"),
        (5, 202, "accepted"),
    ], answer
    assert answer["accepted"] == 3
    assert "label" in answer["results"][1]["reason"]
    assert all(a["applied"] for a in answer["results"] if a["status"] == 202)
    logged = events_of(server, tenant)
    assert len(logged) == 4  # the first memory and the batch's three

    again = server.http.post(url, params={"wait": "true"}, json={"memories": items}, headers=headers)
    assert again.status_code == 200, again.text
    firsts = {a["index"]: a for a in answer["results"] if a["status"] == 202}
    for a in again.json()["results"]:
        if a["index"] in firsts:
            before = firsts[a["index"]]
            assert (a["event_id"], a["memory_id"], a["partition"], a["offset"]) == (
                before["event_id"],
                before["memory_id"],
                before["partition"],
                before["offset"],
            )
    assert events_of(server, tenant) == logged  # nothing appended twice

    labels = sorted(
        m["label"] for m in server.http.get(f"{server.url}/v1/tenants/{tenant}/memories").json()["data"]
    )
    assert labels == ["bulk one", "bulk three", "bulk two", "taken"]


def test_hostile_items_are_each_answered_and_write_nothing(server: Server) -> None:
    tenant = "intake-hostile"
    url = f"{server.url}/v1/tenants/{tenant}/memories:batch"
    items: list[dict[str, Any]] = [
        {},
        {**memory("typed wrong"), "label": 5},
        {**memory("unknown field"), "colour": "red"},
        {**memory("bad id"), "memory_id": "not an id!"},
        {**memory("too long"), "label": "x" * 100_000},
        {**memory("bad class"), "memory_class": "NoSuchClass"},
        {**memory("nan"), "confidence": "NaN"},
        {**memory("twice"), "memory_id": "m-twice"},
        {**memory("twice again"), "memory_id": "m-twice"},
        {**memory("a rival's scope"), "scope": "user"},
    ]
    r = server.http.post(url, params={"wait": "true"}, json={"memories": items})
    assert r.status_code == 200, r.text
    got = [(a["index"], a["status"]) for a in r.json()["results"]]
    assert got == [(i, 422) for i in range(7)] + [(7, 202), (8, 409), (9, 422)], r.json()
    assert all(a["reason"] for a in r.json()["results"] if a["status"] != 202)
    listed = server.http.get(f"{server.url}/v1/tenants/{tenant}/memories").json()
    assert [m["label"] for m in listed["data"]] == ["twice"]
    for body in ({"memories": [1, "x"]}, {"memories": {"a": 1}}, {"memories": None}, [memory("a list")]):
        r = server.http.post(url, json=body)
        assert r.status_code == 422, r.text  # the request itself is not a batch: refused whole
    assert server.http.get(f"{server.url}/v1/tenants/{tenant}/memories").json()["count"] == 1


def test_a_bulk_request_over_1000_items_is_refused_whole(server: Server) -> None:
    url = f"{server.url}/v1/tenants/intake-too-many/memories:batch"
    r = server.http.post(url, json={"memories": [memory(f"m{i}") for i in range(1001)]})
    assert r.status_code == 422, r.text
    r = server.http.post(url, json={"memories": []})
    assert r.status_code == 422, r.text
    assert server.http.get(f"{server.url}/v1/tenants/intake-too-many/memories").json()["count"] == 0


def test_writes_that_arrive_together_are_produced_together(server: Server) -> None:
    tenants = [f"intake-crowd-{i}" for i in range(4)]
    writes_before = metric(server, "engram_write_batch_writes_sum")
    batches_before = metric(server, "engram_write_batch_writes_count")
    answers: list[int] = []
    lock = threading.Lock()

    def client(n: int) -> None:
        with httpx.Client(auth=server.http.auth, timeout=60) as http:
            for i in range(6):
                body = memory(f"crowd {n}-{i}")
                r = http.post(f"{server.url}/v1/tenants/{tenants[(n + i) % 4]}/memories", json=body)
                with lock:
                    answers.append(r.status_code)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert answers == [202] * 48
    writes = metric(server, "engram_write_batch_writes_sum") - writes_before
    batches = metric(server, "engram_write_batch_writes_count") - batches_before
    assert writes == 48  # every write went through the intake, counted once
    print(f"48 writes from 8 clients in {batches:.0f} batches")  # fewer than 48 unless the loop idled
