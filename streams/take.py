"""What the projector takes at once from a Faust stream: every event available, up to a batch.

Faust's ``take_events(max, within)`` waits ``within`` from the start of each batch whatever comes:
a short window leaves a backlog in batches of a few records (each event's trip through Faust's
stream costs about as much as the window), a long one holds a lone write for the whole window.
``take_available`` closes a batch when it is full, when no event has joined it for ``idle_s`` (the
stream has nothing more for now) or ``within_s`` after its first event, so a lone write waits
``idle_s`` and a backlog is taken in full batches. Events are acknowledged (their offsets become
committable) only once the caller is done with the batch, as with ``take_events``; while it is in
use, the next event waits.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import faust


async def take_available(
    stream: faust.StreamT, max_: int, *, idle_s: float, within_s: float
) -> AsyncIterator[list[Any]]:
    """Batches (lists of Faust events) of at most ``max_`` events, in the stream's order."""
    loop = asyncio.get_running_loop()
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
        if len(events) >= max_:
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
            while len(events) < max_:
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
                room.set()
    finally:
        stream.enable_acks = acks
        stream._processors.remove(add)  # type: ignore[attr-defined]
