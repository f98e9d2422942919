"""The producer backs off while the broker is down and a partition holding its unsent records has
no known leader (what a broker reports as it shuts down): aiokafka 0.14's sender looped on metadata
refreshes that fail at once, thousands a second at a core's worth of CPU."""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path

import pytest
from engram.schemas.events import event_from_json
from engram.streams import kafka_local
from engram.streams.producer import EventProducer
from engram.streams.topics import ensure_topics

from engram.settings import Settings
from tests.factories import random_stream
from tests.harness import isolated_settings

pytestmark = pytest.mark.integration

WINDOW_S = 3.0


def test_a_pending_write_to_a_leaderless_partition_of_a_stopped_broker_does_not_spin(
    private_broker: Settings, tmp_path: Path
) -> None:
    settings = isolated_settings(private_broker, tmp_path / "data")
    asyncio.run(ensure_topics(settings))
    events, _ = random_stream(random.Random(7), "spin-co", 2)
    failed, cpu = asyncio.run(pending_while_down(settings, private_broker, events))
    print({"failed_refreshes": failed, "cpu_s": round(cpu, 2), "window_s": WINDOW_S})
    # retry_backoff_ms is 100: at most ~10 refreshes a second, where the loop made thousands
    assert failed <= 15 * WINDOW_S, failed
    assert cpu < 0.3 * WINDOW_S, cpu


async def pending_while_down(settings: Settings, broker: Settings, events: list[dict]) -> tuple[int, float]:
    """The failed metadata refreshes and the CPU seconds of this process over WINDOW_S while a
    write waits for a leaderless partition of a stopped broker."""
    producer = EventProducer(settings)
    await producer.start()
    first = await producer.send(event_from_json(events[0]))
    kafka_local.stop(broker)
    # what the metadata of a broker that is shutting down says: the partition has no leader
    cluster = producer._producer.client.cluster
    leaderless = cluster._partitions[settings.events_topic][first.partition]._replace(leader=-1)
    cluster._partitions[settings.events_topic][first.partition] = leaderless
    failed = 0
    failed_update = cluster.failed_update

    def count(exc: object) -> None:
        nonlocal failed
        failed += 1
        failed_update(exc)

    cluster.failed_update = count
    pending = asyncio.ensure_future(producer.enqueue(event_from_json(events[1])))
    began = time.process_time()
    await asyncio.sleep(WINDOW_S)
    cpu = time.process_time() - began
    pending.cancel()
    producer._producer._sender.sender_task.cancel()  # else stop() waits 40 s for the record to expire
    await producer.stop()
    return failed, cpu
