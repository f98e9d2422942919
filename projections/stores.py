"""Where tenants' stores live: one directory per tenant, opened on demand, a bounded number open.

With ``memory`` (``ENGRAM_STORE=memory``) each open tenant's graph is an in-memory store: it opens
from the tenant's newest snapshot (``Snapshotter.load``) and the log after it comes again from the
projector's consumer, whose committed offsets never pass what the snapshots hold (see
``streams.projector_app``). A tenant's directory then holds a ``memory`` mark (the tenant exists),
its search indexes and erasure mark; an unsaved tenant is snapshotted before it is evicted.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import gc
import logging
import os
import shutil
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from engram.projections.indexes import EmbedMemories, TenantIndexes
from engram.projections.knowledge import Knowledge, load_knowledge
from engram.projections.seams import Keys, Snapshotter
from engram.projections.tenant_graph import TenantGraph
from engram.schemas import vocabulary as v
from engram.schemas.events import Position
from pyoxigraph import Store

T = TypeVar("T")

log = logging.getLogger(__name__)

ERASING = "erasing"  # in a tenant's directory while a forget's words may still be in its files
MEMORY = "memory"  # in a tenant's directory when its graph is held in memory (and in snapshots)
# what a RocksDB memtable of a pyoxigraph store holds per quad written (its 12 column families;
# measured 735-790 bytes, with and without an embedding, with and without the rules)
QUAD_MEMTABLE_BYTES = 768


def _libc_trim() -> Callable[[int], int] | None:
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim  # type: ignore[no-any-return]
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to trim
        return None


# glibc keeps the memtables' freed 1 MB blocks in its heaps (below its adaptive mmap threshold):
# without ``malloc_trim`` after the flushes, they lower no RSS
_MALLOC_TRIM = _libc_trim()


def return_freed_memory() -> bool:
    """Give glibc's freed memory back to the system (``malloc_trim(0)``, all its arenas: the
    tantivy writers' threads leave theirs there too); False where there is no glibc."""
    if _MALLOC_TRIM is None:
        return False
    _MALLOC_TRIM(0)
    return True


class StoreLocked(Exception):
    """Another opener holds the tenant's store (RocksDB's lock): another process on this data dir."""

    def __init__(self, tenant: str, cause: OSError) -> None:
        super().__init__(
            f"the store of tenant {tenant!r} is locked by another process using the same data "
            f"directory ({str(cause)[:200]})"
        )


def opened(tenant: str, opener: Callable[[], T]) -> T:
    """``opener()``, with RocksDB's lock error (another process has the store) as StoreLocked."""
    try:
        return opener()
    except OSError as exc:
        if "lock" in str(exc).lower():
            raise StoreLocked(tenant, exc) from exc
        raise


class TenantStores:
    """Opens each tenant's graph at most once per process (RocksDB allows one opener)."""

    def __init__(
        self,
        root: Path,
        *,
        max_open: int = 256,
        knowledge: Knowledge | None = None,
        vectors: tuple[str, int] | None = None,
        keys: Keys | None = None,
        embed: EmbedMemories | None = None,
        memory: bool = False,
    ) -> None:
        """``vectors`` is the (model, dimension) the vector indexes hold; None keeps no indexes.
        ``embed`` re-embeds a revised memory by that model as the indexes refresh it.
        ``keys`` unseals memory events (without it every sealed event reads as erased).
        ``memory``: graphs in memory, durable through ``snapshots`` (volatile without them)."""
        self.root = root
        self.memory = memory
        self.keys = keys
        # set by the process that runs the projector, when it takes tenant snapshots
        self.snapshots: Snapshotter | None = None
        self.max_open = max_open
        self.knowledge = knowledge or load_knowledge()
        self.vectors = vectors
        self.embed = embed
        self._open: OrderedDict[str, TenantGraph] = OrderedDict()
        self._indexes: dict[str, TenantIndexes] = {}
        self._exclusive: dict[str, asyncio.Lock] = {}
        # called with a tenant once its erasure is done: caches of its past (as_of) drop their copies
        self.erasure_listeners: list[Callable[[str], None]] = []
        # set by the projector in memory mode: whether this process's partitions hold the tenant. A
        # graph opened for a tenant another process projects would be stale from the first event it
        # applies there, so none is (``streams.group``)
        self.owns: Callable[[str], bool] | None = None

    def _path(self, tenant: str) -> Path:
        if not v.full_match(v.TENANT_RE, tenant):
            raise ValueError(f"invalid tenant id {tenant!r}")
        return self.root / tenant / "graph"

    def store_path(self, tenant: str) -> Path:
        """Where the tenant's store is (or would be): a restored snapshot goes there."""
        return self._path(tenant)

    def exists(self, tenant: str) -> bool:
        if not v.full_match(v.TENANT_RE, tenant):
            return False
        if self.memory:
            if tenant in self._open or (self.root / tenant / MEMORY).exists():
                return True
            # a tenant moved here from another process of the group: its snapshots say it exists
            return self.snapshots is not None and self.snapshots.newest(tenant) is not None
        self._finish_vacuum(tenant)
        return self._path(tenant).is_dir()

    def get(self, tenant: str, *, create: bool = False) -> TenantGraph | None:
        """The tenant's graph; None when it has none yet and ``create`` is false."""
        graph = self._open.get(tenant)
        if graph is not None:
            self._open.move_to_end(tenant)
            return graph
        if not create and not self.exists(tenant):
            return None
        if self.memory:
            if self.owns is not None and not self.owns(tenant):
                return None
            return self._open_memory(tenant)
        if (self._path(tenant).parent / ERASING).exists():
            self._finish_erasure(tenant)  # a crash came between a forget's commit and its erasure
        try:
            graph = TenantGraph(self._path(tenant), self.knowledge)
        except OSError:
            gc.collect()  # an evicted handle may still hold the RocksDB lock until collected
            graph = opened(tenant, lambda: TenantGraph(self._path(tenant), self.knowledge))
        self._opened(tenant, graph)
        return graph

    def _opened(self, tenant: str, graph: TenantGraph) -> None:
        self._open[tenant] = graph
        if not self.memory:  # in memory, ``trim`` evicts, between the projector's batches
            while len(self._open) > self.max_open:
                self._close(next(iter(self._open)))

    async def trim(self) -> int:
        """Evict in-memory graphs, least recently used first, down to ``max_open``; how many.

        Called by the projector between batches only: a graph evicted while a run holds it would
        take that run's commit away with it. An unsaved graph is snapshotted first, in a thread
        (the loop goes on serving reads), or kept when there is nowhere to save it (no snapshots:
        a volatile store, for tests and benchmarks) or its snapshot failed (its offsets stay
        uncommitted)."""
        evicted = 0
        for old in list(self._open):
            if len(self._open) <= self.max_open:
                break
            graph = self._open.get(old)
            if graph is None or (graph.unsaved() and self.snapshots is None):
                continue
            if graph.unsaved():
                try:
                    await asyncio.to_thread(self.snapshots.take, old, graph)  # type: ignore[union-attr]
                except Exception:
                    log.exception("snapshot of %s failed; it stays open", old)
                    continue
            if self._open.get(old) is graph and not graph.unsaved():
                self._close(old)
                evicted += 1
        return evicted

    def memtable_bytes(self) -> int:
        """What the open disk stores' memtables hold, estimated from the quads written since their
        last flush."""
        return 0 if self.memory else sum(g.unflushed for g in self._open.values()) * QUAD_MEMTABLE_BYTES

    async def flush_over_budget(self, budget: int) -> int:
        """Flush the open disk stores with the most unflushed writes, largest first, until their
        memtables hold at most half of ``budget`` bytes, once they hold more; how many were flushed.

        pyoxigraph's RocksDB flushes a store's memtables only when one of its 12 column families
        reaches 128 MB, so a store written steadily grows ~30 KB per event for a very long time,
        times every tenant open: the one unbounded growth of the server's memory (``docs/
        performance.md``, Soak). pyoxigraph offers no option for it, so the projector flushes
        between batches, under one budget for the process whatever the number of tenants; each
        flush writes one larger set of files rather than many small ones (flushing every few events
        costs more memory in small files than it saves). Each is done in a thread while the tenant
        is held (an erasure closes the store), then glibc returns the freed memory."""
        total = self.memtable_bytes()
        if budget <= 0 or total <= budget:
            return 0
        flushed = 0
        for tenant, graph in sorted(self._open.items(), key=lambda item: -item[1].unflushed):
            if total <= budget // 2:
                break
            async with self.exclusive(tenant):
                if self._open.get(tenant) is not graph:
                    continue
                total -= graph.unflushed * QUAD_MEMTABLE_BYTES
                await asyncio.to_thread(graph.flush)
                flushed += 1
        if flushed and _MALLOC_TRIM is not None:
            await asyncio.to_thread(_MALLOC_TRIM, 0)
        return flushed

    def _open_memory(self, tenant: str) -> TenantGraph:
        """The tenant's graph in memory, from its newest snapshot (empty if it has none yet).

        A tenant with an erasure mark had a forget committed whose erasure a crash may have cut
        short: the snapshots before the newest go (the newest is the one durable copy of its
        events; if it still holds the words, the forget, not yet saved, comes again from the log
        and erases them)."""
        directory = self._path(tenant).parent
        directory.mkdir(parents=True, exist_ok=True)
        if (directory / ERASING).exists():
            shutil.rmtree(directory / "text", ignore_errors=True)
            if self.snapshots is not None:
                newest = self.snapshots.newest(tenant)
                self.snapshots.purge(tenant, keep=newest.offset if newest is not None else None)
            self._erased(tenant)
        # picked again if another process deletes it as it is read (it took a newer one)
        store = self.snapshots.load_newest(tenant)[1] if self.snapshots is not None else Store()
        (directory / MEMORY).touch()
        graph = TenantGraph(self._path(tenant), self.knowledge, memory=store)
        self._opened(tenant, graph)
        return graph

    async def drop(self, keep: Callable[[str], bool]) -> int:
        """Close every open tenant ``keep`` refuses (snapshotted first if unsaved), each while held
        (no index commit under it); how many. For tenants whose partition left this process: when
        it comes back they open from their newest snapshot, not from a copy another process has
        moved past meanwhile."""
        dropped = 0
        for tenant in [t for t in self._open if not keep(t)]:
            async with self.exclusive(tenant):
                graph = self._open.get(tenant)
                if graph is not None and graph.unsaved() and self.snapshots is not None:
                    await asyncio.to_thread(self.snapshots.take, tenant, graph)
                del graph
                self._close(tenant)
                dropped += 1
        return dropped

    def unsaved(self) -> list[tuple[str, TenantGraph]]:
        """The open in-memory graphs holding events no snapshot holds yet."""
        return [(t, g) for t, g in self._open.items() if g.unsaved()]

    def durable_below(self) -> dict[int, int]:
        """By partition, the offset before which every handled record is durable without the log
        (its tenant's snapshot or store holds it); a partition not named: every handled one is."""
        floors: dict[int, int] = {}
        for _, graph in self.unsaved():
            if (cp := graph.checkpoint()) is not None:
                saved = graph.saved.offset + 1 if graph.saved is not None else 0
                floors[cp.partition] = min(floors.get(cp.partition, saved), saved)
        return floors

    def _close(self, tenant: str) -> None:
        """Close the tenant's indexes and flush its graph; the handle goes with its last reference.
        An in-memory graph holding unsaved events is snapshotted first (in the caller's thread)."""
        graph = self._open.get(tenant)
        if graph is not None and graph.unsaved() and self.snapshots is not None:
            self.snapshots.take(tenant, graph)  # a failure keeps it open, unsaved and counted
        if (indexes := self._indexes.pop(tenant, None)) is not None:
            indexes.close()
        if (graph := self._open.pop(tenant, None)) is not None:
            graph.flush()

    def indexes(self, tenant: str) -> TenantIndexes | None:
        """The tenant's search indexes (caught up with its graph when opened); None without a store."""
        if self.vectors is None:
            return None
        graph = self.get(tenant)
        if graph is None:
            return None
        found = self._indexes.get(tenant)
        if found is None or found.graph is not graph:
            model, dim = self.vectors
            found = self._indexes[tenant] = TenantIndexes(graph.path.parent, graph, model, dim, self.embed)
        return found

    # -- vacuum and erasure: a store rewritten from what it holds now --------------------------
    def exclusive(self, tenant: str) -> asyncio.Lock:
        """Held by whoever works on the tenant's store or indexes in another thread (an index commit,
        a snapshot), and by an erasure, which closes and replaces them."""
        return self._exclusive.setdefault(tenant, asyncio.Lock())

    def vacuum(self, tenant: str) -> int:
        """Rewrite the tenant's store from its current facts; returns how many quads it holds.

        A forgotten memory's words leave the store's answers at once, but RocksDB's write-ahead
        log and oxigraph's interned strings keep them in its files; a store written afresh from
        the current quads holds none of them. Another process must not have the store open (the
        running server vacuums a tenant itself after each forget).
        """
        path = self._path(tenant)  # an invalid id is a ValueError, before "no tenant"
        if not self.exists(tenant):
            raise LookupError(f"no tenant {tenant!r} in {self.root}")
        graph = self._open.get(tenant)
        source = graph.store if graph is not None else opened(tenant, lambda: Store(str(path)))
        del graph
        count = _copy(source, path.with_name("graph.vacuum"))
        del source
        self._swap(tenant)
        return count

    def _swap(self, tenant: str) -> None:
        """The fresh copy in the store's place. An open graph is reopened in place (its holders keep
        a working graph); its indexes are closed, to open again on the new store."""
        if (indexes := self._indexes.pop(tenant, None)) is not None:
            indexes.close()

        def move() -> None:
            (self._path(tenant).with_name("graph.vacuum") / ".complete").touch()
            self._finish_vacuum(tenant)

        graph = self._open.get(tenant)
        if graph is not None:
            graph.reopen(move)
            return
        gc.collect()  # every RocksDB handle closed before the directories move
        move()

    def _finish_vacuum(self, tenant: str) -> None:
        """Complete a vacuum a crash interrupted: a complete fresh copy replaces the old store."""
        path = self._path(tenant)
        fresh_path, stale = path.with_name("graph.vacuum"), path.with_name("graph.stale")
        if (fresh_path / ".complete").exists():
            if path.is_dir():
                path.rename(stale)
            (fresh_path / ".complete").unlink()
            fresh_path.rename(path)
        if stale.is_dir():
            shutil.rmtree(stale)

    def begin_erasure(self, tenant: str) -> None:
        """Mark the tenant before a forget commits, so a crash before ``erase`` finishes is
        completed when the store is next opened."""
        mark = self._path(tenant).parent / ERASING
        mark.parent.mkdir(parents=True, exist_ok=True)
        with open(mark, "wb") as f:
            os.fsync(f.fileno())

    async def erase(self, tenant: str) -> None:
        """Every copy of a forgotten memory's words this process keeps, gone: the store rewritten
        from its facts, the text index dropped (rebuilt from the graph when next opened), the
        snapshots that may hold the words deleted, and the listeners' copies (as_of) dropped.

        The copy and the snapshots' deletion run in threads, so reads go on meanwhile (from the
        old store, which answers as the new one will); the tenant is held, so no index commit or
        snapshot runs under it, and its projector is waiting for this."""
        async with self.exclusive(tenant):
            started = time.perf_counter()
            quads = 0
            graph = self.get(tenant)  # an erasure a crash cut short is completed by this
            if self.memory:
                quads = await self._erase_memory(tenant, graph)
            elif graph is not None and (self._path(tenant).parent / ERASING).exists():
                source = graph.store
                del graph
                quads = await asyncio.to_thread(_copy, source, self._path(tenant).with_name("graph.vacuum"))
                del source
                self._swap(tenant)
            graph = None
            purged = await asyncio.to_thread(self._purge_copies, tenant)
            self._erased(tenant)
            took_ms = (time.perf_counter() - started) * 1e3
            log.info(
                "erased forgotten words of %s: store rewritten (%d quads), text index dropped, "
                "%d snapshots deleted, in %.0f ms", tenant, quads, purged, took_ms,
            )  # fmt: skip

    async def _erase_memory(self, tenant: str, graph: TenantGraph | None) -> int:
        """An in-memory graph copied into a fresh store (the old one's strings go with it), then
        snapshotted; only then are the older snapshots purged (``_purge_copies``): there is always one
        durable copy of the tenant's events, and after the purge none holds the forgotten words."""
        if graph is None:
            return 0
        if (indexes := self._indexes.pop(tenant, None)) is not None:
            indexes.close()  # its text index is dropped next; it opens again from the graph
        fresh, source = Store(), graph.store

        def copy() -> None:  # the quads are read on the thread that writes them
            fresh.bulk_extend(source.quads_for_pattern(None, None, None, None))

        await asyncio.to_thread(copy)
        with graph._writing():
            graph.store = fresh
        if self.snapshots is not None:
            await asyncio.to_thread(self.snapshots.take, tenant, graph)
        return len(fresh)

    def _finish_erasure(self, tenant: str) -> None:
        """An erasure, synchronously: for a store opened with the mark a crash left."""
        if self.exists(tenant):
            self.vacuum(tenant)
        self._purge_copies(tenant)
        self._erased(tenant)

    def _purge_copies(self, tenant: str) -> int:
        """The erasure's copies on disk besides the store: the text index and the snapshots (how
        many were deleted)."""
        shutil.rmtree(self._path(tenant).parent / "text", ignore_errors=True)
        if self.snapshots is None:
            return 0
        if self.memory:  # the newest, taken after the forget, is the tenant's one durable copy
            newest = self.snapshots.newest(tenant)
            return self.snapshots.purge(tenant, keep=newest.offset if newest is not None else None)
        return self.snapshots.purge(tenant)

    def _erased(self, tenant: str) -> None:
        """The listeners drop their copies (on the caller's thread, the event loop's); the mark goes."""
        for listener in self.erasure_listeners:
            listener(tenant)
        (self._path(tenant).parent / ERASING).unlink(missing_ok=True)

    # -- records refused where no tenant's checkpoint can remember them ------------------------
    def _refused_mark(self, partition: int) -> Path:
        return self.root / "_refused" / f"partition-{partition}"

    def refused_mark(self, partition: int) -> int:
        """The highest offset of ``partition`` refused with no store to record it (-1: none).

        Refusals are deterministic, so a record redelivered after a crash is refused again; a
        record at or below the mark was dead-lettered already and is not dead-lettered twice.
        """
        mark = self._refused_mark(partition)
        return int(mark.read_text() or -1) if mark.is_file() else -1

    def note_refused(self, position: Position) -> None:
        if position.offset <= self.refused_mark(position.partition):
            return  # the mark only moves forward
        mark = self._refused_mark(position.partition)
        mark.parent.mkdir(parents=True, exist_ok=True)
        tmp = mark.with_suffix(".tmp")
        tmp.write_text(str(position.offset))
        tmp.replace(mark)

    def open_count(self) -> int:
        """Tenant stores open now (at most ``max_open``)."""
        return len(self._open)

    def tenants(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(
            p.name for p in self.root.iterdir() if (p / MEMORY if self.memory else p / "graph").exists()
        )

    def close(self) -> None:
        for indexes in self._indexes.values():
            indexes.close()
        self._indexes.clear()
        for tenant in list(self._open):
            self._close(tenant)  # an unsaved in-memory graph is snapshotted


def _copy(source: Store, fresh_path: Path) -> int:
    """Every quad of ``source`` into a new store at ``fresh_path`` (closed when this returns);
    how many. Its quads are read, and dropped, on the calling thread."""
    shutil.rmtree(fresh_path, ignore_errors=True)
    fresh = Store(str(fresh_path))
    fresh.bulk_extend(source.quads_for_pattern(None, None, None, None))
    fresh.flush()
    count = len(fresh)
    del fresh
    return count
