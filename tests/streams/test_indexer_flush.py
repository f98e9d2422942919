"""The indexer reports a write as searchable before tantivy commits it (the text index's overlay),
commits it later off the write's path, and a stop leaves the on-disk index complete: a store
reopened after the stop has nothing to catch up."""

from __future__ import annotations

import asyncio
import contextlib
import gc
from pathlib import Path

from engram.projections.progress import Progress
from engram.projections.stores import return_freed_memory
from engram.projections.tenant_graph import Status
from engram.schemas.events import Position
from engram.streams.indexer import Indexer
from engram.streams.pipeline import embed_missing

from tests.factories import event, remembered
from tests.projections.test_indexes import EMB, stores


def test_a_write_is_reported_searchable_before_its_commit_and_committed_by_the_stop(tmp_path: Path) -> None:
    tenant_stores = stores(tmp_path)
    indexed = Progress()
    indexer = Indexer(tenant_stores, indexed)
    seen: dict[str, object] = {}

    async def go() -> None:
        await indexer.start()
        graph = tenant_stores.get("t", create=True)
        assert graph is not None and tenant_stores.indexes("t") is not None  # open before the writes
        for offset, (mid, words) in enumerate([("cap", "meta budget cap"), ("tone", "no emoji")]):
            ev = embed_missing(
                [(0, event("MemoryRemembered", remembered(mid, content=words), tenant="t"))], EMB
            )
            outcome = graph.apply(ev[0][1], Position(0, offset, 1_700_000_000_000 + offset))
            assert outcome.status is Status.APPLIED
            indexer.submit("t", Position(0, offset), outcome, (mid,))
        handled = await indexed.wait_for(0, 1, 10)
        assert handled is not None
        indexes = tenant_stores.indexes("t")
        assert indexes is not None
        seen["found"] = [i for i, _ in indexes.text.search("meta emoji", 10)]
        seen["on_disk"] = indexes.text.index.searcher().num_docs
        seen["checkpoint"] = indexes.text.checkpoint.read()
        await indexer.stop()
        seen["after_stop"] = indexes.text.index.searcher().num_docs
        seen["checkpoint_after"] = indexes.text.checkpoint.read()

    try:
        asyncio.run(go())
    finally:
        tenant_stores.close()
    assert sorted(seen["found"]) == ["cap", "tone"]  # type: ignore[arg-type]
    assert seen["on_disk"] == 0 and seen["checkpoint"] is None  # reported before any commit
    assert seen["after_stop"] == 2 and seen["checkpoint_after"] == Position(0, 1)
    assert indexer.flushes == 1 and indexer.trims == 0  # one commit, within TRIM_AFTER_S of the start
    gc.collect()
    reopened = stores(tmp_path)
    try:
        indexes = reopened.indexes("t")
        assert indexes is not None and indexes.text.count() == 2 and not indexes.text.dirty
    finally:
        reopened.close()


def test_the_flusher_commits_an_overlay_once_it_is_old_enough(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr("engram.streams.indexer.FLUSH_AFTER_S", 0.2)
    monkeypatch.setattr("engram.projections.text_index.FLUSH_AFTER_S", 0.2)
    monkeypatch.setattr("engram.streams.indexer.TRIM_AFTER_S", 0.01)
    tenant_stores = stores(tmp_path)
    indexer = Indexer(tenant_stores, Progress())
    counts: list[int] = []

    async def go() -> None:
        await indexer.start()
        graph = tenant_stores.get("t", create=True)
        assert graph is not None and tenant_stores.indexes("t") is not None  # open before the writes
        ev = embed_missing([(0, event("MemoryRemembered", remembered("cap"), tenant="t"))], EMB)
        indexer.submit(
            "t", Position(0, 0), graph.apply(ev[0][1], Position(0, 0, 1_700_000_000_000)), ("cap",)
        )
        indexes = None
        for _ in range(100):
            await asyncio.sleep(0.05)
            indexes = tenant_stores.indexes("t")
            if indexes is not None and indexes.text.index.searcher().num_docs == 1:
                break
        assert indexes is not None
        counts.append(indexes.text.index.searcher().num_docs)
        for _ in range(100):  # the flusher rests after the commit, then trims
            if indexer.trims or not return_freed_memory():
                break
            await asyncio.sleep(0.05)
        await indexer.stop()

    try:
        asyncio.run(go())
    finally:
        tenant_stores.close()
    assert counts == [1] and indexer.flushes == 1  # by the flusher, not the stop
    # and glibc was given back what the commit freed, once (the stop committed nothing)
    assert indexer.trims == (1 if return_freed_memory() else 0)


def _tantivy_writer_threads() -> int:
    """This process's threads that a tantivy writer runs (its indexer and its merge threads)."""
    names = []
    for task in Path("/proc/self/task").iterdir():
        with contextlib.suppress(OSError):
            names.append((task / "comm").read_text().strip())
    return sum(n.startswith(("merge_thread", "thrd-tantivy-in", "segment_updater")) for n in names)


def test_an_idle_writer_is_closed_and_the_next_write_opens_one_again(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A writer's threads end once its index is idle for WRITER_IDLE_S; a later write is committed
    and searchable as before (a new writer, the old one's segments kept)."""
    monkeypatch.setattr("engram.streams.indexer.FLUSH_AFTER_S", 0.2)
    monkeypatch.setattr("engram.projections.text_index.FLUSH_AFTER_S", 0.2)
    monkeypatch.setattr("engram.projections.text_index.WRITER_IDLE_S", 0.3)
    tenant_stores = stores(tmp_path)
    indexer = Indexer(tenant_stores, Progress())
    seen: dict[str, object] = {}

    async def write(offset: int, mid: str, words: str) -> None:
        graph = tenant_stores.get("t", create=True)
        assert graph is not None
        ev = embed_missing([(0, event("MemoryRemembered", remembered(mid, content=words), tenant="t"))], EMB)
        outcome = graph.apply(ev[0][1], Position(0, offset, 1_700_000_000_000 + offset))
        indexer.submit("t", Position(0, offset), outcome, (mid,))

    async def until(check) -> bool:  # type: ignore[no-untyped-def]
        for _ in range(200):
            if check():
                return True
            await asyncio.sleep(0.05)
        return False

    async def go() -> None:
        await indexer.start()
        assert tenant_stores.get("t", create=True) is not None
        indexes = tenant_stores.indexes("t")
        assert indexes is not None
        await write(0, "cap", "meta budget cap")
        seen["committed"] = await until(lambda: indexes.text.index.searcher().num_docs == 1)
        seen["writer_threads_while_writing"] = _tantivy_writer_threads()
        seen["released"] = await until(lambda: indexer.writers_released == 1)
        seen["writer_threads_idle"] = _tantivy_writer_threads()
        await write(1, "tone", "no emoji in meta copy")
        seen["again"] = await until(lambda: indexes.text.index.searcher().num_docs == 2)
        seen["found"] = sorted(i for i, _ in indexes.text.search("meta", 10))
        await indexer.stop()

    try:
        asyncio.run(go())
    finally:
        tenant_stores.close()
    assert seen["committed"] and seen["released"] and seen["again"]
    # its indexing thread, its segment updater and four merge threads (measured relative: another
    # test's leftover writer in this process would count in both)
    assert seen["writer_threads_while_writing"] - seen["writer_threads_idle"] >= 6  # type: ignore[operator]
    assert seen["found"] == ["cap", "tone"]


def test_an_evicted_tenant_staged_for_a_commit_opens_again(tmp_path: Path) -> None:
    """A tenant closed while its text index waited for a commit (an eviction between batches) is let
    go by the indexer: it held the closed index, its graph and the store's lock for ever, and the
    tenant's next open found its own store locked."""
    tenant_stores = stores(tmp_path)
    indexer = Indexer(tenant_stores, Progress())

    async def go() -> None:
        graph = tenant_stores.get("t", create=True)
        assert graph is not None
        ev = embed_missing([(0, event("MemoryRemembered", remembered("cap"), tenant="t"))], EMB)
        outcome = graph.apply(ev[0][1], Position(0, 0, 1_700_000_000_000))
        indexer.submit("t", Position(0, 0), outcome, ("cap",))
        await indexer._pass()  # staged: its overlay waits for a commit
        assert "t" in indexer._staged
        del graph, outcome
        tenant_stores._close("t")  # evicted
        await indexer.flush()
        assert "t" not in indexer._staged

    try:
        asyncio.run(go())
        gc.collect()
        again = tenant_stores.get("t")  # StoreLocked while the indexer held the old graph
        assert again is not None and again.handled() == 1
        del again
    finally:
        tenant_stores.close()
