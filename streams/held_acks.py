"""Consumer offsets that never pass what a crash would lose, for tenants held in memory.

With ``ENGRAM_STORE=memory`` a tenant's graph is durable only as its newest snapshot; the events
after that snapshot live in the process alone. A crash (kill -9) loses them, and they must come
again from the log. The projector's consumer group restarts at its committed offset, so the rule
is: **an offset is committed only once every record before it is durable**, i.e. held by its
tenant's snapshot (or needing no store: skipped, or refused with a refusal mark on disk).

How it holds: the projector handles a batch, then holds its events (a Faust reference, so Faust's
own ack after the batch does not make them committable) and releases, in each partition, those
below ``TenantStores.durable_below()``: the lowest ``saved checkpoint + 1`` of the
partition's tenants with unsaved events (0 for a tenant never saved). Snapshots move that floor:
every ``ENGRAM_SNAPSHOT_EVERY`` events of a tenant, on eviction from the LRU, and at the latest
``ENGRAM_SNAPSHOT_AFTER_S`` after a tenant's first unsaved event (``save_due``, run by a timer
between batches), so the committed offset trails the handled one by about that long.

After a crash the consumer resumes at each partition's committed offset C, and each tenant opens
from its newest snapshot, at checkpoint S. A tenant that had unsaved events when C was committed
has C ≤ S + 1 (the rule); one that had none has every record of its before C in that snapshot.
Either way every record after S comes again, and every one at or below S is skipped by the
checkpoint: nothing is lost, nothing applied twice. The one side effect that may repeat is the
dead letter of a record refused after S (at least once, as Kafka promises anyway).

A rebalance waits for held events (Faust's ``wait_empty``) until the timer's next snapshots
release them: at most about ``ENGRAM_SNAPSHOT_AFTER_S``; a stop saves every tenant first
(``drain``), as it waits too.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from typing import Any

from engram.projections.stores import TenantStores

log = logging.getLogger(__name__)


class HeldAcks:
    """The projector's handled events whose offsets may not be committed yet, by partition."""

    def __init__(self, stores: TenantStores, consumer: Any, after_s: float) -> None:
        """``consumer``: a callable giving Faust's consumer (it exists once the app has started)."""
        self.stores, self.consumer, self.after_s = stores, consumer, after_s
        self.writing = asyncio.Lock()  # the projector's batches and these snapshots, one at a time
        self.stopping = False  # from ``drain`` on, every batch is saved before its events are held
        self._held: dict[int, deque[Any]] = {}
        self._since: dict[str, float] = {}  # tenant: when its first unsaved event was noticed

    def hold(self, events: list[Any]) -> None:
        """Hold a handled batch's events (before the batch's own acks), then release what is durable."""
        for event in events:
            event.message.incref()
            self._held.setdefault(event.message.partition, deque()).append(event)
        self.release()

    def release(self) -> int:
        """Ack every held event below its partition's durable floor; how many."""
        now, count = time.monotonic(), 0
        unsaved = {t for t, _ in self.stores.unsaved()}
        self._since = {t: self._since.get(t, now) for t in unsaved}
        floors = self.stores.durable_below()
        for partition, held in self._held.items():
            floor = floors.get(partition)
            while held and (floor is None or held[0].message.offset < floor):
                held.popleft().message.ack(self.consumer())
                count += 1
        return count

    def held(self) -> int:
        return sum(len(h) for h in self._held.values())

    async def save_due(self, *, everything: bool = False) -> int:
        """Snapshot the tenants unsaved for ``after_s`` (every unsaved one with ``everything``),
        each in a thread; then release. The caller keeps the projector from writing meanwhile."""
        snapshots = self.stores.snapshots
        if snapshots is None:
            return 0
        now, saved = time.monotonic(), 0
        for tenant, graph in self.stores.unsaved():
            if everything or now - self._since.get(tenant, now) >= self.after_s:
                try:
                    await asyncio.to_thread(snapshots.take, tenant, graph)
                    saved += 1
                except Exception:
                    log.exception("snapshot of %s failed; its offsets stay uncommitted", tenant)
        self.release()
        return saved

    async def drain(self) -> None:
        """Before the consumer stops: everything saved and released, now and for any batch still
        to come (Faust's stop waits for every event it handed over to be acknowledged)."""
        self.stopping = True
        async with self.writing:
            await self.save_due(everything=True)
