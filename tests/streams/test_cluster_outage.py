"""A broker's kill -9 in a cluster of three (replication 3, min.insync.replicas=2) under a write load
on two `engram serve` processes in one group: the node leading the most of the load's partitions is
killed, the survivors elect new leaders and the writes go on being confirmed (a 503 with
Retry-After while the election runs, retried with the same Idempotency-Key); the node is started
again; every confirmed write is kept once, every tenant's graph equals its replay, every read is
answered."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from engram.streams import kafka_local
from engram.streams.topics import partition_for

from engram.settings import Settings
from tests.streams.test_group import PARTITIONS
from tests.streams.test_group_outage import (
    TENANTS,
    Writer,
    assert_each_write_once,
    kill_broker,
    start_two,
    wait_handled,
)

pytestmark = pytest.mark.integration


async def _describe(settings: Settings) -> tuple[list[dict[str, Any]], str | None]:
    """The events topic's partitions (leader, replicas, in-sync replicas) and its effective
    min.insync.replicas."""
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap)
    await admin.start()
    try:
        [topic] = await admin.describe_topics([settings.events_topic])
        resource = ConfigResource(ConfigResourceType.TOPIC, settings.events_topic)
        [answer] = await admin.describe_configs([resource])
        entries = answer.resources[0][4]
        min_isr = next((e[1] for e in entries if e[0] == "min.insync.replicas"), None)
        return topic["partitions"], min_isr
    finally:
        await admin.close()


def confirmed(writers: list[Writer]) -> dict[str, int]:
    return {t: len(keys) for w in writers for t, keys in w.acked.items()}


def test_a_broker_kill_in_a_cluster_of_three_keeps_writes_confirmed_and_loses_and_doubles_nothing(
    private_cluster: Settings, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    settings, _, servers, t0, ready_s = start_two(
        private_cluster, tmp_path, request, topic_replication=private_cluster.topic_replication
    )  # ENGRAM_TOPIC_REPLICATION=3

    # the topics as engram created them: three replicas of each partition, two needed to confirm
    partitions, min_isr = asyncio.run(_describe(settings[0]))
    assert len(partitions) == PARTITIONS
    assert all(len(p["replicas"]) == 3 and len(p["isr"]) == 3 for p in partitions), partitions
    assert min_isr == "2"
    leaders = {p["partition"]: p["leader"] for p in partitions}
    led = [leaders[partition_for(t, PARTITIONS)] for t in TENANTS]
    victim = max(set(led), key=led.count)  # the node id leading the most of the load's partitions
    hit = [t for t in TENANTS if leaders[partition_for(t, PARTITIONS)] == victim]

    writers = [Writer(servers, TENANTS[0::2]), Writer(servers[::-1], TENANTS[1::2])]
    for w in writers:
        w.start()
    time.sleep(3)  # a steady load first
    assert all(w.acked[t] for w in writers for t in w.tenants), "no write confirmed before the kill"

    before, refused_before = confirmed(writers), [len(w.refused) for w in writers]
    killed_at = time.monotonic()
    kill_broker(private_cluster, node=victim - 1)
    # the survivors fence the dead node (broker.session.timeout.ms, 9 s) and elect new leaders from
    # the in-sync replicas; then every tenant's writes are confirmed again, the dead node's too
    deadline = killed_at + 60
    while any(confirmed(writers)[t] <= before[t] for t in TENANTS) and time.monotonic() < deadline:
        time.sleep(0.1)
    writes_back_s = time.monotonic() - killed_at
    assert all(confirmed(writers)[t] > before[t] for t in TENANTS), (before, confirmed(writers))
    refused = [r for w, n in zip(writers, refused_before, strict=True) for r in w.refused[n:]]
    assert all(status == 503 and retry in ("1", "5") for status, retry, _ in refused), refused
    moved, _ = asyncio.run(_describe(settings[0]))
    assert all(p["leader"] != victim for p in moved), moved  # no partition left on the dead node
    assert all(w.error is None and w.is_alive() for w in writers)
    nodes = kafka_local.status(private_cluster)  # `engram kafka status`: a line per node
    assert [st.answering for st in nodes] == [n != victim - 1 for n in range(3)], nodes
    assert nodes[victim - 1].pid is None and all(st.pid for st in nodes if st.answering), nodes

    restarted_at = time.monotonic()
    kafka_local.start(private_cluster)  # starts only the node that does not answer
    restart_s = time.monotonic() - restarted_at
    after = confirmed(writers)
    time.sleep(2)  # the load goes on with the node back
    assert all(confirmed(writers)[t] > after[t] for t in TENANTS), "no write after the restart"
    for w in writers:
        w.done.set()
    for w in writers:
        w.join(timeout=120)
        assert w.error is None, w.error
    wait_handled(servers)
    back, _ = asyncio.run(_describe(settings[0]))
    acked = {t: keys for w in writers for t, keys in w.acked.items()}
    failed = [f for w in writers for f in w.failed]
    print(
        {
            "ready_s": round(ready_s, 1),
            "killed_node": victim,
            "its_tenants": hit,
            "writes_back_s": round(writes_back_s, 1),
            "refused_503": len(refused),
            "slowest_503_s": round(max((r[2] for r in refused), default=0.0), 2),
            "restart_s": round(restart_s, 1),
            "in_sync_after": sorted(len(p["isr"]) for p in back),
            "confirmed": sum(len(k) for k in acked.values()),
            "no_answer": failed,
        }
    )
    assert hit and refused, "the kill did not land under the load"
    assert not failed, failed  # every write was answered (202 or 503), none hung or was dropped
    copies = assert_each_write_once(servers, settings[0], acked, tmp_path)
    print({"second_copies_in_log": copies, "total_s": round(time.monotonic() - t0, 1)})
