"""The crypto-shred test, on a real server and broker: a memory's words are never on the log in the
clear, and once it is forgotten its key is gone, its replay shows it erased and equals the live
store, and no file the system wrote (store, indexes, snapshots, archive, as_of scratch stores, keys)
holds its words."""

from __future__ import annotations

import asyncio
import gc
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import cramjam
import pytest
from aiokafka import AIOKafkaConsumer
from engram.projections.read import export_nquads
from engram.schemas import sealing
from engram.streams.objects import Objects, open_objects
from engram.streams.replay import replay_tenant

from engram.settings import Settings
from tests.harness import Server


async def topic_bytes(settings: Settings, topic: str) -> bytes:
    """Every key, value and header of every record of ``topic``, as a consumer reads them."""
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=settings.kafka_bootstrap, auto_offset_reset="earliest", group_id=None
    )
    await consumer.start()
    out = bytearray()
    try:
        while batch := await consumer.getmany(timeout_ms=2000):
            for msgs in batch.values():
                for m in msgs:
                    out += (m.key or b"") + (m.value or b"")
                    out += b"".join(k.encode() + (val or b"") for k, val in m.headers)
    finally:
        await consumer.stop()
    return bytes(out)


def hits(data: bytes, words: list[str]) -> int:
    return sum(data.count(w.encode()) for w in words)


def plain(name: str, data: bytes) -> bytes:
    """A file's or object's bytes, an in-memory store's snapshot (zstd) decompressed."""
    return bytes(cramjam.zstd.decompress(data)) if name.endswith(".nq.zst") else data


def scan(root: Path, words: list[str]) -> tuple[int, int, list[str]]:
    """Every file under ``root``: (files, bytes, the files holding any of ``words``)."""
    files, size, holding = 0, 0, []
    for p in sorted(root.rglob("*")):
        if p.is_file() and not p.is_symlink():
            data = plain(p.name, p.read_bytes())
            files, size = files + 1, size + len(data)
            if hits(data, words):
                holding.append(str(p.relative_to(root)))
    return files, size, holding


@pytest.fixture(params=["local", "s3", "memory"])
def shredding(
    request: pytest.FixtureRequest, settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Server, Objects]]:
    """A server that snapshots every 2 events and archives the log, into a local object store or
    s3proxy (a bucket of its own): every copy it can make, made. Also the object store, to scan."""
    monkeypatch.setenv("ENGRAM_SNAPSHOT_EVERY", "2")
    monkeypatch.setenv("ENGRAM_ARCHIVE_ENABLED", "true")
    monkeypatch.setenv("ENGRAM_ARCHIVE_SEGMENT_AGE_S", "0.5")
    if request.param == "memory":  # tenants in memory, their snapshots the store's only copies
        monkeypatch.setenv("ENGRAM_STORE", "memory")
    if request.param == "s3":
        s3: Settings = request.getfixturevalue("s3")
        bucket = f"shred-{uuid.uuid4().hex[:12]}"
        named = [("ENDPOINT", s3.s3_endpoint), ("BUCKET", bucket), ("ACCESS_KEY", s3.s3_access_key),
                 ("SECRET_KEY", s3.s3_secret_key), ("REGION", s3.s3_region)]  # fmt: skip
        for name, value in named:
            monkeypatch.setenv(f"ENGRAM_S3_{name}", str(value))
        settings = settings.model_copy(update={"s3_endpoint": s3.s3_endpoint, "s3_bucket": bucket})
    srv = Server(settings, tmp_path / "server.log").start()
    srv.wait_ready()
    yield srv, open_objects(settings)
    srv.stop()


def objects_bytes(objects: Objects) -> tuple[int, int, list[str], list[str]]:
    """Every object of the store: (count, bytes, keys, the archive's segment keys)."""
    keys = objects.list("")
    data = {key: objects.get(key) for key in keys}
    return len(keys), sum(map(len, data.values())), keys, [k for k in keys if k.endswith(".avro")]


def test_a_forgotten_memory_is_only_ciphertext_on_the_log_and_erased_everywhere(
    shredding: tuple[Server, Objects], settings: Settings, tmp_path: Path
) -> None:
    server, objects = shredding
    mark = uuid.uuid4().hex[:10]
    words = [f"Okapi{mark}", f"Quill{mark}", f"Ember{mark}", f"Vesper{mark}"]
    # the text index keeps words lower-cased and stemmed: the mark itself is searched for too
    needles = [*words, *(w.lower() for w in words), mark]
    base = f"{server.url}/v1/tenants/acme/memories"
    body = {
        "memory_id": "secret", "source": "operator", "label": f"Target for {words[0]}",
        "content": f"{words[1]} must keep ROAS above 3", "kind": "objective", "importance": 4,
        "memory_class": "PerformanceTargetMemory",
        "properties": {"metric": "roas", "goal": 3.0, "owner": words[2]},
    }  # fmt: skip
    kept = {**body, "memory_id": "kept", "label": "kept", "content": "a memory that stays",
            "memory_class": "Memory", "properties": {}}  # fmt: skip
    for b in (body, kept):
        r = server.http.post(base, params={"wait": "true"}, json=b, timeout=40)
        assert r.status_code == 202, r.text
    r = server.http.patch(
        f"{base}/secret", params={"wait": "true"}, json={"source": "operator", "label": words[3]}, timeout=40
    )
    assert r.status_code == 202, r.text
    assert server.http.get(f"{base}/secret").json()["label"] == words[3]
    found = server.http.post(f"{server.url}/v1/tenants/acme/recall", json={"q": words[1]}, timeout=40).json()
    assert [m["id"] for m in found["data"]][:1] == ["secret"]
    r = server.http.post(f"{server.url}/v1/tenants/acme/snapshots", timeout=40)
    assert r.status_code == 201, r.text
    # as_of reads cached before the forget: the list and the memory, as the system knew them then
    as_of = "0:" + str(r.json()["offset"])
    before_list = server.http.get(base, params={"as_of": as_of}, timeout=60)
    before_one = server.http.get(f"{base}/secret", params={"as_of": as_of}, timeout=60)
    assert words[3] in before_list.text and before_one.json()["label"] == words[3], before_one.text
    before = asyncio.run(topic_bytes(settings, settings.events_topic))
    assert before and hits(before, words) == 0  # sealed from the first write: no plaintext, ever
    # the scan can see the words: before the forget they are in the store, the snapshots, as_of's
    _, _, holding = scan(settings.data_dir, needles)
    in_memory = os.environ.get("ENGRAM_STORE") == "memory"  # then no store on disk: the snapshots
    assert in_memory or any("tenants/acme" in h for h in holding), holding
    assert any(h.startswith("scratch/") for h in holding), holding
    assert any(hits(plain(k, objects.get(k)), needles) for k in objects.list("snapshots/")), objects.list("")

    r = server.http.post(
        f"{base}/secret/forget",
        params={"wait": "true"},
        json={"source": "operator", "reason": "erasure"},
        timeout=40,
    )
    assert r.status_code == 202, r.text
    got = server.http.get(f"{base}/secret").json()
    assert got["forgotten"] and got["label"] == sealing.ERASED and got["content"] == "[redacted]"
    assert got["memory_class"] == "Memory"
    found = server.http.post(f"{server.url}/v1/tenants/acme/recall", json={"q": words[1]}, timeout=40).json()
    assert "secret" not in [m["id"] for m in found["data"]]
    # the same as_of reads again: answered without the forgotten words
    after_list = server.http.get(base, params={"as_of": as_of}, timeout=60)
    after_one = server.http.get(f"{base}/secret", params={"as_of": as_of}, timeout=60)
    assert after_list.status_code == after_one.status_code == 200, after_one.text
    assert hits(after_list.content + after_one.content, needles) == 0, after_one.text
    assert after_one.json()["label"] == sealing.ERASED

    log_bytes = asyncio.run(topic_bytes(settings, settings.events_topic))
    dead = asyncio.run(topic_bytes(settings, settings.dead_letters_topic))
    assert (hits(log_bytes, words), hits(dead, words)) == (0, 0)
    graph = asyncio.run(replay_tenant(settings, "acme", tmp_path / "replay"))
    assert graph is not None
    replayed = export_nquads(graph)
    del graph
    gc.collect()
    live = server.http.get(f"{server.url}/v1/tenants/acme/graph", timeout=30).text
    assert replayed == live and hits(replayed.encode(), needles) == 0
    assert '"a memory that stays"' in replayed  # the other memory's key is untouched
    # every file the system wrote: the tenant's store, its indexes, snapshots, the archive, the
    # as_of scratch stores, the keys; the archive has segments by now (it rolls every 0.5 s)
    deadline = time.monotonic() + 30
    while not objects_bytes(objects)[3] and time.monotonic() < deadline:
        time.sleep(0.2)
    files, size, holding = scan(settings.data_dir, needles)
    count, stored, keys, archived = objects_bytes(objects)
    in_objects = [k for k in keys if hits(plain(k, objects.get(k)), needles)]
    print({"files_scanned": files, "bytes_scanned": size, "objects_scanned": count, "object_bytes": stored,
           "archive_segments": len(archived), "snapshots": len(objects.list("snapshots/acme/index/")),
           "log_records_bytes": len(log_bytes), "hits": len(holding) + len(in_objects)})  # fmt: skip
    assert archived and holding == [] and in_objects == []
    assert objects.list("snapshots/acme/index/")  # a snapshot taken since, from the rewritten store
