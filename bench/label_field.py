"""The label as a BM25 field of its own, measured on the shipped ranking (issue 26; not kept).

The text index holds one field (label, content, class and values) and rescores tantivy's best with
BM25 k1 0.9 / b 0.3. Whether a separate label field with its own weight would rank REALTALK better
is measured here without changing the index: tantivy's top 300 of the shipped field are scored
again from per-field term counts (each field's own document frequencies and average length) and
cut to the pool, then ranked by the default ``recall`` as the route does. Variants (``--variants``):

* ``text``: the shipped field, recomputed (a check: it must match the shipped figures);
* ``add:W``: the shipped field's BM25 + W times the label field's;
* ``own:W``: the label only in its own field: BM25 of content and class + W times the label's;
* ``bm25f:W``: BM25F, the label's term counts and length weighed W inside one saturation.

Prints one JSON object (R@5, R@10, MRR per type, per split and variant); progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from engram.projections.bm25 import K1, B, bm25, query_words, terms
from engram.schemas.events import Event
from engram.streams.embedder import load_embedder

from bench.recall import embedded_events
from bench.recall_quality import build, question_vectors, table
from engram.settings import load_settings
from tests.realtalk import SPLITS, load_chats

RETRIEVED = 300  # tantivy's best rescored per search (then cut to what recall asked for)
Field = tuple[Counter[str], int]  # term counts, length


class Fields:
    """One tenant's memories as three BM25 fields: label, the rest (content, class), both (shipped)."""

    def __init__(self, events: list[Event]) -> None:
        self.docs: dict[str, tuple[Field, Field, Field]] = {}
        for e in events:
            p = e.payload
            label, rest = terms(p.label), terms(f"{p.content}\nMemory")
            both = terms(f"{p.label}\n{p.content}\nMemory")
            self.docs[p.memory_id] = (
                (Counter(label), len(label)),
                (Counter(rest), len(rest)),
                (Counter(both), len(both)),
            )
        self.df: list[Counter[str]] = [Counter(), Counter(), Counter()]
        self.avgdl: list[float] = []
        for f in range(3):
            for doc in self.docs.values():
                self.df[f].update(doc[f][0].keys())
            self.avgdl.append(sum(doc[f][1] for doc in self.docs.values()) / len(self.docs))

    def idf(self, f: int, words: Mapping[str, float]) -> dict[str, float]:
        n = len(self.docs)
        return {t: math.log(1 + (n - self.df[f][t] + 0.5) / (self.df[f][t] + 0.5)) for t in words}

    def score(self, memory_id: str, variant: str, weights: Mapping[str, float], k1: float, b: float) -> float:
        kind, _, w = variant.partition(":")
        weight = float(w or 0)
        label, rest, both = self.docs[memory_id]

        def field(f: int, doc: Field) -> float:
            return bm25(doc[1], doc[0], weights, self.idf(f, weights), self.avgdl[f], k1, b)

        if kind == "text":
            return field(2, both)
        if kind == "add":
            return field(2, both) + weight * field(0, label)
        if kind == "own":
            return field(1, rest) + weight * field(0, label)
        if kind == "bm25f":
            tf = Counter({t: rest[0][t] + weight * label[0][t] for t in rest[0].keys() | label[0].keys()})
            avgdl = self.avgdl[1] + weight * self.avgdl[0]
            return bm25(rest[1] + weight * label[1], tf, weights, self.idf(2, weights), avgdl, k1, b)  # type: ignore[arg-type]
        raise ValueError(f"unknown variant {variant!r}")


def rescored(
    fields: Fields, search: Callable[..., list[tuple[str, float]]], variant: str
) -> Callable[..., Any]:
    """``TextIndex.search`` with its hits scored again by ``variant``."""

    def run(
        q: str, k: int, extra: Mapping[str, float] | None = None, *, k1: float = K1, b: float = B
    ) -> list[tuple[str, float]]:
        words = query_words(q)
        weights = dict.fromkeys(terms(words), 1.0) if words else {}
        for term, w in (extra or {}).items():
            weights[term] = weights.get(term, 0.0) + w
        hits = [
            (mid, fields.score(mid, variant, weights, k1, b))
            for mid, _ in search(q, max(k, RETRIEVED), extra, k1=k1, b=b)
        ]
        hits.sort(key=lambda h: -h[1])
        return hits[:k]

    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--split", choices=[*SPLITS, "both"], default="both")
    ap.add_argument("--variants", default="text,add:0.1,add:0.5,own:0,own:1,bm25f:0.5,bm25f:2")
    # float32 MiniLM: the embedder of the quality tables these figures are compared with
    ap.add_argument("--embedder", default="minilm", help="ENGRAM_EMBEDDER's names (default minilm)")
    args = ap.parse_args()
    base = load_settings()
    splits = list(SPLITS) if args.split == "both" else [args.split]
    chats = {name: load_chats(names=SPLITS[name]) for name in splits}
    every = [c for name in splits for c in chats[name]]
    embedder = load_embedder(args.embedder)
    events = embedded_events(every, embedder, base.cache_dir)
    vectors = question_vectors(every, embedder, base.cache_dir)
    fields = {c.tenant: Fields([e for e in events if e.tenant == c.tenant]) for c in every}
    out: dict[str, Any] = {"benchmark": "label_field", "retrieved": RETRIEVED}
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
        stores = build(Path(tmp) / "tenants", events, embedder)
        shipped = {}
        for c in every:
            indexes = stores.indexes(c.tenant)
            assert indexes is not None
            shipped[c.tenant] = indexes.text.search
        for name in splits:
            rows: dict[str, Any] = {"shipped": table(stores, chats[name], vectors, embedder)}
            for variant in args.variants.split(","):
                for c in chats[name]:
                    indexes = stores.indexes(c.tenant)
                    assert indexes is not None
                    indexes.text.search = rescored(fields[c.tenant], shipped[c.tenant], variant)  # type: ignore[method-assign]
                rows[variant] = table(stores, chats[name], vectors, embedder)
                print(f"[label field] {name} {variant}: {rows[variant]['all']}", file=sys.stderr, flush=True)
            for c in chats[name]:
                indexes = stores.indexes(c.tenant)
                assert indexes is not None
                indexes.text.search = shipped[c.tenant]  # type: ignore[method-assign]
            out[name] = rows
        stores.close()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
