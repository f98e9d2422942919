"""Fusion of the two candidate lists (BM25 and vectors) into one relevance in [0, 1].

Pure functions of the two lists' scores. The methods other than the shipped one stay selectable,
because the choice was made by measurement (bench/recall.py, bench/recall_quality.py) and has to
stay measurable.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Literal

Fusion = Literal["default", "bm25", "vector", "rrf", "minmax", "zscore"]
FUSIONS: tuple[Fusion, ...] = ("default", "bm25", "vector", "rrf", "minmax", "zscore")
RRF_K = 60
BM25_WEIGHT = 0.5  # of the normalised-score fusion; the vector similarity has the rest


def _minmax(scores: Mapping[str, float]) -> dict[str, float]:
    if not scores:
        return {}
    lo, hi = min(scores.values()), max(scores.values())
    return {k: (s - lo) / (hi - lo) if hi > lo else 1.0 for k, s in scores.items()}


def _zscore(scores: Mapping[str, float]) -> dict[str, float]:
    if len(scores) < 2:
        return dict.fromkeys(scores, 0.0)
    mean, sd = statistics.fmean(scores.values()), statistics.pstdev(scores.values())
    return {k: (s - mean) / sd if sd > 0 else 0.0 for k, s in scores.items()}


def _rrf(*rankings: Sequence[str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for ranking in rankings:
        for rank, key in enumerate(ranking, start=1):
            out[key] = out.get(key, 0.0) + 1.0 / (RRF_K + rank)
    return out


def fuse(
    bm25: Mapping[str, float], vector: Mapping[str, float], method: Fusion, bm25_weight: float = BM25_WEIGHT
) -> dict[str, float]:
    """Relevance in [0, 1] per candidate id; a candidate one list lacks counts as its worst there."""
    keys = set(bm25) | set(vector)
    if method == "bm25":
        return {k: s for k, s in _minmax(bm25).items()}
    if method == "vector":
        return {k: s for k, s in _minmax(vector).items()}
    if method == "rrf":
        ranked = _rrf(sorted(bm25, key=lambda k: -bm25[k]), sorted(vector, key=lambda k: -vector[k]))
        return _minmax(ranked)
    if method == "zscore":
        zb, zv = _zscore(bm25), _zscore(vector)
        floor_b, floor_v = min(zb.values(), default=0.0), min(zv.values(), default=0.0)
        raw = {k: bm25_weight * zb.get(k, floor_b) + (1 - bm25_weight) * zv.get(k, floor_v) for k in keys}
        return _minmax(raw)
    nb, nv = _minmax(bm25), _minmax(vector)  # minmax, and the shipped default
    if not nb or not nv:  # one signal only (no vector index, or no word matched): it alone decides
        return nb or nv
    return {k: bm25_weight * nb.get(k, 0.0) + (1 - bm25_weight) * nv.get(k, 0.0) for k in keys}
