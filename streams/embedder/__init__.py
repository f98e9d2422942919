"""Text embedders: the vectors memories carry, and the model id that travels with them in events.

The default is all-MiniLM-L6-v2 run as a pure-numpy BERT forward pass, so embedding needs neither
torch nor a network (``minilm``, ``bert``, ``blas``); ``minilm-int8`` runs the same weights with int8
projections on onnxruntime, ~3-4x faster, under a model id of its own (``minilm_int8``).
``HashingEmbedder`` is a weight-free stand-in for tests and benches (``hashing``). This module is
the registry: ``load_embedder`` turns a configured name into an embedder, and every name the
package offers is importable from here.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import numpy as np
from engram.streams.embedder.base import Embedder
from engram.streams.embedder.hashing import DEFAULT_HASHING_DIM, HashingEmbedder
from engram.streams.embedder.minilm import MINILM_ID, MINILM_PACKAGE, MiniLM, minilm_model_dir
from engram.streams.embedder.minilm_int8 import MINILM_INT8_ID, MiniLMInt8

__all__ = [
    "DEFAULT_HASHING_DIM",
    "MINILM_ID",
    "MINILM_INT8_ID",
    "MINILM_PACKAGE",
    "Embedder",
    "HashingEmbedder",
    "MiniLM",
    "MiniLMInt8",
    "embedding_text",
    "load_embedder",
    "memory_embedding",
    "minilm_model_dir",
]

_MINILM_NAMES = frozenset({"minilm", "all-minilm-l6-v2", MINILM_ID.lower()})
_MINILM_INT8_NAMES = frozenset({"minilm-int8", "all-minilm-l6-v2-int8", MINILM_INT8_ID.lower()})
_HASHING = re.compile(r"(?:engram/)?hashing(?:-(\d+))?")


def load_embedder(name: str) -> Embedder:
    """An embedder by configured name; the ``name`` of any embedder it returns is accepted back."""
    key = name.strip().lower()
    if key in _MINILM_NAMES:
        return MiniLM()
    if key in _MINILM_INT8_NAMES:
        return MiniLMInt8()
    if match := _HASHING.fullmatch(key):
        return HashingEmbedder(int(match.group(1)) if match.group(1) else DEFAULT_HASHING_DIM)
    raise ValueError(
        f"unknown embedder {name!r}; choose one of: 'minilm' (or {MINILM_ID!r}), "
        f"'minilm-int8' (or {MINILM_INT8_ID!r}), "
        f"'hashing' (dim {DEFAULT_HASHING_DIM}) or 'hashing-<dim>'"
    )


def embedding_text(label: str, content: str) -> str:
    """What a memory's vector is computed from, the same at every producer."""
    return f"{label}\n{content}"


def memory_embedding(embedder: Embedder) -> Callable[[Sequence[tuple[str, str]]], np.ndarray]:
    """Vectors of memories given as (label, content), as a write embeds them: what the indexes use
    to embed a revised memory again, or a tenant after the model changed."""

    def embed(memories: Sequence[tuple[str, str]]) -> np.ndarray:
        return embedder.embed([embedding_text(label, content) for label, content in memories])

    return embed
