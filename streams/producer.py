"""The one way events enter the log: idempotent, ``acks=all``, keyed by tenant, bytes framed by
``streams.pipeline``; and ``engram produce``'s loop over a file, where a bad line never stops the
good ones."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaTimeoutError
from engram.schemas.events import Event, Position
from engram.streams.pipeline import Framed, Pipeline, parse_lines
from engram.streams.topics import topic_for

from engram.settings import Settings

log = logging.getLogger(__name__)

# aiokafka's max_request_size and the broker's message.max.bytes are both about 1 MiB
# (``pipeline.MAX_EVENT_BYTES`` leaves room for the key, the headers and the batch framing)
MAX_REQUEST_BYTES = 1_048_576
_UNSEALED = Pipeline()  # frames an event handed over as it is (tests, benches): no keys, no checks


def back_off_failed_metadata(client: Any) -> None:
    """Make ``client`` (an ``AIOKafkaClient``) wait its ``retry_backoff_ms`` after a failed
    metadata refresh. aiokafka 0.14's sender, while a partition holding unsent records has no
    known leader (what a broker reports as it shuts down), loops on a refresh; with the broker gone
    each fails at once (connection refused), so the loop spun: 26,000 failed refreshes and log
    records in 10 s, 38% of a core, in a process whose write was pending when the broker stopped
    (tests/streams/test_group_outage.py; tests/streams/test_producer_backoff.py reproduces it).
    Every refresh goes through ``_metadata_update``, so this bounds all its callers."""
    update = client._metadata_update

    async def backed_off(cluster: Any, topics: Any) -> bool:
        ok = bool(await update(cluster, topics))
        if not ok:
            await asyncio.sleep(client._retry_backoff)
        return ok

    client._metadata_update = backed_off


class EventProducer:
    """Appends framed events; the returned position is where the log recorded each one. An
    ``Event`` is framed as it is (unsealed): writers that seal hand over a ``Framed``. Each goes to
    the topic its type belongs on (``streams.topics.topic_for``)."""

    def __init__(self, settings: Settings, *, write_timeout_s: float | None = None) -> None:
        self.settings = settings
        self.write_timeout_s = write_timeout_s  # the API's bound (ENGRAM_WRITE_TIMEOUT_S); None: none
        self.topic = settings.events_topic
        self._producer = AIOKafkaProducer(
            bootstrap_servers=settings.kafka_bootstrap,
            enable_idempotence=True,
            acks="all",
            linger_ms=0,  # a lone write is sent at once; a burst still batches behind the request in flight
            max_request_size=MAX_REQUEST_BYTES,
        )
        back_off_failed_metadata(self._producer.client)

    async def start(self) -> None:
        await self._producer.start()

    async def stop(self) -> None:
        """Flush and close. With a write timeout, stop waiting for the log after it: with the broker
        gone, the records still in the producer were answered 503 ("not confirmed, may still be
        appended") and would hold the process's stop (SIGTERM) until the broker returned."""
        if self.write_timeout_s is None:
            await self._producer.stop()
            return
        try:
            async with asyncio.timeout(self.write_timeout_s):
                await self._producer.stop()
        except TimeoutError:
            log.warning(
                "stopped without the log's acknowledgement of the records still in the producer (no "
                "answer from the broker in %gs); their writes were answered 503, not confirmed",
                self.write_timeout_s,
            )
            with contextlib.suppress(Exception):
                await self._producer.client.close()

    async def __aenter__(self) -> EventProducer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def enqueue(self, item: Framed | Event) -> asyncio.Future:
        """Hand one record to the producer's buffer; the future is its delivery (RecordMetadata).
        Waits only while the producer knows no leader for its partition, or its buffer is full."""
        framed = item if isinstance(item, Framed) else _UNSEALED.frame(item)
        return await self._producer.send(
            topic_for(self.settings, framed.event),
            key=framed.key,
            value=framed.value,
            headers=framed.headers(),
        )

    async def send(self, item: Framed | Event) -> Position:
        """Append one event; ``KafkaTimeoutError`` if the log has not taken it within the write
        timeout (see ``send_many``)."""
        (position,) = await self.send_many([item])
        return position

    async def send_many(self, items: Iterable[Framed | Event]) -> list[Position]:
        """Pipeline many events (ordering per tenant is kept by the idempotent producer).

        With a write timeout (the API's producer: ENGRAM_WRITE_TIMEOUT_S) a write while the broker
        is down is answered (503) instead of hanging until it returns; files and benches wait.
        Past the bound an event handed to the producer stays in its buffer (the idempotent producer
        retries it until the broker answers; its delivery is shielded from the timeout): it may
        still land, so a timeout means "maybe written", and the caller retries with the same event
        id, which the projection applies once."""
        timeout = self.write_timeout_s
        if timeout is None:
            futures = [await self.enqueue(item) for item in items]
            metas = await asyncio.gather(*futures)
            return [Position(m.partition, m.offset, m.timestamp) for m in metas]
        try:
            async with asyncio.timeout(timeout):
                futures = [await self.enqueue(item) for item in items]
                delivered = asyncio.gather(*futures)
                delivered.add_done_callback(_retrieved)  # an outcome nobody waits for any more
                metas = await asyncio.shield(delivered)
        except TimeoutError as exc:
            raise KafkaTimeoutError(
                f"the log did not take the event within {timeout:g}s (ENGRAM_WRITE_TIMEOUT_S)"
            ) from exc
        return [Position(m.partition, m.offset, m.timestamp) for m in metas]


def _retrieved(delivered: asyncio.Future) -> None:
    """Mark the outcome of a delivery that timed out as seen (asyncio warns of one never read)."""
    if not delivered.cancelled():
        delivered.exception()


@dataclass
class IngestReport:
    produced: int = 0
    failed: list[tuple[int, str]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failed


async def produce_lines(
    producer: EventProducer, lines: Iterable[str], pipeline: Pipeline | None = None
) -> IngestReport:
    """Append every line that passes the pipeline's checks, the projector's offline pre-check
    included (with ``pipeline``'s knowledge), and report the others by line number."""
    pipeline = pipeline or Pipeline()
    good, bad = parse_lines(lines, pipeline, offline_check=True)
    report = IngestReport(failed=bad)
    chunk = 1000
    for start in range(0, len(good), chunk):
        part = good[start : start + chunk]
        await producer.send_many(f for _, f in part)
        report.produced += len(part)
        log.info("produced %d/%d events", report.produced, len(good))
    return report
