"""What the projector takes at once from a Faust stream: every event available, up to a batch.

Faust's ``take_events(max, within)`` waits ``within`` from the start of each batch whatever comes:
a short window leaves a backlog in batches of a few records (each event's trip through Faust's
stream costs about as much as the window), a long one holds a lone write for the whole window.
``take_available`` closes a batch when it is full, when no event has joined it for ``idle_s`` (the
stream has nothing more for now) or ``within_s`` after its first event, so a lone write waits
``idle_s`` and a backlog is taken in full batches. Events are acknowledged (their offsets become
committable) only once the caller is done with the batch, as with ``take_events``; while it is in
use, the next event waits.

``BatchBound`` bounds a batch by time as well: its size is what the caller handles in about
``batch_s`` at the rate it measured, so a backlog does not hold a fresh write behind thousands of
records (a write waits for the batch before its own, and for its tenant's run in its own).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import faust


@dataclass
class BatchBound:
    """The most records a batch may take: ``most``, and no more than are handled in ``batch_s`` at
    the rate measured so far (a moving average of seconds per record, each batch weighing
    ``weight``). A batch's cost per record falls as it grows (one commit per tenant), so a bound
    measured on small batches is low and rises as batches do."""

    most: int
    batch_s: float
    weight: float = 0.3
    per_record_s: float | None = None

    def limit(self) -> int:
        if self.per_record_s is None or self.per_record_s <= 0:
            return self.most
        return max(1, min(self.most, int(self.batch_s / self.per_record_s)))

    def observe(self, records: int, seconds: float) -> None:
        """``records`` were handled in ``seconds``."""
        if records <= 0:
            return
        rate = seconds / records
        last = self.per_record_s
        self.per_record_s = rate if last is None else last + self.weight * (rate - last)


async def take_available(
    stream: faust.StreamT, max_: int | Callable[[], int], *, idle_s: float, within_s: float
) -> AsyncIterator[list[Any]]:
    """Batches (lists of Faust events) of at most ``max_`` events (or ``max_()``, asked as each
    batch begins), in the stream's order."""
    loop = asyncio.get_running_loop()
    most = max_ if callable(max_) else (lambda: max_)
    limit = most()
    events: list[Any] = []
    joined = asyncio.Event()  # an event joined the batch being formed
    room = asyncio.Event()  # the batch being formed may take another event
    room.set()

    async def add(value: Any) -> Any:
        await room.wait()
        event = stream.current_event  # the event this value belongs to, until the processor returns
        if event is None:
            raise RuntimeError("no current event in the stream's processor")
        events.append(event)
        if len(events) >= limit:
            room.clear()
        joined.set()
        return value

    acks = stream.enable_acks
    stream.enable_acks = False  # acknowledged below, once the batch is used
    stream.add_processor(add)
    # the stream is drained in the background through the processor (Faust's own take_* do this)
    stream._enable_passive(aiter(stream.channel))  # type: ignore[attr-defined]
    try:
        while not stream.should_stop:
            if not events and await stream.wait_for_stopped(joined):
                break
            first = loop.time()
            while len(events) < limit:
                joined.clear()
                left = within_s - (loop.time() - first)
                if left <= 0 or await stream.wait_for_stopped(joined, timeout=min(idle_s, left)):
                    break
                if not joined.is_set():
                    break  # nothing joined for idle_s: what is available is taken
            room.clear()
            batch, events[:] = list(events), []
            joined.clear()
            try:
                yield batch
            finally:
                for event in batch:
                    await stream.ack(event)
                limit = most()
                room.set()
    finally:
        stream.enable_acks = acks
        stream._processors.remove(add)  # type: ignore[attr-defined]
