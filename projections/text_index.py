"""A tenant's BM25 index (tantivy): one document per memory, its label, content, class and values.

tantivy fixes BM25's k1 and b (1.2 and 0.75) and its Python binding exposes neither, so the text is
stored too and tantivy's best are scored again with the k1 and b measured best on REALTALK's dev
split (``bm25.K1``, ``bm25.B``): short conversational turns gain from a weaker length normalisation.

The index holds text only; whether a memory may be recalled (active, not expired, visible) is read
from the graph at query time, so a supersession or a clock tick never has to touch it.

A tantivy commit costs 7-20 ms of CPU whatever it carries (a RAM index's too: the fsync is the
smaller part), so it is kept off the write path: a write is searchable at once from a small
near-real-time overlay in memory (the memories changed since the last commit, with their terms,
scanned and scored beside tantivy's hits, masking their older on-disk version), and the overlay is
committed to tantivy now and then in a worker thread (``begin_flush``/``write_flush``/``end_flush``).
The on-disk index and its checkpoint trail by at most that: what a crash loses of the overlay is
caught up from the graph when the index opens (``TenantIndexes.catch_up``).
"""

from __future__ import annotations

import logging
import math
import shutil
import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import tantivy
from engram.projections.bm25 import K1, B, bm25, query_words, terms
from engram.projections.checkpoint import IndexCheckpoint
from engram.schemas.events import Position

log = logging.getLogger(__name__)

WRITER_HEAP_BYTES = 15_000_000  # tantivy's minimum per writer thread
# A rebuild writes the whole index in one segment rather than one per 15 MB of heap: searching one
# segment measured 0.62 / 1.7 ms p50 / p95 against 1.0 / 2.5 for eight (100k memories, top 100).
REBUILD_HEAP_BYTES = 400_000_000
AVGDL_SAMPLE = 1_000  # documents whose length estimates the average (again when the count moves 10%)
TERMS_CACHE = 20_000  # documents whose term counts are kept for rescoring (~1 KB each); then emptied
DOC_BYTES = 1024  # a document's text and term counts held in memory (the overlay, that cache)
# The overlay is committed to tantivy once it holds this many memories or its oldest change is this
# old: a commit costs 7-20 ms whatever it holds, and scanning the overlay ~0.3 µs per memory and term
FLUSH_DOCS = 1_000
FLUSH_AFTER_S = 1.0
# A writer holds five threads (its indexer, its segment updater, four merge threads less one) and
# its heap; it is closed once the index has written nothing for this long, and opened again (~2 ms)
# by the next write. An idle open tenant then holds one tantivy thread (its directory's watcher).
WRITER_IDLE_S = 10.0


def _schema() -> tantivy.Schema:
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("id", stored=True, tokenizer_name="raw")
    # stored (since schema 2): BM25 is scored again from it with this module's k1 and b
    builder.add_text_field("text", stored=True, tokenizer_name="en_stem")
    return builder.build()


def _open(path: Path) -> tantivy.Index:
    """The index at ``path``; one of another schema (an older build's) is deleted with its
    checkpoint, so the tenant's indexes rebuild it from the graph as they open. Its searcher moves
    only on ``reload`` (not on commit): the overlay's corrections hold against the searcher they
    were computed for."""
    try:
        index = tantivy.Index(_schema(), path=str(path), reuse=True)
    except ValueError as error:
        if "schema does not match" not in str(error):
            raise
        log.info("%s: a text index of another schema: deleted, to be rebuilt from the graph", path)
        shutil.rmtree(path)
        path.mkdir(parents=True)
        index = tantivy.Index(_schema(), path=str(path), reuse=True)
    index.config_reader("Manual", 0)
    return index


@dataclass(frozen=True)
class Doc:
    """A memory's text as BM25 counts it."""

    text: str
    length: int
    tf: Counter[str]


def as_doc(text: str) -> Doc:
    held = terms(text)
    return Doc(text, len(held), Counter(held))


@dataclass
class Change:
    """A memory changed since the last commit: ``new`` its text now (None: deleted), ``base`` what
    the on-disk index (as last reloaded) holds of it (None: nothing), so counts can be corrected."""

    new: Doc | None
    base: Doc | None


@dataclass(frozen=True)
class Flush:
    """The overlay's changes being committed, and the log position they reflect."""

    changes: dict[str, Change]
    position: Position | None


class TextIndex:
    """Upserts by memory id, searchable at once (the overlay), committed with the log position they
    reflect."""

    def __init__(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.index = _open(path)
        self.checkpoint = IndexCheckpoint(path / "checkpoint.json")
        self._avgdl: tuple[int, float] | None = None  # (documents when estimated, average length)
        # memory id -> (length, term counts) of the committed text; an id leaves it when a commit
        # makes its new text the committed one
        self._terms: dict[str, tuple[int, Counter[str]]] = {}
        self._written: set[str] = set()  # written straight to tantivy by a rebuild
        self._writer: tantivy.IndexWriter | None = None
        self._used = 0.0  # when the writer was last asked for
        self._dirty = False
        self._bulk = False
        # the overlay: changes not yet committed (``_recent``), and those a flush is committing
        self._recent: dict[str, Change] = {}
        self._flushing: dict[str, Change] = {}
        self._since: float | None = None  # when the oldest change of ``_recent`` was made
        self._position: Position | None = None  # what ``_recent`` reflects (``stage``)
        self._lock = threading.Lock()  # the writer: a flush's thread against ``close`` and ``clear``
        self._closed = False

    def _w(self, heap: int = WRITER_HEAP_BYTES) -> tantivy.IndexWriter:
        if self._writer is None:
            self._writer = self.index.writer(heap, 1)
        self._used = time.monotonic()
        return self._writer

    def writer_idle(self, after_s: float | None = None) -> bool:
        """Whether a writer is open with nothing to write and unused for ``after_s`` (by default
        ``WRITER_IDLE_S``)."""
        return (
            self._writer is not None
            and not (self._dirty or self._bulk or self._recent or self._flushing)
            and time.monotonic() - self._used >= (WRITER_IDLE_S if after_s is None else after_s)
        )

    def release_writer(self) -> bool:
        """Close an idle writer once its merges are done (they are waited for, so call it from a
        worker thread): its threads end and its heap is freed. False: it was in use again."""
        with self._lock:
            if self._closed or not self.writer_idle(0.0):
                return False
            writer, self._writer = self._writer, None
            assert writer is not None
            # the merges finish (else a short-lived writer's segments would never be merged) and
            # the writer's lock file is released before the next writer can be opened
            writer.wait_merging_threads()
            return True

    # -- writing ----------------------------------------------------------------------------
    def upsert(self, memory_id: str, text: str) -> None:
        if self._bulk:
            w = self._w()
            w.delete_documents_by_term("id", memory_id)
            w.add_document(tantivy.Document(id=memory_id, text=text))
            self._written.add(memory_id)
            self._dirty = True
        else:
            self._change(memory_id, as_doc(text))

    def delete(self, memory_id: str) -> None:
        if self._bulk:
            self._w().delete_documents_by_term("id", memory_id)
            self._written.add(memory_id)
            self._dirty = True
        else:
            self._change(memory_id, None)

    def _change(self, memory_id: str, new: Doc | None) -> None:
        prior = self._recent.get(memory_id) or self._flushing.get(memory_id)
        base = prior.base if prior is not None else self._committed(memory_id)
        if not self._recent:
            self._since = time.monotonic()
        self._recent[memory_id] = Change(new, base)

    def _committed(self, memory_id: str) -> Doc | None:
        """The memory's text as the on-disk index's searcher holds it."""
        searcher = self.index.searcher()
        query = tantivy.Query.term_query(self.index.schema, "id", memory_id)
        hits = searcher.search(query, 1, count=False).hits
        return as_doc(searcher.doc(hits[0][1]).get_first("text") or "") if hits else None

    def stage(self, position: Position | None) -> None:
        """The overlay now reflects the log up to ``position`` (the checkpoint its commit writes)."""
        self._position = position

    def clear(self) -> None:
        """Empty the index, for a rebuild: the writer until the next commit has a rebuild's heap."""
        with self._lock:
            self._drop_writer()  # one writer per index: the small one goes first
            self._recent.clear()
            self._since = None
            self._w(REBUILD_HEAP_BYTES).delete_all_documents()
            self._dirty = True
            self._bulk = True

    def resident_bytes(self) -> int:
        """What the index holds in memory beyond tantivy's mapped files, estimated: the overlay's
        documents and the cached term counts (~1 KiB each), and an open writer's heap."""
        docs = len(self._recent) + len(self._flushing) + len(self._terms)
        return DOC_BYTES * docs + (WRITER_HEAP_BYTES if self._writer is not None else 0)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def dirty(self) -> bool:
        return self._dirty or bool(self._recent)

    def flush_due(self) -> bool:
        """Whether the overlay should be committed: large or old enough, and no flush under way."""
        if not self._recent or self._flushing or self._closed:
            return False
        assert self._since is not None
        return len(self._recent) >= FLUSH_DOCS or time.monotonic() - self._since >= FLUSH_AFTER_S

    def begin_flush(self) -> Flush | None:
        """The overlay's changes, to commit (``write_flush``, in a thread; then ``end_flush``);
        searches go on reading them from the overlay meanwhile. None: nothing to commit, or a flush
        is already under way."""
        if not self._recent or self._flushing or self._closed:
            return None
        self._flushing, self._recent, self._since = self._recent, {}, None
        return Flush(self._flushing, self._position)

    def write_flush(self, job: Flush) -> bool:
        """Commit ``job`` to tantivy with its checkpoint (may run in a worker thread: tantivy releases
        the GIL); False if the index was closed first. The searcher moves only at ``end_flush``."""
        with self._lock:
            if self._closed:
                return False
            w = self._w()
            for memory_id, change in job.changes.items():
                w.delete_documents_by_term("id", memory_id)
                if change.new is not None:
                    w.add_document(tantivy.Document(id=memory_id, text=change.new.text))
            w.commit()
            if job.position is not None:
                self.checkpoint.write(job.position)
            return True

    def end_flush(self, job: Flush, written: bool) -> None:
        """The committed changes leave the overlay as the searcher moves to them (both at once, on
        the caller's thread); unwritten ones stay in it for the next flush."""
        if self._closed:
            return
        self._flushing = {}
        if not written:
            for memory_id, change in job.changes.items():
                self._recent.setdefault(memory_id, change)
            if self._recent and self._since is None:
                self._since = time.monotonic()
            return
        self.index.reload()
        for memory_id, change in job.changes.items():
            newer = self._recent.get(memory_id)
            if newer is not None:
                newer.base = change.new
            self._terms.pop(memory_id, None)

    def commit(self) -> None:
        """Durable and searchable, now, on this thread (opening, a rebuild, a stop); not while a
        flush is under way."""
        if self._flushing:
            raise RuntimeError(f"{self.path}: a flush is under way")
        if self._dirty:
            self._w().commit()
            self._dirty = False
        bulk = self._bulk
        if self._bulk:  # back to the small writer: the rebuild's heap is not kept
            self._writer, self._bulk = None, False
        job = self.begin_flush()
        if job is not None:
            self.end_flush(job, self.write_flush(job))
        else:
            self.index.reload()
        if bulk:
            self._terms.clear()
        for memory_id in self._written:
            self._terms.pop(memory_id, None)
        self._written.clear()

    def _drop_writer(self) -> None:
        if self._writer is not None:
            if self._dirty:
                self._writer.rollback()
                self._dirty = False
            self._writer = None

    def close(self) -> None:
        """Waits for a flush's commit; what is left in the overlay is caught up from the graph when
        the index next opens (its checkpoint is behind it)."""
        with self._lock:
            self._closed = True
            self._drop_writer()
        self._recent.clear()

    # -- reading ----------------------------------------------------------------------------
    def _overlay(self) -> dict[str, Change]:
        return {**self._flushing, **self._recent} if self._flushing else self._recent

    def count(self) -> int:
        overlay = self._overlay()
        moved = sum((c.new is not None) - (c.base is not None) for c in overlay.values())
        return int(self.index.searcher().num_docs) + moved

    def doc_freq(self, words: Sequence[str]) -> list[int]:
        """How many memories hold each of ``words`` (indexed, stemmed terms)."""
        return self._doc_freq(self.index.searcher(), words, self._overlay())

    def _doc_freq(
        self, searcher: tantivy.Searcher, words: Sequence[str], overlay: Mapping[str, Change]
    ) -> list[int]:
        """Live documents per term: tantivy's own ``doc_freq`` still counts a replaced or deleted
        document until a background merge drops it, so it depended on when merges ran (a live
        index and its replay scored the same query differently). A count query skips them
        (~0.07 ms for a term in 11k of 100k documents)."""
        out = []
        schema = self.index.schema
        for w in words:
            n = searcher.search(tantivy.Query.term_query(schema, "text", w), 1, count=True).count
            for c in overlay.values():
                n += (c.new is not None and w in c.new.tf) - (c.base is not None and w in c.base.tf)
            out.append(n)
        return out

    def average_length(self, searcher: tantivy.Searcher) -> float:
        """The average document length in terms on disk: exact while the index holds at most
        ``AVGDL_SAMPLE`` documents (counted again whenever their number changes), then estimated
        from the first ``AVGDL_SAMPLE`` and again when the count has moved by a tenth (BM25 with b
        0.3 barely feels the estimate's error)."""
        docs = int(searcher.num_docs)
        known = self._avgdl[0] if self._avgdl is not None else None
        if (
            known is None
            or (docs != known and min(docs, known) <= AVGDL_SAMPLE)
            or abs(docs - known) > 0.1 * known
        ):
            sample = searcher.search(tantivy.Query.all_query(), AVGDL_SAMPLE, count=False).hits
            lengths = []
            for _, addr in sample:
                doc = searcher.doc(addr)
                found = self._terms.get(str(doc.get_first("id")))
                lengths.append(found[0] if found is not None else len(terms(doc.get_first("text") or "")))
            self._avgdl = (docs, max(1.0, sum(lengths) / len(lengths)) if lengths else 1.0)
        return self._avgdl[1]

    def _average(self, searcher: tantivy.Searcher, overlay: Mapping[str, Change]) -> float:
        """``average_length`` with the overlay's documents in place of their committed versions."""
        if not overlay:
            return self.average_length(searcher)
        docs = int(searcher.num_docs)
        length = self.average_length(searcher) * docs if docs else 0.0
        for c in overlay.values():
            if c.new is not None:
                docs, length = docs + 1, length + c.new.length
            if c.base is not None:
                docs, length = docs - 1, length - c.base.length
        return max(1.0, length / docs) if docs > 0 else 1.0

    def search(
        self, q: str, k: int, extra: Mapping[str, float] | None = None, *, k1: float = K1, b: float = B
    ) -> list[tuple[str, float]]:
        """The ``k`` best (memory id, BM25 score) for ``q``, best first; ``extra`` adds indexed terms
        with a boost each (the expansion of pseudo-relevance feedback), scored beside ``q``. tantivy
        finds the ``k`` best by its BM25 (the overlay's memories scored as tantivy would, their
        committed versions skipped); they are scored again, and ordered, by ``bm25``'s with ``k1``
        and ``b``."""
        words = query_words(q)
        if (not words and not extra) or k <= 0:
            return []
        overlay = self._overlay()
        searcher = self.index.searcher()
        query = self.index.parse_query(words, ["text"]) if words else None
        if extra:
            schema = self.index.schema
            should = [] if query is None else [(tantivy.Occur.Should, query)]
            for term, weight in extra.items():
                term_query = tantivy.Query.term_query(schema, "text", term)
                should.append((tantivy.Occur.Should, tantivy.Query.boost_query(term_query, weight)))
            query = tantivy.Query.boolean_query(should)
        assert query is not None
        masked = sum(c.base is not None for c in overlay.values())  # hits that may be skipped
        hits = searcher.search(query, k + masked, count=False).hits  # no total: ~0.1 ms less
        weights = dict.fromkeys(terms(words), 1.0) if words else {}
        for term, weight in (extra or {}).items():
            weights[term] = weights.get(term, 0.0) + weight
        total = int(searcher.num_docs) + sum(
            (c.new is not None) - (c.base is not None) for c in overlay.values()
        )
        held = dict(zip(weights, self._doc_freq(searcher, list(weights), overlay), strict=True))
        idf = {t: math.log(1 + (total - n + 0.5) / (n + 0.5)) for t, n in held.items()}
        avgdl = self._average(searcher, overlay)
        found: list[tuple[float, str, tuple[int, Counter[str]]]] = []  # (tantivy's score, id, counts)
        for score, addr in hits:
            if len(found) == k:
                break
            doc = searcher.doc(addr)
            memory_id = str(doc.get_first("id"))
            if memory_id in overlay:
                continue
            counts = self._terms.get(memory_id)
            if counts is None:
                if len(self._terms) >= TERMS_CACHE:
                    self._terms.clear()
                text = terms(doc.get_first("text") or "")
                counts = self._terms[memory_id] = (len(text), Counter(text))
            found.append((score, memory_id, counts))
        fresh = [
            (
                bm25(c.new.length, c.new.tf, weights, idf, avgdl, 1.2, 0.75),
                memory_id,
                (c.new.length, c.new.tf),
            )
            for memory_id, c in overlay.items()
            if c.new is not None and not weights.keys().isdisjoint(c.new.tf)
        ]
        if fresh:  # tantivy's order (its k1 1.2 and b 0.75) picks the k, as one index would
            found = sorted(found + sorted(fresh, key=lambda f: f[1]), key=lambda f: -f[0])[:k]
        out = [(memory_id, bm25(*counts, weights, idf, avgdl, k1, b)) for _, memory_id, counts in found]
        out.sort(key=lambda hit: -hit[1])
        return out
