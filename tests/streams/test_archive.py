"""The archive against a real broker and a real S3 server: every record as Kafka held it, readable by
plain fastavro; a replay after Kafka's retention deleted the oldest records equals one before; an
archiver killed (-9) at random moments archives every offset exactly once."""

from __future__ import annotations

import asyncio
import gc
import hashlib
import io
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import fastavro
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic, RecordsToDelete
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from engram.projections.read import export_nquads
from engram.streams import codec
from engram.streams.archive_read import (
    ArchiveError,
    ArchiveGap,
    LogRecord,
    Manifest,
    encode_segment,
    manifest_key,
    read_archived,
    topic_root,
)
from engram.streams.archiver import Archiver, archive_status
from engram.streams.keystore import KeyStore
from engram.streams.objects import LocalObjects, Objects
from engram.streams.pipeline import seal as seal_event
from engram.streams.replay import replay_tenant
from engram.streams.topics import partition_count, partition_for

from engram.settings import Settings
from tests.factories import event, remembered
from tests.harness import Server, isolated_settings, settings_env

pytestmark = pytest.mark.integration

Produced = tuple[int | None, bytes | None, bytes | None, list[tuple[str, bytes | None]]]


@pytest.fixture(params=["local", "s3"])
def objects(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Objects]:
    if request.param == "local":
        yield LocalObjects(tmp_path / "archive")
        return
    yield request.getfixturevalue("s3_objects")  # a bucket of this test's own


def fast(settings: Settings, **extra: object) -> Settings:
    """Small segments, rolled a moment after the partition is caught up."""
    return settings.model_copy(update={"archive_segment_records": 7, "archive_segment_age_s": 0.2, **extra})


async def produce(settings: Settings, records: list[Produced], topic: str | None = None) -> None:
    producer = AIOKafkaProducer(
        bootstrap_servers=settings.kafka_bootstrap, enable_idempotence=True, acks="all"
    )
    await producer.start()
    try:
        sent = [
            await producer.send(
                topic or settings.events_topic, key=key, value=value, headers=headers, partition=partition
            )
            for partition, key, value, headers in records
        ]
        await asyncio.gather(*sent)  # a record Kafka refused fails the test here
    finally:
        await producer.stop()


async def kafka_records(settings: Settings, topic: str | None = None) -> dict[int, list[LogRecord]]:
    """Every record Kafka holds, per partition."""
    topic = topic or settings.events_topic
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.kafka_bootstrap, group_id=None)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(await partition_count(settings, topic))]
        consumer.assign(tps)
        ends = await consumer.end_offsets(tps)
        for tp, first in (await consumer.beginning_offsets(tps)).items():
            consumer.seek(tp, first)
        out: dict[int, list[LogRecord]] = {tp.partition: [] for tp in tps}
        while [tp for tp in tps if await consumer.position(tp) < ends[tp]]:
            for tp, messages in (await consumer.getmany(timeout_ms=500)).items():
                out[tp.partition] += [
                    LogRecord(m.partition, m.offset, m.timestamp, m.key, m.value, list(m.headers))
                    for m in messages
                    if m.offset < ends[tp]
                ]
        return out
    finally:
        await consumer.stop()


async def end_offsets(settings: Settings, topic: str | None = None) -> dict[int, int]:
    topic = topic or settings.events_topic
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.kafka_bootstrap, group_id=None)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(await partition_count(settings, topic))]
        return {tp.partition: end for tp, end in (await consumer.end_offsets(tps)).items()}
    finally:
        await consumer.stop()


def caught_up(objects: Objects, topic: str, ends: dict[int, int]) -> bool:
    try:
        manifest = Manifest.load(objects, topic)
    except ValueError:  # s3proxy's file store can serve a manifest mid-overwrite: poll again
        return False
    return all((manifest.next_offset(p) or 0) >= end for p, end in ends.items())


async def archive_until_caught_up(settings: Settings, objects: Objects, timeout: float = 60) -> Manifest:
    """Run an archiver in this loop until the manifest reaches every partition's end, then stop it."""
    ends = await end_offsets(settings)
    stop = asyncio.Event()
    task = asyncio.create_task(Archiver(settings, objects).run(stop))
    deadline = time.monotonic() + timeout
    while not caught_up(objects, settings.events_topic, ends):
        assert not task.done(), task.exception()
        assert time.monotonic() < deadline, f"not archived in {timeout}s"
        await asyncio.sleep(0.05)
    stop.set()
    await task
    return Manifest.load(objects, settings.events_topic)


def ocf_records(objects: Objects, key: str) -> list[LogRecord]:
    """A segment read with plain fastavro, as any Avro tool would."""
    reader = fastavro.reader(io.BytesIO(objects.get(key)))
    assert reader.codec == "deflate"
    return [LogRecord.from_avro(r) for r in reader]  # type: ignore[arg-type]


def check_manifest(objects: Objects, manifest: Manifest, kafka: dict[int, list[LogRecord]]) -> None:
    """The manifest lists exactly the segment objects; together they hold every record of Kafka once,
    byte for byte, in order, and each entry says what its segment holds."""
    listed = sorted(s.key for segments in manifest.partitions.values() for s in segments)
    assert sorted(k for k in objects.list(f"{topic_root(manifest.topic)}/p=")) == listed
    for partition, records in kafka.items():
        segments = manifest.partitions.get(partition, [])
        archived: list[LogRecord] = []
        for before, segment in zip([None, *segments], segments, strict=False):
            data = objects.get(segment.key)
            got = ocf_records(objects, segment.key)
            assert segment.first_offset == (0 if before is None else before.last_offset + 1)
            assert (segment.first_offset, segment.last_offset) == (got[0].offset, got[-1].offset)
            assert segment.records == len(got)
            assert (segment.first_timestamp, segment.last_timestamp) == (got[0].timestamp, got[-1].timestamp)
            assert (segment.bytes, segment.sha256) == (len(data), hashlib.sha256(data).hexdigest())
            assert encode_segment(manifest.topic, partition, got) == data  # deterministic
            archived += got
        assert archived == records, partition


def test_the_archive_holds_every_record_as_kafka_held_it(
    settings: Settings, objects: Objects, tmp_path: Path
) -> None:
    """Tenants' events and poison (garbage, no value, no key, a foreign key, headers with null values)
    over 4 partitions, archived in segments of 7; then more records, archived by a new archiver that
    resumes from the manifest; a segment a crash left out of the manifest is adopted."""
    s = fast(settings)
    tenants = ["acme", "globex", "initech", "umbrella"]
    kpi = {"metric": "roas", "value": 2.0, "period": "2026-11"}

    def batch(start: int, n: int) -> list[Produced]:
        out: list[Produced] = []
        for i in range(start, start + n):
            tenant = tenants[i % len(tenants)]
            good = codec.encode(event("KpiObserved", {**kpi, "value": float(i)}, tenant=tenant))
            out.append((None, tenant.encode(), good, [("event-type", b"engram.events.KpiObserved")]))
            if i % 5 == 0:
                out += [
                    (None, tenant.encode(), b"\x00garbage", []),
                    (None, tenant.encode(), None, [("h", None), ("h", b"")]),
                    (i % 4, None, good, []),
                    (None, b"\xff\xfe", os.urandom(100), [("x", os.urandom(10))]),
                ]
        return out

    asyncio.run(produce(s, batch(0, 40)))
    first = asyncio.run(archive_until_caught_up(s, objects))
    kafka = asyncio.run(kafka_records(s))
    assert sum(len(r) for r in kafka.values()) == 72
    check_manifest(objects, first, kafka)

    asyncio.run(produce(s, batch(40, 25)))
    second = asyncio.run(archive_until_caught_up(s, objects))
    kafka = asyncio.run(kafka_records(s))
    check_manifest(objects, second, kafka)
    for p, segments in first.partitions.items():
        assert second.partitions[p][: len(segments)] == segments  # resumed, nothing rewritten

    # a crash between a segment's put and the manifest's: the segment is adopted on start
    partition = max(second.partitions, key=lambda p: len(second.partitions[p]))
    dropped = second.partitions[partition].pop()
    objects.put(manifest_key(s.events_topic), second.to_bytes())
    assert Manifest.load(objects, s.events_topic).next_offset(partition) == dropped.first_offset
    assert asyncio.run(Archiver(s, objects).recover()).partitions[partition][-1] == dropped
    assert Manifest.load(objects, s.events_topic).partitions[partition][-1] == dropped
    check_manifest(objects, Manifest.load(objects, s.events_topic), kafka)

    # read_archived picks the segments of a range
    records = kafka[partition]
    middle = records[len(records) // 3 : 2 * len(records) // 3]
    got = list(read_archived(objects, s.events_topic, partition, middle[0].offset, middle[-1].offset + 1))
    assert got == middle
    with pytest.raises(ArchiveGap, match=rf"offsets {records[-1].offset + 1}\.\.{records[-1].offset + 9}"):
        list(read_archived(objects, s.events_topic, partition, 0, records[-1].offset + 10))

    rows = asyncio.run(archive_status(s, objects))
    assert [(r.records, r.lag, r.gaps) for r in rows] == [(len(kafka[r.partition]), 0, []) for r in rows]

    async def stopped_before_any_roll() -> None:
        """Nothing rolls by count or age: stopping writes the open segments."""
        stop = asyncio.Event()
        slow = s.model_copy(update={"archive_segment_records": 10_000, "archive_segment_age_s": 600})
        task = asyncio.create_task(Archiver(slow, objects).run(stop))
        await produce(s, batch(65, 6))
        await asyncio.sleep(1.5)  # fetched (every 0.2 s), not written
        assert not task.done()
        stop.set()
        await task

    asyncio.run(stopped_before_any_roll())
    check_manifest(objects, Manifest.load(objects, s.events_topic), asyncio.run(kafka_records(s)))


async def create_topic(settings: Settings, partitions: int, configs: dict[str, str]) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap)
    await admin.start()
    try:
        topic = NewTopic(settings.events_topic, partitions, 1, topic_configs=configs)
        await admin.create_topics([topic])
    finally:
        await admin.close()


async def retention_check_ms(settings: Settings) -> int:
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap)
    await admin.start()
    try:
        resource = ConfigResource(ConfigResourceType.BROKER, "1", {"log.retention.check.interval.ms": None})
        response = (await admin.describe_configs([resource]))[0]
    finally:
        await admin.close()
    return int(response.resources[0][4][0][1])


async def set_retention(settings: Settings, ms: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap)
    await admin.start()
    try:
        resource = ConfigResource(ConfigResourceType.TOPIC, settings.events_topic, {"retention.ms": str(ms)})
        await admin.alter_configs([resource])
    finally:
        await admin.close()


async def delete_records(settings: Settings, partition: int, upto: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap)
    await admin.start()
    try:
        await admin.delete_records({TopicPartition(settings.events_topic, partition): RecordsToDelete(upto)})
    finally:
        await admin.close()


async def beginning(settings: Settings, partition: int) -> int:
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.kafka_bootstrap, group_id=None)
    await consumer.start()
    try:
        tp = TopicPartition(settings.events_topic, partition)
        return (await consumer.beginning_offsets([tp]))[tp]
    finally:
        await consumer.stop()


def replayed(settings: Settings, tenant: str, root: Path, as_of_ms: int | None = None) -> str:
    graph = asyncio.run(replay_tenant(settings, tenant, root, as_of_ms=as_of_ms))
    out = export_nquads(graph) if graph is not None else ""
    del graph
    gc.collect()
    return out


def test_replay_reads_the_archive_for_what_retention_deleted(broker: Settings, tmp_path: Path) -> None:
    """A topic with 100 ms log segments: three waves of events (memories, supersessions, KPIs, spend,
    clock ticks, poison) for two tenants of one partition, archived, and a fourth seconds later, not
    archived. Kafka's retention then deletes the first three (the retention is set between their ages,
    and set back to forever once they are gone). A replay reads them from the archive and the fourth
    from Kafka, and equals the replay made before, as does an AS OF replay; with no archive, a replay
    fails naming the missing range, and ``archive_status`` shows it as a gap.

    A broker started before ``streams.kafka_local`` set ``log.retention.check.interval.ms=1000``
    checks retention every 5 minutes; on one, the same offsets are deleted by DeleteRecords (which
    moves the log's first offset as retention does: all a reader sees)."""
    base = isolated_settings(broker, tmp_path / "data", partitions=2)
    # the local archive this test names (and then removes), whatever ENGRAM_S3_ENDPOINT says
    s = fast(base, archive_dir=tmp_path / "archive", s3_endpoint=None)
    configs = {"retention.ms": "-1", "message.timestamp.type": "LogAppendTime", "segment.ms": "100"}
    asyncio.run(create_topic(s, 2, configs))
    by_retention = asyncio.run(retention_check_ms(s)) <= 1000
    partition = partition_for("acme", 2)
    ours = [
        t
        for t in ["acme", "globex", "initech", "umbrella", "hooli", "wayne"]
        if partition_for(t, 2) == partition
    ]
    ours = ours[:2]
    keys = KeyStore(s.key_store_dir)

    def wave(n: int) -> list[Produced]:
        out: list[Produced] = []
        for tenant in ours:
            spend = {"platform": "meta", "amount": 1000.0 * (n + 1), "currency": "USD", "period": "2026-11"}
            events = [
                event("MemoryRemembered", remembered(f"m{n}", importance=5 - n), tenant=tenant),
                event(
                    "KpiObserved", {"metric": "roas", "value": 1.5 + n, "period": "2026-11"}, tenant=tenant
                ),
                event("SpendObserved", spend, tenant=tenant),
                event("ClockTicked", {"now": f"2026-12-0{n + 1}T00:00:00Z"}, tenant=tenant),
            ]
            if n:
                superseded = {"memory_id": f"m{n - 1}", "superseded_by": f"m{n}"}
                events.append(event("MemorySuperseded", superseded, tenant=tenant))
            for e in events:
                sealed = seal_event(e, keys)
                out.append((partition, tenant.encode(), codec.encode(sealed), codec.headers(sealed)))
            out.append((partition, tenant.encode(), b"\x00poison", []))
        return out

    cut = 0
    for n in range(3):
        asyncio.run(produce(s, wave(n)))
        cut = cut or int(time.time() * 1000)  # after the first wave
        time.sleep(0.2)  # the next wave starts a new log segment
    asyncio.run(archive_until_caught_up(s, LocalObjects(s.archive_root)))
    archived_end = asyncio.run(end_offsets(s))[partition]
    time.sleep(5 if by_retention else 0.2)  # the fourth wave is far younger than the others
    asyncio.run(produce(s, wave(3)))
    kafka = asyncio.run(kafka_records(s))[partition]
    assert kafka[archived_end - 1].timestamp < kafka[archived_end].timestamp
    before = {t: replayed(s, t, tmp_path / f"before-{t}") for t in ours}
    as_of_before = replayed(s, ours[0], tmp_path / "as-of-before", as_of_ms=cut)
    assert all("m3" in nq for nq in before.values()) and "m1" not in as_of_before

    older, younger = kafka[archived_end - 1].timestamp, kafka[archived_end].timestamp
    if not by_retention:
        asyncio.run(delete_records(s, partition, archived_end))
    deadline = time.monotonic() + 60
    while (gone := asyncio.run(beginning(s, partition))) < archived_end:
        assert time.monotonic() < deadline, "Kafka kept its old records"
        if by_retention:  # older than the third wave, younger than the fourth, until they are gone
            # (set afresh each time: a broker's first retention check is 30 s after it started)
            asyncio.run(set_retention(s, int(time.time() * 1000) - older - (younger - older) // 2))
        time.sleep(0.5)
    if by_retention:
        asyncio.run(set_retention(s, -1))
    assert gone == archived_end < len(kafka) == asyncio.run(end_offsets(s))[partition]
    how = "retention" if by_retention else "DeleteRecords"
    print(f"\nKafka deleted offsets 0..{gone - 1} ({how}), kept {gone}..{len(kafka) - 1}")

    for t in ours:
        assert replayed(s, t, tmp_path / f"after-{t}") == before[t]
    assert replayed(s, ours[0], tmp_path / "as-of-after", as_of_ms=cut) == as_of_before
    rows = asyncio.run(archive_status(s, LocalObjects(s.archive_root)))
    assert (rows[partition].kafka_beginning, rows[partition].gaps) == (gone, [])

    bare = s.model_copy(update={"archive_dir": tmp_path / "no-archive"})
    with pytest.raises(
        ArchiveGap, match=rf"offsets 0\.\.{gone - 1} of {s.events_topic} partition {partition}"
    ):
        replayed(bare, ours[0], tmp_path / "no-archive-replay")
    rows = asyncio.run(archive_status(bare, LocalObjects(bare.archive_root)))
    assert rows[partition].gaps == [(0, gone - 1)]


async def produce_until(settings: Settings, stop: threading.Event, produced: list[int]) -> None:
    """Small batches to random partitions, every few milliseconds, until ``stop``."""
    rng = random.Random()
    producer = AIOKafkaProducer(
        bootstrap_servers=settings.kafka_bootstrap, enable_idempotence=True, acks="all"
    )
    await producer.start()
    try:
        while not stop.is_set():
            futures = [
                await producer.send(
                    settings.events_topic,
                    key=f"t{rng.randrange(20)}".encode(),
                    value=os.urandom(rng.randrange(1, 300)),
                    headers=[("n", str(produced[0] + i).encode())],
                )
                for i in range(rng.randrange(1, 25))
            ]
            await asyncio.gather(*futures)
            produced[0] += len(futures)
            await asyncio.sleep(rng.uniform(0.001, 0.03))
    finally:
        await producer.stop()


def test_an_archiver_killed_at_random_archives_every_offset_exactly_once(
    settings: Settings, tmp_path: Path
) -> None:
    """``engram archive run`` SIGKILLed three times at random moments while records keep arriving,
    then restarted and stopped with SIGTERM: every offset of every partition is in exactly one
    segment, the manifest lists exactly the segment objects, and each record is Kafka's."""
    archive = tmp_path / "archive"
    env = {
        **os.environ,
        **settings_env(settings),
        "ENGRAM_S3_ENDPOINT": "",  # the local archive this test reads, whatever the environment says
        "ENGRAM_ARCHIVE_DIR": str(archive),
        "ENGRAM_ARCHIVE_SEGMENT_RECORDS": "13",
        "ENGRAM_ARCHIVE_SEGMENT_AGE_S": "0.1",
        "ENGRAM_LOG_LEVEL": "INFO",
    }
    log_path = tmp_path / "archiver.log"

    def start() -> subprocess.Popen[bytes]:
        with open(log_path, "ab") as out:
            return subprocess.Popen(
                [sys.executable, "-m", "engram.cli", "archive", "run"], env=env, stdout=out, stderr=out
            )

    objects = LocalObjects(archive)
    stop, produced = threading.Event(), [0]
    producing = threading.Thread(target=lambda: asyncio.run(produce_until(settings, stop, produced)))
    producing.start()
    rng = random.Random()
    kills = []
    try:
        for _ in range(3):
            proc = start()
            time.sleep(rng.uniform(1.5, 4.0))  # the interpreter starts in ~1 s: some kills come early
            assert proc.poll() is None, log_path.read_text()[-3000:]
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
            kills.append(
                sum(len(s) for s in Manifest.load(objects, settings.events_topic).partitions.values())
            )
    finally:
        stop.set()
        producing.join(timeout=60)
    proc = start()
    try:
        ends = asyncio.run(end_offsets(settings))
        deadline = time.monotonic() + 120
        while not caught_up(objects, settings.events_topic, ends):
            assert proc.poll() is None, log_path.read_text()[-3000:]
            assert time.monotonic() < deadline, log_path.read_text()[-3000:]
            time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, log_path.read_text()[-3000:]

    manifest = Manifest.load(objects, settings.events_topic)
    kafka = asyncio.run(kafka_records(settings))
    check_manifest(objects, manifest, kafka)
    total = sum(len(r) for r in kafka.values())
    assert total == produced[0] == sum(s.records for ss in manifest.partitions.values() for s in ss)
    for records in kafka.values():
        assert [r.offset for r in records] == list(range(len(records)))  # 0..end, each once
    logged = [json.loads(line) for line in log_path.read_text().splitlines() if line.startswith("{")]
    adopted = sum("adopted" in entry["msg"] for entry in logged)
    segments = sum(len(s) for s in manifest.partitions.values())
    print(f"\n{total} records, {segments} segments, segments listed at each kill {kills}, adopted {adopted}")
    status = subprocess.run(
        [sys.executable, "-m", "engram.cli", "archive", "status", "--json"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert status.returncode == 0, status.stderr
    assert [(r["records"], r["gaps"], r["lag"]) for r in json.loads(status.stdout)] == [
        (len(kafka[p]), [], 0) for p in sorted(kafka)
    ]


def test_a_segment_keeps_any_bytes_and_is_deterministic() -> None:
    """No broker: a segment round-trips any key and value (null included), byte for byte, and the
    same records give the same file."""
    records = [
        LogRecord(
            0, i, 1_700_000_000_000 + i, None if i == 2 else b"k", None if i == 3 else bytes([i]) * i, []
        )
        for i in range(5)
    ]
    data = encode_segment("t", 0, records)
    reader = fastavro.reader(io.BytesIO(data))
    assert reader.metadata["engram.first_offset"] == "0" and reader.metadata["engram.last_offset"] == "4"
    assert [LogRecord.from_avro(r) for r in reader] == records  # type: ignore[arg-type]
    assert encode_segment("t", 0, records) == data
    assert encode_segment("t", 1, records) != data  # another partition's sync marker


def test_serve_archives_the_events_topic_when_enabled(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``ENGRAM_ARCHIVE_ENABLED=true``: ``engram serve`` archives what arrives, and stops cleanly."""
    archive = tmp_path / "archive"
    for name, value in {
        "ENGRAM_ARCHIVE_ENABLED": "true",
        "ENGRAM_ARCHIVE_DIR": str(archive),
        "ENGRAM_ARCHIVE_SEGMENT_AGE_S": "0.2",
        "ENGRAM_EMBEDDER": "hashing",
    }.items():
        monkeypatch.setenv(name, value)
    settings = settings.model_copy(update={"s3_endpoint": None})  # the local archive this test reads
    server = Server(settings, tmp_path / "server.log").start()
    try:
        server.wait_ready()
        kpi = {"metric": "roas", "value": 2.0, "period": "2026-11"}
        records: list[Produced] = []
        for i in range(30):
            e = event("KpiObserved", {**kpi, "value": float(i)}, tenant=f"t{i % 5}")
            records.append((None, e.tenant.encode(), codec.encode(e), codec.headers(e)))
        asyncio.run(produce(settings, records))
        ends, deadline = asyncio.run(end_offsets(settings)), time.monotonic() + 60
        while not caught_up(LocalObjects(archive), settings.events_topic, ends):
            assert time.monotonic() < deadline, (tmp_path / "server.log").read_text()[-3000:]
            time.sleep(0.1)
    finally:
        server.stop()
    assert server.proc is not None and server.proc.returncode in (0, -signal.SIGTERM)  # uvicorn re-raises
    objects = LocalObjects(archive)
    kafka = asyncio.run(kafka_records(settings))
    assert sum(len(r) for r in kafka.values()) == 30
    check_manifest(objects, Manifest.load(objects, settings.events_topic), kafka)


def test_a_torn_manifest_is_read_again_and_one_that_stays_torn_is_an_error(objects: Objects) -> None:
    """A put still being written, as s3proxy's file backend can serve it: the reader tries again."""
    topic = "engram.torn"
    whole = Manifest(topic, {0: []}).to_bytes()
    objects.put(manifest_key(topic), whole[: len(whole) // 2])
    mended = threading.Timer(0.15, lambda: objects.put(manifest_key(topic), whole))
    mended.start()
    try:
        assert Manifest.load(objects, topic) == Manifest(topic, {0: []})
    finally:
        mended.join()
    objects.put(manifest_key(topic), whole[:-5])
    with pytest.raises(ArchiveError, match=f"{manifest_key(topic)} does not parse after 2 reads"):
        Manifest.load(objects, topic, attempts=2)
