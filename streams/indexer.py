"""The search indexes behind the projector, and the order records are reported in.

The projector applies each record to the graph at once (and reports it); the indexer then
refreshes the touched memories of everything handled since its last pass, which makes them
searchable at once (the text index's overlay in memory, the vectors' graph), and only then reports
the records to its own ``Progress``, in log order, so ``?wait=true`` and a recall after a write see
the write when it is searchable. A tantivy commit costs 7-20 ms of CPU whatever it holds, so it is
not on that path: a flusher commits each tenant's overlay once it is large or old enough
(``text_index.FLUSH_DOCS``, ``FLUSH_AFTER_S``), in a worker thread, one tenant at a time, resting
after each as long as the commit took (at most half of one core under a backlog of many tenants).
A pass that refreshed many memories rests likewise, so the next pass carries more.

glibc keeps what the commits free (the writers' heaps, in the arenas of the threads that ran them)
and the next commits seldom reuse it: RSS grew ~80 KB a write more with the indexes than without
(``bench/memprobe.py``, issue 28). After commits, at most every ``TRIM_AFTER_S``, it is given back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass

from engram.projections.indexes import TenantIndexes
from engram.projections.progress import Progress
from engram.projections.stores import TenantStores, return_freed_memory
from engram.projections.tenant_graph import Outcome
from engram.projections.text_index import FLUSH_AFTER_S
from engram.schemas.events import Position

log = logging.getLogger(__name__)
MAX_REST_S = 2.0
TRIM_AFTER_S = 5.0  # glibc's freed memory is returned after commits at most this often (0: never)


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
        self._flusher: asyncio.Task[None] | None = None
        self._staged: dict[str, TenantIndexes] = {}  # tenants whose overlay holds changes
        self.passes = 0
        self.flushes = 0
        self.writers_released = 0
        self.trims = 0
        self._trimmed = time.monotonic()

    def submit(
        self, tenant: str | None, position: Position, outcome: Outcome, memory_ids: tuple[str, ...]
    ) -> None:
        self._pending.append(Handled(tenant, position, outcome, memory_ids))
        self._wake.set()

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="engram-indexer")
        self._flusher = asyncio.create_task(self._flush_forever(), name="engram-index-flusher")

    async def stop(self) -> None:
        for task in (self._task, self._flusher):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._task = self._flusher = None
        await self._pass()  # what was handled before the stop is indexed and reported
        await self.flush(everything=True)  # and committed, so a restart has nothing to catch up

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            started = time.perf_counter()
            await self._pass()
            # a backlog to commit: let the projector run; else the next write goes at once (a
            # record that touched no memory is reported without a commit of its own)
            if any(h.memory_ids for h in self._pending):
                await asyncio.sleep(min(MAX_REST_S, time.perf_counter() - started))

    async def _flush_forever(self) -> None:
        while True:
            await asyncio.sleep(FLUSH_AFTER_S / 4)
            await self.flush()
            await self.release_idle_writers()

    async def release_idle_writers(self) -> int:
        """Close the text index writers idle for ``WRITER_IDLE_S``, one at a time off the event
        loop (each waits for its merges): an idle tenant keeps no writer threads. How many."""
        released = 0
        for _tenant, indexes in self.stores.open_indexes():
            if indexes.text.writer_idle():
                released += await asyncio.to_thread(indexes.text.release_writer)
        self.writers_released += released
        return released

    async def flush(self, *, everything: bool = False) -> int:
        """Commit the text index of each tenant whose overlay is due (``everything``: that holds
        any change), one at a time; how many were committed."""
        done = 0
        for tenant, indexes in list(self._staged.items()):
            text = indexes.text
            if text.closed:  # closed since it was staged (an eviction, an erasure): kept here, it
                # would hold its graph, and the store's lock, for ever (a reopen found it locked)
                if self._staged.get(tenant) is indexes:
                    del self._staged[tenant]
                continue
            if not everything and not text.flush_due():
                continue
            job = text.begin_flush()
            if job is None:
                if not text.dirty:  # closed (an erasure, an eviction) or committed since
                    self._staged.pop(tenant, None)
                continue
            started = time.perf_counter()
            # the commit's thread is waited for even if this task is cancelled (a stop), so the stop's
            # own flush does not find this one under way
            write = asyncio.ensure_future(asyncio.to_thread(text.write_flush, job))
            written = False
            try:
                written = await asyncio.shield(write)
            except asyncio.CancelledError:
                written = await write
                raise
            except Exception:  # the graph is the truth: the overlay is committed at the next flush
                log.exception("committing the text index of %s failed", tenant)
            finally:
                text.end_flush(job, written)
                if not text.dirty and self._staged.get(tenant) is indexes:
                    del self._staged[tenant]
            done += written
            self.flushes += written
            if not everything:  # at most half of a core: the projector and the API go on
                await asyncio.sleep(min(MAX_REST_S, time.perf_counter() - started))
        if done and TRIM_AFTER_S and time.monotonic() - self._trimmed >= TRIM_AFTER_S:
            self._trimmed = time.monotonic()
            self.trims += await asyncio.to_thread(return_freed_memory)
        return done

    async def _index(self, tenant: str, position: Position, touched: set[str]) -> None:
        """Refresh one tenant's indexes (searchable at once), holding the tenant so an erasure does
        not close them under the embedding's or the vectors' save's thread."""
        async with self.stores.exclusive(tenant):
            indexes = self.stores.indexes(tenant)
            if indexes is None:
                return
            if touched:
                # a revised memory is embedded anew: in a thread, so the loop (the API) goes on
                words = indexes.stale_words(sorted(touched))
                fresh = await asyncio.to_thread(indexes.embed_words, words) if words else {}
                indexes.refresh(sorted(touched), fresh)
            indexes.stage(position)
            if indexes.text.dirty:
                self._staged[tenant] = indexes
            if indexes.vectors_due():
                # a stop cancels this task but not the thread: the save is waited for, the tenant held
                save = asyncio.ensure_future(asyncio.to_thread(indexes.save_vectors, position))
                try:
                    await asyncio.shield(save)
                except asyncio.CancelledError:
                    await save
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
