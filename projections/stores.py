"""Where tenants' stores live: one directory per tenant, opened on demand, a bounded number open.

With ``memory`` (``ENGRAM_STORE=memory``) each open tenant's graph is an in-memory store: it opens
from the tenant's newest snapshot (``Snapshotter.load``) and the log after it comes again from the
projector's consumer, whose committed offsets never pass what the snapshots hold (see
``streams.projector_app``). A tenant's directory then holds a ``memory`` mark (the tenant exists),
its search indexes and erasure mark; an unsaved tenant is snapshotted before it is evicted.

With ``cached`` (on disk, when the processes of a group share one object store:
``Settings.tenants_move``) a tenant's store on disk is a cache of its newest snapshot and the log
after it, durable through snapshots in the same way: the projector commits no offset past them.
Opened, it is used only if it holds at least the newest snapshot's events (another process may
have projected the tenant past this copy while it owned its partition); otherwise that snapshot is
restored in its place. When its partition leaves this process (the projector's ``drop`` at an
assignment that does not give it back, or as the process stops) the tenant is snapshotted if
unsaved, closed, and its directory deleted: a copy here would be stale, and it would keep the
words of any memory its new owner forgets.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import gc
import logging
import shutil
from collections import OrderedDict
from collections.abc import Callable, Set
from pathlib import Path

from engram.projections.indexes import EmbedMemories, TenantIndexes
from engram.projections.knowledge import Knowledge, load_knowledge
from engram.projections.rewrites import ERASING, StoreRewrites
from engram.projections.seams import PICKS, Keys, Snapshotter, Vanished
from engram.projections.tenant_graph import QUAD_MEMTABLE_BYTES, StoreOpening, TenantGraph, opened
from engram.schemas import vocabulary as v
from engram.schemas.events import Position
from pyoxigraph import Store

log = logging.getLogger(__name__)

MEMORY = "memory"  # in a tenant's directory when its graph is held in memory (and in snapshots)


def behind(checkpoint: Position | None, snapshot: Position) -> bool:
    """Whether a store at ``checkpoint`` lacks events a snapshot at ``snapshot`` holds."""
    return (
        checkpoint is None
        or checkpoint.partition != snapshot.partition
        or checkpoint.offset < snapshot.offset
    )


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


class TenantStores:
    """Opens each tenant's graph at most once per process (RocksDB allows one opener); its
    ``rewrites`` vacuum and erase them (``projections.rewrites``)."""

    def __init__(
        self,
        root: Path,
        *,
        max_open: int = 256,
        max_open_bytes: int = 0,
        knowledge: Knowledge | None = None,
        vectors: tuple[str, int] | None = None,
        keys: Keys | None = None,
        embed: EmbedMemories | None = None,
        memory: bool = False,
        cached: bool = False,
    ) -> None:
        """``vectors`` is the (model, dimension) the vector indexes hold; None keeps no indexes.
        ``embed`` re-embeds a revised memory by that model as the indexes refresh it.
        ``keys`` unseals memory events (without it every sealed event reads as erased).
        ``memory``: graphs in memory, durable through ``snapshots`` (volatile without them).
        ``cached``: graphs on disk, caches of their snapshots (the module's docstring).
        ``max_open``, ``max_open_bytes``: at most that many tenants open, holding at most that much
        memory by their estimates (``resident_bytes``; 0: no bound); past either, the least
        recently used are closed."""
        self.root = root
        self.memory = memory
        self.cached = cached and not memory
        # graphs durable through their snapshots: the projector holds commits past them
        self.held = memory or self.cached
        self.keys = keys
        # set by the process that runs the projector, when it takes tenant snapshots
        self.snapshots: Snapshotter | None = None
        self.max_open = max_open
        self.max_open_bytes = max_open_bytes
        self.knowledge = knowledge or load_knowledge()
        self.vectors = vectors
        self.embed = embed
        self._open: OrderedDict[str, TenantGraph] = OrderedDict()
        self._indexes: dict[str, TenantIndexes] = {}
        self._exclusive: dict[str, asyncio.Lock] = {}
        self._opening: set[str] = set()  # stores being opened in a thread (``get_async``)
        # called with a tenant once its erasure is done: caches of its past (as_of) drop their copies
        self.erasure_listeners: list[Callable[[str], None]] = []
        # set by the projector when graphs are held: whether this process's partitions hold the tenant. A
        # graph opened for a tenant another process projects would be stale from the first event it
        # applies there, so none is (``streams.group``)
        self.owns: Callable[[str], bool] | None = None
        self.rewrites = StoreRewrites(self)

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
        self.rewrites.finish_vacuum(tenant)
        if self._path(tenant).is_dir():
            return True
        return self.cached and self.snapshots is not None and self.snapshots.newest(tenant) is not None

    def get(self, tenant: str, *, create: bool = False) -> TenantGraph | None:
        """The tenant's graph; None when it has none yet and ``create`` is false."""
        graph = self._open.get(tenant)
        if graph is not None:
            self._open.move_to_end(tenant)
            return graph
        if not self._to_open(tenant, create):
            return None
        if self.memory:
            return self._open_memory(tenant)
        if (self._path(tenant).parent / ERASING).exists():
            self.rewrites.finish_erasure(tenant)  # a crash came between a forget's commit and its erasure
        graph = self._open_cached(tenant) if self.cached else self._open_disk(tenant)
        self._opened(tenant, graph)
        return graph

    async def get_async(self, tenant: str, *, create: bool = False) -> TenantGraph | None:
        """``get``, with a disk store opened (or made) in a thread: RocksDB's open costs 20-50 ms,
        and the projector's batch of new tenants held the event loop for that long each (a
        thousand new tenants, half a minute: health checks timed out). Meanwhile ``get`` of that
        tenant raises ``StoreOpening`` (asked again, it is open)."""
        if tenant in self._open or self.memory or tenant in self._opening:
            return self.get(tenant, create=create)
        if (self._path(tenant).parent / ERASING).exists():
            return self.get(tenant, create=create)  # an erasure to finish: rare, on the loop
        if not self._to_open(tenant, create):
            return None
        self._opening.add(tenant)
        try:
            graph = await asyncio.to_thread(self._open_cached if self.cached else self._open_disk, tenant)
        finally:
            self._opening.discard(tenant)
        self._opened(tenant, graph)
        return graph

    def _to_open(self, tenant: str, create: bool) -> bool:
        """Whether ``tenant``, not open, is opened here: it exists (or is to be made), and held
        graphs are opened only for this process's partitions. ``StoreOpening`` while a thread
        opens it."""
        if tenant in self._opening:
            raise StoreOpening(tenant)
        if not create and not self.exists(tenant):
            return False
        return not (self.held and self.owns is not None and not self.owns(tenant))

    def _open_disk(self, tenant: str) -> TenantGraph:
        try:
            return TenantGraph(self._path(tenant), self.knowledge)
        except OSError:
            gc.collect()  # an evicted handle may still hold the RocksDB lock until collected
            return opened(tenant, lambda: TenantGraph(self._path(tenant), self.knowledge))

    def _open_cached(self, tenant: str) -> TenantGraph:
        """The tenant's store here if it holds at least its newest snapshot's events; otherwise
        that snapshot, restored in its place (picked again if another process deletes it as it is
        read). Its ``saved`` is that snapshot's position: the events after it are held."""
        path = self._path(tenant)
        for _ in range(PICKS):
            newest = self.snapshots.newest(tenant) if self.snapshots is not None else None
            graph = self._open_disk(tenant) if path.is_dir() else None
            if newest is not None and (graph is None or behind(graph.checkpoint(), newest.position)):
                if graph is not None:
                    log.info(
                        "tenant %s: its store here is at %s, its newest snapshot at %d:%d: restoring that",
                        tenant, graph.checkpoint(), newest.partition, newest.offset,
                    )  # fmt: skip
                    del graph
                    gc.collect()  # the RocksDB handle and its lock go with the last reference
                self.close_indexes(tenant)
                shutil.rmtree(path.parent, ignore_errors=True)  # its indexes are rebuilt from the graph
                try:
                    self.snapshots.restore(newest, path)  # type: ignore[union-attr]
                except Vanished:
                    continue
                graph = self._open_disk(tenant)
            if graph is None:
                graph = self._open_disk(tenant)
            graph.cached = True
            graph.saved = newest.position if newest is not None else None
            return graph
        raise Vanished(f"tenant {tenant}: its newest snapshot was deleted as it was read, {PICKS} times")

    def _opened(self, tenant: str, graph: TenantGraph) -> None:
        self._open[tenant] = graph
        if not self.held:  # held graphs: ``trim`` evicts, between the projector's batches
            for old in self._over_budget():
                self._close(old)

    def resident_bytes(self, tenant: str) -> int:
        """What the open tenant's graph and indexes hold in memory, estimated; 0 if it is closed."""
        graph = self._open.get(tenant)
        if graph is None:
            return 0
        indexes = self._indexes.get(tenant)
        return graph.resident_bytes() + (indexes.resident_bytes() if indexes is not None else 0)

    def open_bytes(self) -> int:
        """What the open tenants hold in memory, estimated (``resident_bytes``)."""
        return sum(self.resident_bytes(t) for t in list(self._open))

    def _over_budget(self, kept: Set[str] = frozenset()) -> list[str]:
        """The open tenants to close, least recently used first, for the others to be within
        ``max_open`` and ``max_open_bytes``; never the most recently used one, nor one ``kept``
        (one that could not be closed: it still counts)."""
        over = len(self._open) - self.max_open
        total = self.open_bytes() if self.max_open_bytes > 0 else 0
        out = []
        for old in list(self._open)[:-1]:
            if over <= 0 and total <= self.max_open_bytes:
                break
            if old in kept:
                continue
            out.append(old)
            over -= 1
            total -= self.resident_bytes(old) if self.max_open_bytes > 0 else 0
        return out

    async def trim(self) -> int:
        """Evict graphs, least recently used first, down to ``max_open`` and ``max_open_bytes``;
        how many. A disk store is closed as it is (its data is on disk).

        Called by the projector between batches only: a graph evicted while a run holds it would
        take that run's commit away with it. An unsaved graph is snapshotted first, in a thread
        (the loop goes on serving reads), or kept when there is nowhere to save it (no snapshots:
        a volatile store, for tests and benchmarks) or its snapshot failed (its offsets stay
        uncommitted)."""
        evicted, kept = 0, set[str]()
        while due := self._over_budget(kept):
            old = due[0]
            graph = self._open[old]
            if graph.unsaved() and self.snapshots is None:
                kept.add(old)
                continue
            if graph.unsaved():
                try:
                    await asyncio.to_thread(self.snapshots.take, old, graph)  # type: ignore[union-attr]
                except Exception:
                    log.exception("snapshot of %s failed; it stays open", old)
                    kept.add(old)
                    continue
            if self._open.get(old) is graph and not graph.unsaved():
                self._close(old)
                evicted += 1
            else:
                kept.add(old)  # written while it was saved: it is looked at again next time
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
        is held (an erasure closes the store), then glibc returns the freed memory.

        A store whose deletions since its last flush reach ``TOMBSTONES_PER_FLUSH`` is flushed
        too, whatever the budget: its tombstones slow every scan of what it replaced in place."""
        flushed = 0
        for tenant, graph in list(self._open.items()):  # tombstones every scan would step past
            if graph.tombstones_due():
                async with self.exclusive(tenant):
                    if self._open.get(tenant) is graph:
                        await asyncio.to_thread(graph.flush)
                        flushed += 1
        total = self.memtable_bytes()
        if budget <= 0 or total <= budget:
            return flushed
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
            self.rewrites.erased(tenant)
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
        moved past meanwhile. Cached on disk, their directories go too, open or not."""
        dropped = 0
        for tenant in [t for t in self._open if not keep(t)]:
            async with self.exclusive(tenant):
                graph = self._open.get(tenant)
                if graph is not None and graph.unsaved() and self.snapshots is not None:
                    await asyncio.to_thread(self.snapshots.take, tenant, graph)
                del graph
                self._close(tenant)
                dropped += 1
        if self.cached:
            gone = [t for t in self.tenants() if t not in self._open and not keep(t)]
            if gone:
                gc.collect()  # once, not per tenant: a closed store's handle may still be referenced
            for tenant in gone:
                async with self.exclusive(tenant):
                    if tenant not in self._open:
                        await asyncio.to_thread(shutil.rmtree, self.root / tenant, True)
        return dropped

    def unsaved(self) -> list[tuple[str, TenantGraph]]:
        """The open held graphs holding events no snapshot holds yet."""
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
        self.close_indexes(tenant)
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

    # -- vacuum and erasure (``projections.rewrites``) hold the tenant ------------------------
    def exclusive(self, tenant: str) -> asyncio.Lock:
        """Held by whoever works on the tenant's store or indexes in another thread (an index commit,
        a snapshot), and by an erasure, which closes and replaces them."""
        return self._exclusive.setdefault(tenant, asyncio.Lock())

    def open_graph(self, tenant: str) -> TenantGraph | None:
        """The tenant's graph if it is open here, without opening it or counting a use."""
        return self._open.get(tenant)

    def open_indexes(self) -> list[tuple[str, TenantIndexes]]:
        """The tenants whose indexes are open here, and their indexes."""
        return list(self._indexes.items())

    def close_indexes(self, tenant: str) -> None:
        """Close the tenant's search indexes, if open (they open again on its graph when asked)."""
        if (indexes := self._indexes.pop(tenant, None)) is not None:
            indexes.close()

    def vacuum(self, tenant: str) -> int:
        """``StoreRewrites.vacuum``: the tenant's store rewritten from its current facts."""
        return self.rewrites.vacuum(tenant)

    def begin_erasure(self, tenant: str) -> None:
        """``StoreRewrites.begin_erasure``: the tenant marked before a forget commits."""
        self.rewrites.begin_erasure(tenant)

    async def erase(self, tenant: str) -> None:
        """``StoreRewrites.erase``: every copy of a forgotten memory's words this process keeps, gone."""
        await self.rewrites.erase(tenant)

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
