"""The one way events enter the log: idempotent, ``acks=all``, keyed by tenant."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from aiokafka import AIOKafkaProducer

from engram.settings import Settings
from schemas.checks import InvalidEvent
from schemas.events import Event, Position
from streams import codec

# aiokafka's max_request_size and the broker's message.max.bytes are both about 1 MiB; an event
# must leave room for the key, the headers and the batch framing around it.
MAX_REQUEST_BYTES = 1_048_576
MAX_EVENT_BYTES = 1_000_000


class EventTooLarge(InvalidEvent):
    """An event whose encoding the log would refuse: the writer's fault, not the log's."""


def encode_checked(event: Event) -> bytes:
    """The event's Avro encoding; raises InvalidEvent (EventTooLarge) if the log would refuse it."""
    data = codec.encode(event)
    if len(data) > MAX_EVENT_BYTES:
        raise EventTooLarge(f"the event is {len(data):,} bytes encoded; the limit is {MAX_EVENT_BYTES:,}")
    return data


class EventProducer:
    """Encodes and appends events; the returned position is where the log recorded each one."""

    def __init__(self, settings: Settings) -> None:
        self.topic = settings.events_topic
        self._producer = AIOKafkaProducer(
            bootstrap_servers=settings.kafka_bootstrap,
            enable_idempotence=True,
            acks="all",
            linger_ms=2,
            max_request_size=MAX_REQUEST_BYTES,
        )

    async def start(self) -> None:
        await self._producer.start()

    async def stop(self) -> None:
        await self._producer.stop()

    async def __aenter__(self) -> EventProducer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _enqueue(self, event: Event) -> asyncio.Future:
        return await self._producer.send(
            self.topic,
            key=event.tenant.encode(),
            value=encode_checked(event),
            headers=codec.headers(event),
        )

    async def send(self, event: Event) -> Position:
        meta = await (await self._enqueue(event))
        return Position(meta.partition, meta.offset, meta.timestamp)

    async def send_many(self, events: Iterable[Event]) -> list[Position]:
        """Pipeline many events (ordering per tenant is kept by the idempotent producer)."""
        futures = [await self._enqueue(ev) for ev in events]
        metas = await asyncio.gather(*futures)
        return [Position(m.partition, m.offset, m.timestamp) for m in metas]
