"""A tenant's BM25 index (tantivy): one document per memory, its label, content, class and values.

tantivy fixes BM25's k1 and b (1.2 and 0.75) and its Python binding exposes neither, so the text is
stored too and tantivy's best are scored again with the k1 and b measured best on REALTALK's dev
split (``K1``, ``B``): short conversational turns gain from a weaker length normalisation.

The index holds text only; whether a memory may be recalled (active, not expired, visible) is read
from the graph at query time, so a supersession or a clock tick never has to touch it. Writes are
buffered and committed once per batch: a tantivy commit costs ~20 ms whatever it carries.
"""

from __future__ import annotations

import logging
import math
import re
import shutil
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path

import tantivy
from engram.projections.checkpoint import IndexCheckpoint

log = logging.getLogger(__name__)

WRITER_HEAP_BYTES = 15_000_000  # tantivy's minimum per writer thread
# A rebuild writes the whole index in one segment rather than one per 15 MB of heap: searching one
# segment measured 0.62 / 1.7 ms p50 / p95 against 1.0 / 2.5 for eight (100k memories, top 100).
REBUILD_HEAP_BYTES = 400_000_000
# Everything but letters and digits is a separator, so no query syntax (field:, +, -, quotes) can
# reach tantivy's parser; the words AND/OR/NOT are lower-cased so they stay words.
NON_WORD = re.compile(r"[\W_]+", re.UNICODE)
# BM25 as the search scores it (tantivy's own: 1.2 and 0.75). Measured on REALTALK dev (R@10, the
# default ranking): b 0.75 → 0.3 +1.3 points, MRR +4.4; k1 0.6-1.2 within 0.3 of each other.
K1, B = 0.9, 0.3
AVGDL_SAMPLE = 1_000  # documents whose length estimates the average (again when the count moves 10%)
TERMS_CACHE = 20_000  # documents whose term counts are kept for rescoring (~1 KB each); then emptied


def _schema() -> tantivy.Schema:
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("id", stored=True, tokenizer_name="raw")
    # stored (since schema 2): BM25 is scored again from it with this module's k1 and b
    builder.add_text_field("text", stored=True, tokenizer_name="en_stem")
    return builder.build()


def _open(path: Path) -> tantivy.Index:
    """The index at ``path``; one of another schema (an older build's) is deleted with its
    checkpoint, so the tenant's indexes rebuild it from the graph as they open."""
    try:
        return tantivy.Index(_schema(), path=str(path), reuse=True)
    except ValueError as error:
        if "schema does not match" not in str(error):
            raise
    log.info("%s: a text index of another schema: deleted, to be rebuilt from the graph", path)
    shutil.rmtree(path)
    path.mkdir(parents=True)
    return tantivy.Index(_schema(), path=str(path), reuse=True)


# The "en_stem" tokenizer the text field is indexed with, to find the terms of a text as the index
# holds them (pseudo-relevance feedback weighs the terms of the best hits).
ANALYZER = (
    tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
    .filter(tantivy.Filter.remove_long(40))
    .filter(tantivy.Filter.lowercase())
    .filter(tantivy.Filter.stemmer("english"))
    .build()
)


def terms(text: str) -> list[str]:
    """``text``'s terms as the index holds them (lower-cased, stemmed)."""
    return list(ANALYZER.analyze(text))


def query_words(q: str) -> str:
    return NON_WORD.sub(" ", q).strip().lower()


class TextIndex:
    """Upserts by memory id, committed with the log position they reflect."""

    def __init__(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.index = _open(path)
        self.checkpoint = IndexCheckpoint(path / "checkpoint.json")
        self._avgdl: tuple[int, float] | None = None  # (documents when estimated, average length)
        # memory id -> (length, term counts) of the committed text; the ids written since the last
        # commit leave it when the commit makes their new text searchable (a search in between
        # still finds, and may cache, the old)
        self._terms: dict[str, tuple[int, Counter[str]]] = {}
        self._written: set[str] = set()
        self._writer: tantivy.IndexWriter | None = None
        self._dirty = False
        self._bulk = False

    def _w(self, heap: int = WRITER_HEAP_BYTES) -> tantivy.IndexWriter:
        if self._writer is None:
            self._writer = self.index.writer(heap, 1)
        return self._writer

    def upsert(self, memory_id: str, text: str) -> None:
        w = self._w()
        w.delete_documents_by_term("id", memory_id)
        w.add_document(tantivy.Document(id=memory_id, text=text))
        self._written.add(memory_id)
        self._dirty = True

    def delete(self, memory_id: str) -> None:
        self._w().delete_documents_by_term("id", memory_id)
        self._written.add(memory_id)
        self._dirty = True

    def clear(self) -> None:
        """Empty the index, for a rebuild: the writer until the next commit has a rebuild's heap."""
        self.close()  # one writer per index: the small one goes first
        self._w(REBUILD_HEAP_BYTES).delete_all_documents()
        self._dirty = True
        self._bulk = True

    @property
    def dirty(self) -> bool:
        return self._dirty

    def commit(self) -> None:
        """Durable and searchable; may run in a worker thread (tantivy releases the GIL)."""
        if self._dirty:
            self._w().commit()
            self._dirty = False
        bulk = self._bulk
        if self._bulk:  # back to the small writer: the rebuild's heap is not kept
            self._writer, self._bulk = None, False
        self.index.reload()
        if bulk:
            self._terms.clear()
        for memory_id in self._written:
            self._terms.pop(memory_id, None)
        self._written.clear()

    def close(self) -> None:
        if self._writer is not None:
            if self._dirty:
                self._writer.rollback()
            self._writer = None

    def count(self) -> int:
        return int(self.index.searcher().num_docs)

    def doc_freq(self, words: Sequence[str]) -> list[int]:
        """How many memories hold each of ``words`` (indexed, stemmed terms)."""
        searcher = self.index.searcher()
        return [int(searcher.doc_freq("text", w)) for w in words]

    def average_length(self, searcher: tantivy.Searcher) -> float:
        """The average document length in terms: exact while the index holds at most
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

    def search(
        self, q: str, k: int, extra: Mapping[str, float] | None = None, *, k1: float = K1, b: float = B
    ) -> list[tuple[str, float]]:
        """The ``k`` best (memory id, BM25 score) for ``q``, best first; ``extra`` adds indexed terms
        with a boost each (the expansion of pseudo-relevance feedback), scored beside ``q``. tantivy
        finds the ``k`` best by its BM25; they are scored again, and ordered, by ``bm25``'s with ``k1``
        and ``b``."""
        words = query_words(q)
        if (not words and not extra) or k <= 0:
            return []
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
        hits = searcher.search(query, k, count=False).hits  # no total: ~0.1 ms less
        weights = dict.fromkeys(terms(words), 1.0) if words else {}
        for term, weight in (extra or {}).items():
            weights[term] = weights.get(term, 0.0) + weight
        total = int(searcher.num_docs)
        idf = {
            t: math.log(1 + (total - n + 0.5) / (n + 0.5))
            for t in weights
            for n in [searcher.doc_freq("text", t)]
        }
        avgdl = self.average_length(searcher)
        out = []
        for _, addr in hits:
            doc = searcher.doc(addr)
            memory_id = str(doc.get_first("id"))
            found = self._terms.get(memory_id)
            if found is None:
                if len(self._terms) >= TERMS_CACHE:
                    self._terms.clear()
                held = terms(doc.get_first("text") or "")
                found = self._terms[memory_id] = (len(held), Counter(held))
            out.append((memory_id, bm25(*found, weights, idf, avgdl, k1, b)))
        out.sort(key=lambda hit: -hit[1])
        return out


def bm25(
    length: int,
    tf: Mapping[str, int],
    weights: Mapping[str, float],
    idf: Mapping[str, float],
    avgdl: float,
    k1: float = K1,
    b: float = B,
) -> float:
    """Okapi BM25 of a document (its length and term counts) for weighted query terms."""
    norm = k1 * (1 - b + b * length / avgdl)
    # the few terms both hold, in a fixed order (a set's order would vary the sum's last digits)
    return sum(
        weights[t] * idf[t] * tf[t] * (k1 + 1) / (tf[t] + norm) for t in sorted(weights.keys() & tf.keys())
    )
