"""A tenant's vector index (hnswlib, cosine): one point per memory embedded by the configured model.

The vectors themselves live in the graph (their own named graph, written with the memory in the
same transaction), so this index is a cache: it is saved now and then, not per event, and a
store opened with the index behind its graph catches up from the graph. Labels are a 63-bit hash
of the memory id, so no mapping has to be kept in step with it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
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
# What an hnswlib index holds in memory (``resident_bytes``): 65,536 label locks (a std::mutex
# each) whatever its size, and per point of its capacity the vector, its level-0 links and label
HNSW_FIXED_BYTES = 65_536 * 40


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
        # the memory ids behind its labels, saved with it: reading them from the graph's vectors
        # took 2.7 s at 100k memories, most of a cold tenant's first read
        self.ids_file = path / f"ids-{dim}.json"
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

    def saved_ids(self) -> dict[int, str] | None:
        """The ids saved with the index file, of the labels it holds; None without a readable file.
        A crash between the two files' replacements leaves ids of a newer save: those of points
        the index lacks are left out, and the labels they lack are of deleted points; the index's
        checkpoint is older than both, so the catch-up refreshes every memory changed since."""
        try:
            pairs = json.loads(self.ids_file.read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(pairs, list):
            return None
        held = set(self.index.get_ids_list())
        return {label: mid for label, mid in pairs if label in held}

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

    def resident_bytes(self) -> int:
        """What the index holds in memory, estimated from its capacity (the ids map beside it)."""
        per_point = 4 * self.dim + 4 * (2 * M + 1) + 8 + 8
        return HNSW_FIXED_BYTES + self.index.max_elements * per_point + 120 * len(self.ids)

    def save(self) -> None:
        """Write the index file; the caller records the checkpoint it reflects after this."""
        tmp = self.file.with_suffix(".tmp")
        self.index.save_index(str(tmp))
        self.save_ids()
        os.replace(tmp, self.file)
        self.unsaved = 0

    def save_ids(self) -> None:
        """Write the ids behind the labels (with the index file, or for one saved without them)."""
        tmp = self.ids_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(list(self.ids.items()), separators=(",", ":")))
        os.replace(tmp, self.ids_file)

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
        """The points asked for so far as one matrix (each fetched from hnswlib on first use)."""
        if self._exact is None:
            self._exact = ExactVectors(self.dim, self.index)
        return self._exact

    def vector(self, memory_id: str) -> np.ndarray | None:
        label = label_of(memory_id)
        if label not in self.ids:
            return None
        return self.index.get_items([label], return_type="numpy")[0].astype(np.float32)


class ExactVectors:
    """The index's points asked for so far as one unit-length matrix, for exact cosines of chosen
    memories.

    hnswlib hands points out one Python list at a time (~15 µs each); a recall asks for ~100 of
    them per query, mostly the same ones. Each is fetched once, on its first use, and kept at
    4·dim bytes (at most 150 MB at 100k memories of 384 dimensions) while the tenant is open: a
    copy of every point made as a store opened cost 3.6 s at 100k, before its first read.
    """

    def __init__(self, dim: int, index: hnswlib.Index) -> None:
        self.index = index
        self.rows: dict[int, int] = {}
        self.matrix = np.zeros((1024, dim), dtype=np.float32)

    def put(self, label: int, vector: np.ndarray) -> None:
        row = self.rows.get(label)
        if row is None:
            row = self.rows[label] = len(self.rows)
            if row >= len(self.matrix):
                self.matrix = np.concatenate([self.matrix, np.zeros_like(self.matrix)])
        norm = float(np.linalg.norm(vector))
        self.matrix[row] = vector / norm if norm > 0 else vector

    def cosines(self, vector: np.ndarray, labels: list[int]) -> np.ndarray:
        rows = self.rows
        missing = [label for label in dict.fromkeys(labels) if label not in rows]
        if missing:
            points = np.asarray(self.index.get_items(missing, return_type="list"), dtype=np.float32)
            for label, point in zip(missing, points, strict=True):
                self.put(label, point)
        norm = float(np.linalg.norm(vector)) or 1.0
        return self.matrix[[rows[label] for label in labels]] @ (vector.astype(np.float32) / norm)
