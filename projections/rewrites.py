"""Vacuum and erasure: a tenant's store rewritten from what it holds now.

A forgotten memory's words leave the store's answers at once, but RocksDB's write-ahead log and
oxigraph's interned strings keep them in its files, as do the text index and the snapshots; an
erasure rewrites the store from its current facts and deletes those copies (issue #22). A
collaborator of ``projections.stores.TenantStores`` (its ``rewrites``), which it reaches through
the few members ``Host`` names (the open graphs and indexes, the mode, the snapshots, the lock that
holds a tenant); kept apart so the erasure's steps and their crash recovery read in one place.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from engram.projections.knowledge import Knowledge
from engram.projections.seams import Snapshotter
from engram.projections.tenant_graph import TenantGraph, opened
from pyoxigraph import Store

log = logging.getLogger(__name__)

ERASING = "erasing"  # in a tenant's directory while a forget's words may still be in its files


class Host(Protocol):
    """What a ``StoreRewrites`` works on: the tenants' stores (``TenantStores``)."""

    root: Path
    memory: bool  # graphs held in memory, durable through the snapshots
    cached: bool  # graphs on disk, caches of their snapshots (so durable through them too)
    knowledge: Knowledge
    snapshots: Snapshotter | None  # set after the stores are made, by the process that takes them
    erasure_listeners: list[Callable[[str], None]]

    def store_path(self, tenant: str) -> Path: ...
    def exists(self, tenant: str) -> bool: ...
    def get(self, tenant: str, *, create: bool = False) -> TenantGraph | None: ...
    def open_graph(self, tenant: str) -> TenantGraph | None: ...
    def close_indexes(self, tenant: str) -> None: ...
    def exclusive(self, tenant: str) -> asyncio.Lock: ...


class StoreRewrites:
    """Vacuum and erasure of the tenants' stores in ``host``, and their completion after a crash."""

    def __init__(self, host: Host) -> None:
        self.host = host

    def vacuum(self, tenant: str) -> int:
        """Rewrite the tenant's store from its current facts; returns how many quads it holds.

        A forgotten memory's words leave the store's answers at once, but RocksDB's write-ahead
        log and oxigraph's interned strings keep them in its files; a store written afresh from
        the current quads holds none of them. Another process must not have the store open (the
        running server vacuums a tenant itself after each forget).
        """
        host = self.host
        path = host.store_path(tenant)  # an invalid id is a ValueError, before "no tenant"
        if not host.exists(tenant):
            raise LookupError(f"no tenant {tenant!r} in {host.root}")
        graph = host.open_graph(tenant)
        source = graph.store if graph is not None else opened(tenant, lambda: Store(str(path)))
        del graph
        count = _copy(source, path.with_name("graph.vacuum"))
        del source
        self._swap(tenant)
        return count

    def _swap(self, tenant: str) -> None:
        """The fresh copy in the store's place. An open graph is reopened in place (its holders keep
        a working graph); its indexes are closed, to open again on the new store."""
        self.host.close_indexes(tenant)

        def move() -> None:
            (self.host.store_path(tenant).with_name("graph.vacuum") / ".complete").touch()
            self.finish_vacuum(tenant)

        graph = self.host.open_graph(tenant)
        if graph is not None:
            graph.reopen(move)
            return
        gc.collect()  # every RocksDB handle closed before the directories move
        move()

    def finish_vacuum(self, tenant: str) -> None:
        """Complete a vacuum a crash interrupted: a complete fresh copy replaces the old store."""
        path = self.host.store_path(tenant)
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
        mark = self.host.store_path(tenant).parent / ERASING
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
        host = self.host
        async with host.exclusive(tenant):
            started = time.perf_counter()
            quads = 0
            graph = host.get(tenant)  # an erasure a crash cut short is completed by this
            path = host.store_path(tenant)
            if host.memory:
                quads = await self._erase_memory(tenant, graph)
            elif graph is not None and (path.parent / ERASING).exists():
                source = graph.store
                del graph
                quads = await asyncio.to_thread(_copy, source, path.with_name("graph.vacuum"))
                del source
                self._swap(tenant)
            graph = None
            if host.cached:
                await asyncio.to_thread(self._snapshot_rewritten, tenant)
            purged = await asyncio.to_thread(self._purge_copies, tenant)
            self.erased(tenant)
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
        self.host.close_indexes(tenant)  # its text index is dropped next; it opens again from the graph
        fresh, source = Store(), graph.store

        def copy() -> None:  # the quads are read on the thread that writes them
            fresh.bulk_extend(source.quads_for_pattern(None, None, None, None))

        await asyncio.to_thread(copy)
        with graph._writing():
            graph.store = fresh
            graph.reasoner = graph.knowledge.engine.reasoner()  # none of the old strings kept
        if (snapshots := self.host.snapshots) is not None:
            await asyncio.to_thread(snapshots.take, tenant, graph)
        return len(fresh)

    def finish_erasure(self, tenant: str) -> None:
        """An erasure, synchronously: for a store opened with the mark a crash left."""
        if self.host.exists(tenant):
            self.vacuum(tenant)
        if self.host.cached:
            self._snapshot_rewritten(tenant)
        self._purge_copies(tenant)
        self.erased(tenant)

    def _snapshot_rewritten(self, tenant: str) -> None:
        """A store on disk that is a cache of its snapshots, rewritten without the words, is
        snapshotted before the older snapshots are purged: one durable copy of the tenant's events
        is left (the commits past the forget wait for it), and none holds the words."""
        snapshots, path = self.host.snapshots, self.host.store_path(tenant)
        if snapshots is None or not path.is_dir():
            return
        graph = self.host.open_graph(tenant) or opened(tenant, lambda: TenantGraph(path, self.host.knowledge))
        if graph.checkpoint() is not None:
            snapshots.take(tenant, graph)
        del graph
        gc.collect()  # a graph opened here lets go of the store before the projector opens it

    def _purge_copies(self, tenant: str) -> int:
        """The erasure's copies on disk besides the store: the text index and the snapshots (how
        many were deleted)."""
        shutil.rmtree(self.host.store_path(tenant).parent / "text", ignore_errors=True)
        snapshots = self.host.snapshots
        if snapshots is None:
            return 0
        if self.host.memory or self.host.cached:  # the newest, taken after the forget (and the
            # store's rewrite), is the tenant's one durable copy
            newest = snapshots.newest(tenant)
            return snapshots.purge(tenant, keep=newest.offset if newest is not None else None)
        return snapshots.purge(tenant)

    def erased(self, tenant: str) -> None:
        """The listeners drop their copies (on the caller's thread, the event loop's); the mark goes."""
        for listener in self.host.erasure_listeners:
            listener(tenant)
        (self.host.store_path(tenant).parent / ERASING).unlink(missing_ok=True)


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
