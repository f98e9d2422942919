"""Writes that arrive together leave together: finished as one batch off the event loop, then handed
to the producer as one batch, in the order they came.

The event loop serves every request and, in ``engram serve``, the projector too; a write's costly
parts are native calls that release the GIL (the embedding model, AES-GCM, a new key's fsync) and
batch well (one model pass over 16 texts costs a fraction of 16 passes). So a write is decided on
the loop (authorised and pre-checked, ``commands.appending``) and then only queued here: one task
takes every write queued when it is free and finishes them in a thread (``Pipeline.finish_many``:
embedded, keyed, sealed, encoded; a batch with nothing to embed or seal, numbers and links, is
encoded on the loop: cheaper than the hop). None waits for company: a lone write goes at once; a crowd goes as
the batch that formed while the previous one was finishing.

Backpressure, not collapse: what is queued or not yet acknowledged by the log is bounded
(``ENGRAM_WRITE_QUEUE``); past it a write is refused at once (503 with Retry-After) instead of
waiting behind seconds of others. While the log leaves a record unacknowledged for longer than
``stalled_s`` (the broker down), new writes are refused at once too, nothing of them written.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from aiokafka.errors import KafkaTimeoutError
from engram.commands.answers import LogUnavailable
from engram.schemas.checks import InvalidEvent
from engram.schemas.events import Event, Position
from engram.schemas.sealing import SealablePayload
from engram.streams.pipeline import Framed, Pipeline, needs_embedding
from engram.streams.producer import EventProducer

from engram import metrics

log = logging.getLogger(__name__)

MOST_PER_BATCH = 256  # writes finished in one thread hop (a bulk request's 1,000 go in four)
BUSY_RETRY_S = 1  # a full queue drains in well under a second at the rates it bounds


class Busy(LogUnavailable):
    """More writes waiting than ``ENGRAM_WRITE_QUEUE``: refused before anything was done."""

    retry_after = BUSY_RETRY_S


@dataclass
class Intake:
    """Decided writes in, positions in the log out (``submit``). ``limit``: writes queued or not yet
    acknowledged, at most; ``stalled_s``: how long the log may leave one unacknowledged before new
    writes are refused at once."""

    pipeline: Callable[[], Pipeline]  # this process's keys and embedder
    producer: EventProducer
    limit: int = 2000
    stalled_s: float = 3.0
    pending: int = 0  # queued, finishing, or handed to the producer and not acknowledged
    _queue: deque[tuple[Event | Framed, asyncio.Future[Position]]] = field(default_factory=deque)
    _wake: asyncio.Event = field(default_factory=asyncio.Event)
    _runner: asyncio.Task[None] | None = None
    _unacked: dict[int, float] = field(default_factory=dict)  # id(result) -> when handed to the producer
    _handing_since: float | None = None  # the producer has not taken a record since then
    # one thread of its own: batches finish in order, and what the model and the keys allocate stays
    # in one malloc arena (glibc keeps freed memory in the arena of the thread that freed it)
    _finisher: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(1, thread_name_prefix="engram-intake")
    )

    def submit(self, event: Event | Framed) -> asyncio.Future[Position]:
        """Queue a decided ``event`` (a draft, or framed already); the future is its position once
        the log acknowledged it, or the reason it was not written: InvalidEvent (413/422: what
        framing refused), a Kafka error. Raises ``Busy`` or ``LogUnavailable`` at once, nothing
        written, when it cannot be taken."""
        self._admit()
        loop = asyncio.get_running_loop()
        result: asyncio.Future[Position] = loop.create_future()
        self.pending += 1
        result.add_done_callback(self._settled)
        self._queue.append((event, result))
        if self._runner is None or self._runner.done() or self._runner.get_loop() is not loop:
            self._wake = asyncio.Event()  # bound to the loop that waits on it
            self._runner = loop.create_task(self._run(), name="engram-intake")
        self._wake.set()
        return result

    def _admit(self) -> None:
        try:
            self._check_room()
        except LogUnavailable:
            metrics.write_refused_busy.inc()
            raise

    def _check_room(self) -> None:
        if self.pending >= self.limit:
            raise Busy(
                f"{self.pending} writes are waiting for the log (ENGRAM_WRITE_QUEUE={self.limit}); "
                f"nothing of this one was written: retry after {BUSY_RETRY_S}s"
            )
        oldest = next(iter(self._unacked.values()), float("inf"))  # handed over in order: the first
        since = min(oldest, self._handing_since or float("inf"))
        stalled = time.monotonic() - since
        if stalled > self.stalled_s:
            raise LogUnavailable(
                f"the event log has not acknowledged a write for {stalled:.1f}s (the broker is down "
                "or unreachable); nothing of this one was written: retry later"
            )

    def _settled(self, result: asyncio.Future[Position]) -> None:
        self.pending -= 1
        self._unacked.pop(id(result), None)
        if not result.cancelled():
            result.exception()  # seen: a caller that gave up (its write timeout) is not waiting

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._queue:
                batch = [self._queue.popleft() for _ in range(min(len(self._queue), MOST_PER_BATCH))]
                metrics.write_batches.observe(len(batch))
                try:
                    await self._finish_and_hand_over(batch)
                except Exception as exc:  # never leave a caller waiting on a write nobody will finish
                    log.exception("a batch of %d writes failed", len(batch))
                    for _, result in batch:
                        if not result.done():
                            result.set_exception(exc)

    async def _finish_and_hand_over(
        self, batch: list[tuple[Event | Framed, asyncio.Future[Position]]]
    ) -> None:
        drafts = [item for item, _ in batch if not isinstance(item, Framed)]
        finish = self.pipeline().finish_many
        if any(needs_embedding(d) or isinstance(d.payload, SealablePayload) for d in drafts):
            loop = asyncio.get_running_loop()
            finished = iter(await loop.run_in_executor(self._finisher, finish, drafts))
        else:  # numbers and links: encoding them costs less than the hop to a thread
            finished = iter(finish(drafts))
        metrics.write_embedded.inc(sum(needs_embedding(d) for d in drafts))
        for item, result in batch:
            done = item if isinstance(item, Framed) else next(finished)
            if isinstance(done, InvalidEvent):
                result.set_exception(done)
                continue
            await self._hand_over(done, result)

    async def _hand_over(self, framed: Framed, result: asyncio.Future[Position]) -> None:
        """Give the producer one record (in order: the log's order per tenant is the queue's); the
        producer waits here only when it knows no leader for the record's partition."""
        self._handing_since = time.monotonic()
        try:
            timeout = self.producer.write_timeout_s
            async with asyncio.timeout(timeout):
                delivery = await self.producer.enqueue(framed)
        except TimeoutError:
            result.set_exception(KafkaTimeoutError(f"the log did not take the event within {timeout:g}s"))
            return
        except Exception as exc:  # a Kafka error: the write's own answer (503)
            result.set_exception(exc)
            return
        finally:
            self._handing_since = None
        self._unacked[id(result)] = time.monotonic()

        def acknowledged(delivery: asyncio.Future) -> None:
            if result.done():
                return
            if delivery.cancelled():
                result.set_exception(KafkaTimeoutError("the producer dropped the record"))
            elif (exc := delivery.exception()) is not None:
                result.set_exception(exc)
            else:
                meta = delivery.result()
                result.set_result(Position(meta.partition, meta.offset, meta.timestamp))

        delivery.add_done_callback(acknowledged)
