"""What every embedder is: the ``Embedder`` protocol, and the row checks and normalisation they share."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

F32 = np.float32


@runtime_checkable
class Embedder(Protocol):
    """What the write path and the vector index need from an embedding model."""

    name: str
    """The model id stored beside each vector, so vectors of different models are never mixed."""
    dim: int

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """float32 array of shape (len(texts), dim) whose rows have unit L2 norm (cosine = dot)."""
        ...

    def count_tokens(self, text: str) -> int:
        """Tokens in ``text`` by this embedder's own tokenizer (see each class for the exact rule)."""
        ...


def check_texts(texts: Sequence[str]) -> list[str]:
    # A str is itself a Sequence[str]: embedding it would silently embed each character.
    if isinstance(texts, str):
        raise TypeError("embed() takes a sequence of texts, not a single str: wrap it in a list")
    return list(texts)


def normalise_rows(x: np.ndarray) -> np.ndarray:
    """In place, as torch.nn.functional.normalize(p=2, eps=1e-12) which sentence-transformers uses."""
    norms = np.sqrt(np.einsum("ij,ij->i", x, x))
    np.maximum(norms, F32(1e-12), out=norms)
    x /= norms[:, None]
    return x
