"""A write behind a backlog: reported applied when its tenant's run commits, not when the batch
does; batches bounded by time as well as size; the readiness watermark still waits for the batch."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from aiokafka import AIOKafkaConsumer
from engram.projections.progress import Progress
from engram.projections.stores import TenantStores
from engram.projections.tenant_graph import Outcome, Status
from engram.schemas.events import Position, event_from_json
from engram.streams.indexer import Indexer
from engram.streams.producer import EventProducer
from engram.streams.projector import Record, handle_batch_with_retries
from engram.streams.projector_app import Reporter
from engram.streams.take import BatchBound
from engram.streams.topics import ensure_topics, partition_for

from engram.settings import Settings

APPLIED = Outcome(Status.APPLIED)


def remember(tenant: str, i: int) -> dict:
    payload = {"memory_id": f"m{i}", "label": f"memory {i}", "content": "backlog", "kind": "fact"}
    return {
        "type": "MemoryRemembered",
        "tenant": tenant,
        "source": "pipeline",
        "actor": {"id": "ops", "role": "operator"},
        "event_id": str(uuid.uuid4()),
        "payload": {**payload, "scope": "company", "importance": 3},
    }


async def produce_and_read(settings: Settings, events: list[dict]) -> list[Record]:
    await ensure_topics(settings)
    async with EventProducer(settings) as producer:
        await producer.send_many([event_from_json(e) for e in events])
    consumer = AIOKafkaConsumer(
        settings.events_topic, bootstrap_servers=settings.kafka_bootstrap, auto_offset_reset="earliest"
    )
    await consumer.start()
    got: list[Record] = []
    try:
        while len(got) < len(events):
            for batch in (await consumer.getmany(timeout_ms=1000)).values():
                for r in batch:
                    got.append(Record(r.key, r.value, list(r.headers or []), Position(r.partition, r.offset)))
    finally:
        await consumer.stop()
    return sorted(got, key=lambda r: (r.position.offset, r.position.partition))  # partitions interleaved


def test_a_write_behind_a_backlog_is_applied_before_the_backlog_is(
    settings: Settings, tmp_path: Path
) -> None:
    """The backlog (several tenants, many records each) and one write of another tenant, taken as
    one batch by the agent's own reporting: the write's waiter wakes while the backlog's last
    record is still unapplied, and readiness (the watermark) waits for the whole batch."""
    parts = settings.events_partitions
    writer = "fresh-writer"
    others = [
        t
        for t in (f"backlog{n}" for n in range(40))
        if partition_for(t, parts) != partition_for(writer, parts)
    ]
    backlog = [remember(t, i) for i in range(15) for t in others[:6]]
    read = asyncio.run(produce_and_read(settings, [*backlog, remember(writer, 0)]))
    # the write fetched last, as behind a backlog: the batch's last record
    write = next(r for r in read if r.key == writer.encode())
    records = [*(r for r in read if r is not write), write]
    last = records[-2]

    stores = TenantStores(tmp_path / "stores")
    progress = Progress()
    seen: dict[str, object] = {}

    async def sink(record: Record, reason: str) -> None:
        raise AssertionError(reason)

    async def waiter() -> None:
        handled = await progress.wait_for(write.position.partition, write.position.offset, 60)
        assert handled is not None and handled.outcome.status is Status.APPLIED
        pos = last.position
        seen["backlog_last_applied"] = (pos.partition, pos.offset) in progress._recent
        seen["watermark"] = dict(progress.last_offset)

    async def go() -> None:
        indexer = Indexer(stores, Progress())
        task = asyncio.create_task(waiter())
        await asyncio.sleep(0)  # the waiter waits
        report = Reporter(records, progress, indexer)
        results = await handle_batch_with_retries(
            records, stores, sink, partitions=parts, committed=report.run
        )
        report.rest(results)
        await task

    try:
        asyncio.run(go())
    finally:
        stores.close()
    assert seen["backlog_last_applied"] is False
    # the write's own partition holds nothing before it: its watermark may pass it; the backlog's may not
    assert seen["watermark"].get(last.position.partition, -1) < last.position.offset  # type: ignore[union-attr]
    assert progress.last_offset[last.position.partition] == max(
        r.position.offset for r in records if r.position.partition == last.position.partition
    )


def test_the_watermark_waits_for_records_taken_before() -> None:
    progress = Progress()
    progress.taken([(0, 5), (0, 6), (0, 7), (1, 3)])
    progress.record("b", 0, 7, APPLIED)
    progress.record("c", 1, 3, APPLIED)
    assert progress.last_offset.get(0, -1) == -1 and progress.last_offset[1] == 3
    progress.record("a", 0, 5, APPLIED)
    assert progress.last_offset[0] == 5
    progress.record("a", 0, 6, APPLIED)
    assert progress.last_offset[0] == 7
    progress.record("a", 0, 9, APPLIED)  # not announced (the conversations agent): in order
    assert progress.last_offset[0] == 9


def test_a_batch_holds_what_is_handled_in_its_time() -> None:
    bound = BatchBound(most=2000, batch_s=0.5)
    assert bound.limit() == 2000  # nothing measured yet
    bound.observe(100, 1.0)  # 10 ms a record
    assert bound.limit() == 50
    for _ in range(30):
        bound.observe(50, 0.05)  # batches grow cheaper per record: 1 ms
    assert 450 <= bound.limit() <= 500
    bound.observe(10, 100.0)  # a stall: never below one record
    bound.observe(10, 100.0)
    assert bound.limit() >= 1
    fast = BatchBound(most=2000, batch_s=0.5, per_record_s=1e-6)
    assert fast.limit() == 2000  # never above the maximum
