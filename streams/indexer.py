"""Group commit of the search indexes behind the projector, and the order records are reported in.

The projector applies each record to the graph at once (and reports it); the indexer then
refreshes the touched memories of everything handled since its last pass and commits each
tenant's text index once per pass. A tantivy commit costs ~20 ms of CPU whatever it holds, so
with many busy tenants commits would starve the projector: after each pass the indexer rests as
long as the pass took (when more that needs a commit is already waiting: a write with no backlog
is not held back, nor is a backlog that touched no memory, a decision or a session say, whose pass
commits nothing), which caps it at half of one core and lets the next pass carry more. Only
after the commit are the records reported to its own ``Progress``, in log order, so ``?wait=true``
and a recall after a write see the write when it is searchable.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass

from engram.projections.progress import Progress
from engram.projections.stores import TenantStores
from engram.projections.tenant_graph import Outcome
from engram.schemas.events import Position

log = logging.getLogger(__name__)
MAX_REST_S = 2.0


@dataclass(frozen=True)
class Handled:
    tenant: str | None
    position: Position
    outcome: Outcome
    memory_ids: tuple[str, ...]


class Indexer:
    def __init__(self, stores: TenantStores, progress: Progress) -> None:
        self.stores = stores
        self.progress = progress
        self._pending: list[Handled] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.passes = 0

    def submit(
        self, tenant: str | None, position: Position, outcome: Outcome, memory_ids: tuple[str, ...]
    ) -> None:
        self._pending.append(Handled(tenant, position, outcome, memory_ids))
        self._wake.set()

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="engram-indexer")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self._pass()  # what was handled before the stop is indexed and reported

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            started = time.perf_counter()
            await self._pass()
            # a backlog to commit: let the projector run; else the next write goes at once (a
            # record that touched no memory is reported without a commit of its own)
            if any(h.memory_ids for h in self._pending):
                await asyncio.sleep(min(MAX_REST_S, time.perf_counter() - started))

    async def _index(self, tenant: str, position: Position, touched: set[str]) -> None:
        """Refresh and commit one tenant's indexes, holding the tenant so an erasure does not close
        them under the commit's thread (and keeping no reference once done)."""
        async with self.stores.exclusive(tenant):
            indexes = self.stores.indexes(tenant)
            if indexes is None:
                return
            if touched:
                # a revised memory is embedded anew: in a thread, so the loop (the API) goes on
                words = indexes.stale_words(sorted(touched))
                fresh = await asyncio.to_thread(indexes.embed_words, words) if words else {}
                indexes.refresh(sorted(touched), fresh)
            # a stop cancels this task but not the thread: the commit is waited for, the tenant
            # held, or the stop's last pass writes to the writer the thread is committing
            # ("RuntimeError: Already borrowed")
            commit = asyncio.ensure_future(asyncio.to_thread(indexes.commit, position))
            try:
                await asyncio.shield(commit)
            except asyncio.CancelledError:
                await commit
                raise

    async def _pass(self) -> None:
        self._wake.clear()
        batch, self._pending = self._pending, []
        if not batch:
            return
        last: dict[str, Position] = {}
        touched: dict[str, set[str]] = {}
        for h in batch:
            if h.tenant is not None:
                last[h.tenant] = h.position
                touched.setdefault(h.tenant, set()).update(h.memory_ids)
        started = time.perf_counter()
        for tenant, position in last.items():
            try:
                await self._index(tenant, position, touched[tenant])
            except Exception:  # the graph is the truth: the index catches up when next opened
                log.exception("indexing %s up to %d:%d failed", tenant, position.partition, position.offset)
        self.passes += 1
        took_ms = (time.perf_counter() - started) * 1e3
        log.debug("indexed %d records of %d tenants in %.1f ms", len(batch), len(last), took_ms)
        for h in batch:
            self.progress.record(h.tenant, h.position.partition, h.position.offset, h.outcome)
