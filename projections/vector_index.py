"""A tenant's vector index (hnswlib, cosine): one point per memory embedded by the configured model.

The vectors themselves live in the graph (their own named graph, written with the memory in the
same transaction), so this index is a cache: it is saved now and then, not per event, and a
store opened with the index behind its graph catches up from the graph. Labels are a 63-bit hash
of the memory id, so no mapping has to be kept in step with it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeAlias

import hnswlib
import numpy as np
from engram.projections.checkpoint import IndexCheckpoint

EF_SEARCH = 64
EF_CONSTRUCTION = 100
M = 16


QueryVector: TypeAlias = "np.ndarray | Callable[[], np.ndarray | None] | None"
"""A query's vector, or a function that waits for it (so embedding can overlap other work)."""


def resolve(vector: QueryVector) -> np.ndarray | None:
    return vector() if callable(vector) else vector


def label_of(memory_id: str) -> int:
    return int.from_bytes(hashlib.blake2b(memory_id.encode(), digest_size=8).digest(), "big") >> 1


class VectorIndex:
    def __init__(self, path: Path, dim: int) -> None:
        path.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.dim = dim
        self.file = path / f"hnsw-{dim}.bin"
        self.checkpoint = IndexCheckpoint(path / f"checkpoint-{dim}.json")
        self.ids: dict[int, str] = {}
        self._labels: dict[str, int] = {}  # the reverse of ids: no hash per lookup
        self.unsaved = 0
        self.index = self._load()
        self._exact: ExactVectors | None = None  # made on the first exact lookup

    def _new(self, capacity: int = 1024) -> hnswlib.Index:
        index = hnswlib.Index(space="cosine", dim=self.dim)
        index.init_index(max_elements=capacity, ef_construction=EF_CONSTRUCTION, M=M)
        index.set_ef(EF_SEARCH)
        index.set_num_threads(1)
        return index

    def _load(self) -> hnswlib.Index:
        if self.file.exists() and self.checkpoint.read() is not None:
            try:
                index = hnswlib.Index(space="cosine", dim=self.dim)
                index.load_index(str(self.file))
                index.set_ef(EF_SEARCH)
                index.set_num_threads(1)
                return index
            except RuntimeError:
                self.checkpoint.write(None)  # unreadable: rebuilt from the graph
        return self._new()

    def known(self, ids: dict[int, str]) -> None:
        """The memory ids behind the labels (read from the graph when the store opens)."""
        self.ids = ids
        self._labels = {mid: label for label, mid in ids.items()}
        self._exact = None

    def upsert(self, memory_id: str, vector: np.ndarray) -> None:
        label = label_of(memory_id)
        if self.index.element_count >= self.index.max_elements:
            self.index.resize_index(max(1024, 2 * self.index.max_elements))
        self.index.add_items(vector.reshape(1, -1), [label])
        self.ids[label] = memory_id
        self._labels[memory_id] = label
        self.unsaved += 1
        if self._exact is not None:
            self._exact.put(label, vector)

    def delete(self, memory_id: str) -> None:
        label = label_of(memory_id)
        self._labels.pop(memory_id, None)
        if self.ids.pop(label, None) is not None:
            with contextlib.suppress(RuntimeError):  # never added (no vector of this model)
                self.index.mark_deleted(label)
            self.unsaved += 1

    def clear(self) -> None:
        self.index = self._new()
        self.ids = {}
        self._labels = {}
        self.unsaved += 1
        self._exact = None

    def count(self) -> int:
        return len(self.ids)

    def save(self) -> None:
        """Write the index file; the caller records the checkpoint it reflects after this."""
        tmp = self.file.with_suffix(".tmp")
        self.index.save_index(str(tmp))
        os.replace(tmp, self.file)
        self.unsaved = 0

    def search(self, vector: np.ndarray, k: int) -> list[tuple[str, float]]:
        """The ``k`` nearest (memory id, cosine similarity), best first."""
        k = min(k, len(self.ids))
        if k <= 0:
            return []
        self.index.set_ef(max(EF_SEARCH, k))
        labels, distances = self.index.knn_query(vector.reshape(1, -1), k=k)
        ids = self.ids
        return [
            (memory_id, 1.0 - dist)
            for lab, dist in zip(labels[0].tolist(), distances[0].tolist(), strict=True)
            if (memory_id := ids.get(lab)) is not None
        ]

    def similarities(self, vector: np.ndarray, memory_ids: list[str]) -> dict[str, float]:
        """Exact cosine similarity of ``vector`` to these memories' points (those it holds)."""
        labels = self._labels
        known = [(mid, label) for mid in dict.fromkeys(memory_ids) if (label := labels.get(mid)) is not None]
        if not known:
            return {}
        sims = self.exact().cosines(vector, [label for _, label in known])
        return {mid: s for (mid, _), s in zip(known, sims.tolist(), strict=True)}

    def exact(self) -> ExactVectors:
        """The points as one matrix, made on first use (or when the store is warmed)."""
        if self._exact is None:
            self._exact = ExactVectors.of(self.index, list(self.ids), self.dim)
        return self._exact

    def vector(self, memory_id: str) -> np.ndarray | None:
        label = label_of(memory_id)
        if label not in self.ids:
            return None
        return self.index.get_items([label], return_type="numpy")[0].astype(np.float32)


class ExactVectors:
    """The index's points as one unit-length matrix, for exact cosines of chosen memories.

    hnswlib hands points out one Python list at a time (~15 µs each); a recall asks for ~100 of
    them per query. This copy costs 4·dim bytes per memory (150 MB at 100k memories of 384
    dimensions) while the tenant is open, and is made on the first exact lookup.
    """

    def __init__(self, dim: int) -> None:
        self.rows: dict[int, int] = {}
        self.matrix = np.zeros((1024, dim), dtype=np.float32)

    @classmethod
    def of(cls, index: hnswlib.Index, labels: list[int], dim: int) -> ExactVectors:
        out = cls(dim)
        for start in range(0, len(labels), 4096):
            part = labels[start : start + 4096]
            points = np.asarray(index.get_items(part, return_type="list"), dtype=np.float32)
            for label, point in zip(part, points, strict=True):
                out.put(label, point)
        return out

    def put(self, label: int, vector: np.ndarray) -> None:
        row = self.rows.get(label)
        if row is None:
            row = self.rows[label] = len(self.rows)
            if row >= len(self.matrix):
                self.matrix = np.concatenate([self.matrix, np.zeros_like(self.matrix)])
        norm = float(np.linalg.norm(vector))
        self.matrix[row] = vector / norm if norm > 0 else vector

    def cosines(self, vector: np.ndarray, labels: list[int]) -> np.ndarray:
        norm = float(np.linalg.norm(vector)) or 1.0
        rows = self.rows
        return self.matrix[[rows[label] for label in labels]] @ (vector.astype(np.float32) / norm)
