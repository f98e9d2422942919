"""The log and the key store belong together: a process refuses to start against a log sealed
with another key store.

Every memory's words on the log are sealed under a data key kept only in the key store. A process
whose key store is not the log's (a lost or wrongly mounted key volume; a second checkout whose
own key store met the first one's topics on a shared local broker) unsealed nothing and projected
every memory as "(erased)", with not a line in the log: the operator was told the data was erased
when it was not. So the key store keeps an id (``KEYS_KEY``, the one memory mode's object store
check reads too) and the log keeps, as the first record of its key-store topic, the id of the key
store its events were sealed with. The first process to start on a new log writes its own; every
process after compares.
"""

from __future__ import annotations

import asyncio
import logging
import uuid

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from engram.files import create_once
from engram.settings import Settings

log = logging.getLogger(__name__)

KEYS_KEY = "group-keys-id"  # the key store's id, a file in it (memory mode's group check reads it too)
READ_TIMEOUT_S = 30.0


class NotTheLogsKeys(RuntimeError):
    """The log's events were sealed with another key store than this process's."""


def key_store_id(settings: Settings, *, create: bool) -> str | None:
    """This process's key store's id; made (once, whoever makes it first) if ``create``."""
    path = settings.key_store_dir / KEYS_KEY
    if not create and not path.is_file():
        return None
    return create_once(path, lambda: uuid.uuid4().hex.encode()).decode().strip()


async def check_log_keys(settings: Settings) -> str:
    """The key store's id, once the log is known to be sealed with it (binding a new log to it).

    Raises ``NotTheLogsKeys`` when the log names another key store, or names one while this
    process's key store has no id (a new, empty key store against a log that has events)."""
    topic = settings.key_stores_topic
    bound = await _first_id(settings, topic)
    if bound is None:
        mine = key_store_id(settings, create=True)
        assert mine is not None
        producer = AIOKafkaProducer(
            bootstrap_servers=settings.kafka_bootstrap, acks="all", enable_idempotence=True
        )
        await producer.start()
        try:
            await producer.send_and_wait(topic, mine.encode(), key=b"key-store")
        finally:
            await producer.stop()
        # two first processes may each have written theirs: the log's order decides, for both
        bound = await _first_id(settings, topic)
        log.info("the log %s is sealed with key store %s (%s)", settings.topic_prefix, bound, mine)
    mine = key_store_id(settings, create=False)
    if mine != bound:
        raise NotTheLogsKeys(
            f"the log at {settings.kafka_bootstrap} (ENGRAM_TOPIC_PREFIX={settings.topic_prefix}) is "
            f"sealed with key store {bound}; this process's key store {settings.key_store_dir} is "
            f"{mine or 'new (no id)'}, so it could unseal none of its memories. Point ENGRAM_KEYS_DIR "
            "at the log's key store; or, if this is another deployment on a shared broker (a second "
            "checkout's ./dev on the same local broker), give it a topic prefix of its own "
            "(ENGRAM_TOPIC_PREFIX) or a broker of its own (ENGRAM_KAFKA_BOOTSTRAP)"
        )
    return mine


async def _first_id(settings: Settings, topic: str) -> str | None:
    """The id at the start of the key-store topic, or None if it holds none."""
    consumer = AIOKafkaConsumer(  # a fetch answered at once: the default waits up to 500 ms
        bootstrap_servers=settings.kafka_bootstrap,
        enable_auto_commit=False,
        group_id=None,
        fetch_max_wait_ms=20,
    )
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        first = (await consumer.beginning_offsets([tp]))[tp]
        if (await consumer.end_offsets([tp]))[tp] <= first:
            return None
        consumer.seek(tp, first)
        record = await asyncio.wait_for(consumer.getone(tp), READ_TIMEOUT_S)
        return bytes(record.value or b"").decode(errors="replace").strip()
    finally:
        await consumer.stop()
