"""The topics of DESIGN §4, created with their settings if missing (never altered if present)."""

from __future__ import annotations

import contextlib
import logging

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaConnectionError, TopicAlreadyExistsError
from aiokafka.partitioner import murmur2
from engram.schemas import payloads as ev
from engram.schemas.events import Event

from engram.settings import Settings

log = logging.getLogger(__name__)

LOG_FOREVER = {"retention.ms": "-1", "message.timestamp.type": "LogAppendTime"}
# A dead letter is the original record plus the reason headers, so it may exceed what an event
# may be (``streams.producer.MAX_REQUEST_BYTES``); its topic and producer allow 4 MiB.
DEAD_LETTER_MAX_BYTES = 4 * 1_048_576


class BrokerUnreachable(Exception):
    """No broker answered at the bootstrap address: said in one line, with what to do."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(
            f"cannot reach the Kafka broker at {bootstrap} (ENGRAM_KAFKA_BOOTSTRAP): start the local "
            "one with `engram kafka start`, or set ENGRAM_KAFKA_BOOTSTRAP to yours"
        )


def topic_specs(settings: Settings) -> list[NewTopic]:
    n, r = settings.events_partitions, settings.topic_replication
    return [
        NewTopic(settings.events_topic, n, r, topic_configs=dict(LOG_FOREVER)),
        NewTopic(settings.conversations_topic, n, r, topic_configs=dict(LOG_FOREVER)),
        NewTopic(
            settings.dead_letters_topic,
            1,
            r,
            topic_configs={**LOG_FOREVER, "max.message.bytes": str(DEAD_LETTER_MAX_BYTES)},
        ),
        NewTopic(settings.key_stores_topic, 1, r, topic_configs=dict(LOG_FOREVER)),
    ]


async def ensure_topics(settings: Settings) -> list[str]:
    """Create whichever topics are missing; return the names created. ``BrokerUnreachable`` when no
    broker answers."""
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap)
    try:
        await admin.start()
    except KafkaConnectionError as exc:
        await admin.close()
        raise BrokerUnreachable(settings.kafka_bootstrap) from exc
    try:
        existing = set(await admin.list_topics())
        missing = [t for t in topic_specs(settings) if t.name not in existing]
        if missing:
            # another process may race us to it; the topic is there either way
            with contextlib.suppress(TopicAlreadyExistsError):
                await admin.create_topics(missing)
            log.info("created topics %s", [t.name for t in missing])
        return [t.name for t in missing]
    finally:
        await admin.close()


async def drop_topics(bootstrap: str, prefix: str) -> list[str]:
    """Delete every topic under ``prefix`` (its own and its consumer groups' Faust topics); the names
    deleted. For tests, benches and checks on a long-lived dev broker: one that kept every run's
    partitions took minutes to restart, then failed."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        names = [t for t in await admin.list_topics() if t.startswith((f"{prefix}.", f"{prefix}-"))]
        if names:
            await admin.delete_topics(names)
        return names
    finally:
        await admin.close()


def topic_for(settings: Settings, event: Event) -> str:
    """The topic an event is appended to: capture's (turns, extraction progress, erasures) go on
    the conversations topic, every other on the events topic. The one place that decides it."""
    return settings.conversations_topic if ev.on_conversations_topic(event.payload) else settings.events_topic


def partition_for(tenant: str, partitions: int) -> int:
    """The partition Kafka's default partitioner gives a tenant's key: the tenant's only one."""
    return (murmur2(tenant.encode()) & 0x7FFFFFFF) % partitions


async def partition_count(settings: Settings, topic: str) -> int:
    """Partitions of ``topic``; raises LookupError if it does not exist."""
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap)
    await admin.start()
    try:
        described = await admin.describe_topics([topic])
    finally:
        await admin.close()
    parts = [p for d in described for p in d["partitions"]]
    if not parts:
        raise LookupError(f"topic {topic} does not exist")
    return len(parts)
