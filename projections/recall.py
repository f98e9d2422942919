"""Recall: structure decides what is eligible, similarity decides what is on top.

Candidates come from both indexes (BM25 and vectors); the graph then decides eligibility (visible
to the principal, active, not expired, importance and confidence floors, kind and class filters);
the survivors are ranked by a fusion of the two similarities, blended with recency and a
forgetting curve (against the tenant's clock, not the server's) and gated by confidence and the
class's weight; the best hits then bring in their neighbours (what was said just before and after
them in the same conversation), which share part of their score; the whole is packed to a token
budget. Every term of a hit's score is in its ``signals``.
The fusion (``projections.fusion``) and the feedback (``projections.feedback``) are modules of their
own.
"""

from __future__ import annotations

import functools
import heapq
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from engram.projections import query_time
from engram.projections.bm25 import K1, B
from engram.projections.feedback import feedback
from engram.projections.fusion import BM25_WEIGHT, Fusion, fuse
from engram.projections.indexes import TenantIndexes
from engram.projections.ontology import Ontology
from engram.projections.vector_index import QueryVector, resolve
from engram.projections.visibility import MemoryFacts, Principal, held_at
from engram.schemas import vocabulary as v

POOL = 100  # candidates from each index (50 measured 1-2 points lower on REALTALK)
# Measured on REALTALK dev against the tenant's clock: 0.15 each (the weights before the clock was
# the tenant's, when a history older than a few months scored zero on both) cost 2.4 points of R@10
# (0.543 against 0.567 without them); a small weight still orders equals by age.
RELEVANCE, RECENCY, FORGETTING = 0.93, 0.035, 0.035
RECENCY_HALF_LIFE_DAYS = 30.0
STABILITY_DAYS = 30.0  # forgetting: a Medium memory keeps e^-1 of its strength after this long


@dataclass(frozen=True)
class Ranking:
    """The default ranking's knobs, each chosen by measurement on REALTALK's dev split
    (``bench/recall_quality.py``, which also reports each one's contribution: an ablation sets a
    knob to its "off" value). Not a request parameter: one ranking, measured, for everyone."""

    bm25_weight: float = BM25_WEIGHT
    relevance: float = RELEVANCE
    recency: float = RECENCY
    forgetting: float = FORGETTING
    context_hits: int = 3  # the best hits whose conversation neighbours are brought in (0: off)
    context_window: int = 1  # neighbours on each side, in valid time, in the same conversation
    context_share: float = 0.2  # of the hit's score a neighbour gets (halved per step away)
    pool: int = POOL  # candidates from each index before fusion (50, 200, 300: no better)
    feedback_docs: int = 3  # pseudo-relevance feedback: the best hits whose words expand BM25 (0: off)
    feedback_terms: int = 10  # words added to the BM25 query
    feedback_weight: float = 0.2  # boost of the best added word (the query's own words have 1)
    time_boost: float = 0.2  # added for a valid time inside what the query names ("on 5 Jan 2024")
    time_slack_days: float = 3.0  # the boost falls to 0 this far outside it
    bm25_k1: float = K1  # BM25's term-frequency saturation (tantivy's own: 1.2)
    bm25_b: float = B  # BM25's length normalisation (tantivy's own: 0.75)


DEFAULT_RANKING = Ranking()


@dataclass(frozen=True)
class RecallQuery:
    q: str
    limit: int = 10
    budget_tokens: int | None = None
    kinds: frozenset[str] = frozenset()
    classes: frozenset[str] = frozenset()  # IRIs; a memory of a subclass matches
    min_importance: int = 2
    min_confidence: float = 0.0
    fusion: Fusion = "default"
    valid_at: datetime | None = None  # valid time: memories that held then, superseded since or not


@dataclass(frozen=True)
class Hit:
    memory: MemoryFacts
    score: float
    signals: Mapping[str, float | None] = field(default_factory=dict)
    tokens: int = 0


def eligible(m: MemoryFacts, query: RecallQuery, who: Principal) -> bool:
    return (
        (query.valid_at is not None or (m.active and not m.expired))  # else: held_at, in search
        and m.importance >= query.min_importance
        and m.confidence >= query.min_confidence
        and (not query.kinds or m.kind in query.kinds)
        and (not query.classes or bool(query.classes & m.classes))
        and m.visible_to(who)  # the one call: last
    )


@functools.lru_cache(maxsize=200_000)
def _epoch(when: str) -> float | None:
    try:
        return datetime.fromisoformat(when.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _age_days(when: str | None, now: datetime) -> float:
    return _age(when, now.timestamp())


def _age(when: str | None, now_s: float) -> float:
    then = _epoch(when) if when else None
    if then is None:
        return 0.0
    return max(0.0, (now_s - then) / 86_400)


def recency(m: MemoryFacts, now: datetime) -> float:
    return _recency(_age_days(m.valid_from, now))


def forgetting(m: MemoryFacts, now: datetime) -> float:
    return _forgetting(_age_days(m.valid_from, now), m.importance)


def _recency(age_days: float) -> float:
    return 0.5 ** (age_days / RECENCY_HALF_LIFE_DAYS)


def _forgetting(age_days: float, importance: int) -> float:
    """Ebbinghaus retention; more important memories are forgotten more slowly (2x per tier)."""
    return math.exp(-age_days / (STABILITY_DAYS * 2.0 ** (importance - v.Importance.MEDIUM)))


def rank(
    candidates: Sequence[MemoryFacts],
    bm25: Mapping[str, float],
    vector: Mapping[str, float],
    method: Fusion,
    now: datetime,
    class_weight: Callable[[MemoryFacts], float],
    top: int | None = None,
    ranking: Ranking = DEFAULT_RANKING,
    spans: Sequence[tuple[float, float]] = (),
    extra: Mapping[str, Mapping[str, float | None]] | None = None,
) -> list[Hit]:
    """Candidates best first (the ``top`` best only, when given: the rest are never shown).

    ``spans``: the valid-time intervals the query names (epoch seconds); ``extra``: more signals
    per candidate id, shown as they are."""
    keep = {m.id for m in candidates}
    relevance = fuse(
        {k: s for k, s in bm25.items() if k in keep},
        {k: s for k, s in vector.items() if k in keep},
        method,
        ranking.bm25_weight,
    )
    now_s = now.timestamp()
    blended = method == "default"
    timed = blended and bool(spans) and ranking.time_boost > 0
    slack = ranking.time_slack_days * 86_400
    scored = []
    for m in candidates:
        rel = relevance.get(m.id)
        if rel is None:
            continue
        age = _age(m.valid_from, now_s)
        rec, fgt = _recency(age), _forgetting(age, m.importance)
        score = _blend(ranking, rel, rec, fgt, m, class_weight) if blended else rel
        tb = 0.0 if timed else None
        if timed:
            tb = ranking.time_boost * query_time.boost(
                _epoch(m.valid_from) if m.valid_from else None, spans, slack
            )
            score += tb * m.confidence * class_weight(m)
        scored.append((-score, m.id, m, rec, fgt, tb))  # ids are unique: the comparison stops there
    best = heapq.nsmallest(top, scored) if top is not None else sorted(scored)
    out = []
    for neg, mid, m, rec, fgt, tb in best:
        signals: dict[str, float | None] = {
            "bm25": bm25.get(mid),
            "vector": vector.get(mid),
            "recency": rec,
            "forgetting": fgt,
            "time": tb,
            "bm25_query": bm25.get(mid),
        }
        if extra is not None:
            signals.update(extra.get(mid, {}))
        out.append(Hit(m, -neg, signals))
    return out


def _blend(
    ranking: Ranking,
    rel: float,
    rec: float,
    fgt: float,
    m: MemoryFacts,
    weight: Callable[[MemoryFacts], float],
) -> float:
    return (
        (ranking.relevance * rel + ranking.recency * rec + ranking.forgetting * fgt)
        * m.confidence
        * weight(m)
    )


def with_context(
    hits: Sequence[Hit],
    neighbours: Callable[[str], Sequence[str]],
    admit: Callable[[Sequence[str]], list[MemoryFacts]],
    now: datetime,
    class_weight: Callable[[MemoryFacts], float],
    ranking: Ranking,
) -> list[Hit]:
    """The hits again, each of the best ``context_hits`` lending ``context_share`` of its score
    (halved per step away) to its conversation neighbours: the turn that answers a question often
    sits next to the one that matches it. A neighbour that was no candidate is brought in (when
    ``admit`` lets it: eligible, visible) with the borrowed score alone; ``signals.context`` says
    how much of a hit's score was borrowed."""
    lent: dict[str, float] = {}
    for hit in hits[: ranking.context_hits]:
        for i, other in enumerate(neighbours(hit.memory.id)):
            share = ranking.context_share * hit.score / 2 ** (i // 2)
            lent[other] = max(lent.get(other, 0.0), share)
    if not lent:
        return list(hits)
    known = {h.memory.id for h in hits}
    now_s = now.timestamp()
    out = [
        Hit(h.memory, h.score + lent.get(h.memory.id, 0.0), {**h.signals, "context": lent.get(h.memory.id)})
        for h in hits
    ]
    for m in admit([i for i in lent if i not in known]):
        age = _age(m.valid_from, now_s)
        signals = {
            "bm25": None,
            "vector": None,
            "recency": _recency(age),
            "forgetting": _forgetting(age, m.importance),
            "time": None,
            "bm25_query": None,
        }
        out.append(Hit(m, lent[m.id], {**signals, "context": lent[m.id]}))
    out.sort(key=lambda h: (-h.score, h.memory.id))
    return out


def clock_of(indexes: TenantIndexes) -> datetime:
    """The tenant's clock (``TenantIndexes.clock``); the wall clock only for a tenant with no memory
    and no clock, where there is nothing to rank."""
    found = indexes.clock()
    then = _epoch(found) if found else None
    return datetime.fromtimestamp(then, UTC) if then is not None else datetime.now(UTC)


def pack(
    hits: Sequence[Hit],
    limit: int,
    budget: int | None,
    count: Callable[[str], int],
    cached: Callable[[str, str, Callable[[str], int]], int] | None = None,
) -> list[Hit]:
    """The best hits, at most ``limit``, whose tokens (label + content) fit the budget together."""
    out: list[Hit] = []
    used = 0
    for hit in hits:
        if len(out) >= limit:
            break
        text = f"{hit.memory.label}\n{hit.memory.content}"
        tokens = cached(hit.memory.id, text, count) if cached is not None else count(text)
        if budget is not None and used + tokens > budget:
            continue  # a smaller one further down may still fit
        used += tokens
        out.append(Hit(hit.memory, hit.score, hit.signals, tokens))
    return out


def search(
    indexes: TenantIndexes,
    query: RecallQuery,
    who: Principal,
    query_vector: QueryVector,
    *,
    class_weight: Callable[[MemoryFacts], float],
    now: datetime | None = None,
    top: int | None = None,
    ranking: Ranking = DEFAULT_RANKING,
) -> list[Hit]:
    """The search itself: BM25 and vector candidates, eligible ones only, fused and ranked (lean
    facts: no text yet), against the tenant's clock unless ``now`` is given."""
    now = now or clock_of(indexes)
    pool = max(ranking.pool, 5 * query.limit)
    total = max(indexes.text.count(), indexes.vectors.count())

    def admit(memory_ids: Sequence[str]) -> list[MemoryFacts]:
        found = [f for f in indexes.candidates(memory_ids) if eligible(f, query, who)]
        if query.valid_at is not None:
            found = [f for f in found if held_at(indexes.graph, f.id, query.valid_at)]
        return found

    def text_search(k: int, extra: Mapping[str, float] | None = None) -> dict[str, float]:
        return dict(indexes.text.search(query.q, k, extra, k1=ranking.bm25_k1, b=ranking.bm25_b))

    while True:
        bm25 = text_search(pool) if query.fusion != "vector" else {}
        query_vector = resolve(query_vector)  # after the BM25 search, which it may overlap
        vector = {}
        if query_vector is not None and query.fusion != "bm25":
            vector = dict(indexes.vectors.search(query_vector, pool))
            if query.fusion != "vector":  # a BM25 candidate HNSW missed gets its exact cosine, not "worst"
                vector.update(
                    indexes.vectors.similarities(query_vector, [i for i in bm25 if i not in vector])
                )
        candidates = admit(list(dict.fromkeys([*bm25, *vector])))
        if len(candidates) >= query.limit or pool >= total or not (bm25 or vector):
            break
        pool *= 4  # most candidates were not eligible: look deeper
    default = query.fusion == "default"
    spans = [(a.timestamp(), b.timestamp()) for a, b in query_time.intervals(query.q, now)] if default else []
    extra = None
    if default and ranking.feedback_docs > 0 and bm25:
        first = rank(candidates, bm25, vector, "default", now, class_weight, top=ranking.feedback_docs,
                     ranking=ranking, spans=spans)  # fmt: skip
        texts = [(indexes.display(h.memory).content, h.score) for h in first]
        expansion = feedback(query.q, texts, indexes.text.doc_freq, indexes.text.count(), ranking)
        if expansion:
            original = bm25
            bm25 = text_search(pool, expansion)
            if query_vector is not None:
                vector.update(
                    indexes.vectors.similarities(query_vector, [i for i in bm25 if i not in vector])
                )
            known = {m.id for m in candidates}
            candidates += admit([i for i in bm25 if i not in known])
            extra = {m.id: {"bm25_query": original.get(m.id)} for m in candidates}
    if not default or ranking.context_hits <= 0 or ranking.context_share <= 0:
        return rank(candidates, bm25, vector, query.fusion, now, class_weight, top=top, ranking=ranking,
                    spans=spans, extra=extra)  # fmt: skip
    hits = rank(
        candidates, bm25, vector, query.fusion, now, class_weight, ranking=ranking, spans=spans, extra=extra
    )
    window = ranking.context_window
    hits = with_context(hits, lambda m: indexes.neighbours(m, window), admit, now, class_weight, ranking)
    return hits[:top] if top is not None else hits


def recall(
    indexes: TenantIndexes,
    query: RecallQuery,
    who: Principal,
    query_vector: QueryVector,
    *,
    count_tokens: Callable[[str], int],
    class_weight: Callable[[MemoryFacts], float],
    now: datetime | None = None,
    ranking: Ranking = DEFAULT_RANKING,
) -> list[Hit]:
    """The search, then the answer: the best hits with their text, packed to the token budget."""
    # the whole memory only for those that may be returned (a budget may skip some of them)
    shown = 3 * query.limit if query.budget_tokens is not None else query.limit
    hits = search(
        indexes, query, who, query_vector, class_weight=class_weight, now=now, top=shown, ranking=ranking
    )
    full = [Hit(indexes.display(h.memory), h.score, h.signals) for h in hits]
    return pack(full, query.limit, query.budget_tokens, count_tokens, indexes.tokens)


_WEIGHTS: dict[str, Callable[[MemoryFacts], float]] = {}


def class_weights(ontology: Ontology) -> Callable[[MemoryFacts], float]:
    """A memory's class weight: ``:recallWeight`` of its most specific class that declares one (1.0).

    Built once per ontology: every recall asks for it."""
    if (found := _WEIGHTS.get(ontology.digest)) is not None:
        return found
    declared = {
        t.subject.value: float(t.object.value)
        for t in ontology.triples
        if t.predicate.value == v.ENGRAM + "recallWeight"
    }

    @functools.lru_cache(maxsize=4096)  # by class set: memories share a few combinations
    def of_classes(classes: frozenset[str]) -> float:
        found = [(len(ontology.superclasses.get(c, ())), declared[c]) for c in classes if c in declared]
        return max(found)[1] if found else 1.0

    def weight(m: MemoryFacts) -> float:
        return of_classes(m.classes)

    _WEIGHTS[ontology.digest] = weight
    return weight
