"""Pseudo-relevance feedback: the words of the best hits, added to the BM25 query.

Measured on REALTALK (docs/performance.md): it lifts R@5 and R@10 on both splits at some cost in
MRR, so it is on by default at a small weight (``Ranking.feedback_weight``).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from engram.projections.bm25 import terms

if TYPE_CHECKING:
    from engram.projections.recall import Ranking

# Words too common in conversation to say what the best hits are about (after stemming).
STOPWORDS = frozenset(
    terms(
        "a about after again all also am an and any are as at be because been before being but by can "
        "could did do does doing don for from get got had has have having he her here hers him his how i "
        "if in into is it its just know like me more most my no not now of off oh ok okay on one only or "
        "other our out over really she should so some such than that the their them then there these "
        "they this those through to too up us very was we well were what when where which while who why "
        "will with would yeah yes you your think going go want thing things lot much time good great"
    )
)


def feedback(
    q: str,
    texts: Sequence[tuple[str, float]],
    doc_freq: Callable[[Sequence[str]], list[int]],
    total: int,
    ranking: Ranking,
) -> dict[str, float]:
    """RM3-like expansion: the words of the best hits (``texts``: text, score), each weighed by its
    share of each hit's words times the hit's score, times its rarity in the index; the
    ``feedback_terms`` best, not already in ``q``, boosted up to ``feedback_weight``."""
    asked = set(terms(q))
    mass = sum(score for _, score in texts) or 1.0
    weight: dict[str, float] = {}
    for text, score in texts:
        words = [t for t in terms(text) if t not in STOPWORDS and len(t) > 2 and not t.isdigit()]
        for t in set(words):
            if t not in asked:
                weight[t] = weight.get(t, 0.0) + score / mass * words.count(t) / len(words)
    if not weight or total <= 0:
        return {}
    found = dict(zip(weight, doc_freq(list(weight)), strict=True))
    scored = {t: w * math.log(1 + total / (1 + found[t])) for t, w in weight.items()}
    best = heapq.nlargest(ranking.feedback_terms, scored.items(), key=lambda kv: kv[1])
    top = best[0][1] if best else 0.0
    return {t: ranking.feedback_weight * w / top for t, w in best if w > 0} if top > 0 else {}
