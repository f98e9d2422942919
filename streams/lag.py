"""How far the projector is behind the log, per partition of the events topic."""

from __future__ import annotations

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from engram.settings import Settings


class LagMonitor:
    """Compares the log's end offsets with what the projector has handled or committed."""

    def __init__(self, settings: Settings, *, group: str | None = None) -> None:
        """``group``: the projector's consumer group (``streams.group``); the data directory's if None."""
        self.settings = settings
        self.group = group or settings.projector_group()
        self._consumer = AIOKafkaConsumer(bootstrap_servers=settings.kafka_bootstrap, group_id=None)
        self._admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap)

    async def start(self) -> None:
        await self._consumer.start()
        await self._admin.start()

    async def stop(self) -> None:
        await self._consumer.stop()
        await self._admin.close()

    async def lag(self, handled: dict[int, int]) -> dict[int, int]:
        """Records not yet handled, per partition; raises if the broker does not answer."""
        topic = self.settings.events_topic
        described = await self._admin.describe_topics([topic])  # fails when the broker is down
        parts = sorted(p["partition"] for d in described for p in d["partitions"])
        if not parts:
            raise RuntimeError(f"topic {topic} does not exist")
        tps = [TopicPartition(topic, p) for p in parts]
        ends = await self._consumer.end_offsets(tps)
        committed = await self._admin.list_consumer_group_offsets(self.group)
        lag = {}
        for tp in tps:
            done = committed.get(tp)
            position = max(handled.get(tp.partition, -1) + 1, done.offset if done else 0)
            lag[tp.partition] = max(0, ends[tp] - position)
        return lag

    async def end_offset(self, partition: int) -> int | None:
        """The next offset the log will give ``partition`` of the events topic; None if no such partition."""
        tp = TopicPartition(self.settings.events_topic, partition)
        if partition not in (self._consumer.partitions_for_topic(tp.topic) or set()):
            # Ask the broker (``consumer.topics()`` fetches metadata without adding it to the
            # consumer's own, so a process whose consumer had not yet read this topic, e.g. one
            # never asked /readyz, said "no such partition" for every position).
            described = await self._admin.describe_topics([tp.topic])
            if partition not in {p["partition"] for d in described for p in d.get("partitions") or []}:
                return None
        return (await self._consumer.end_offsets([tp]))[tp]  # type: ignore[no-any-return]
