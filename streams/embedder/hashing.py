"""Signed feature hashing: deterministic, dependency-free vectors for tests and benchmarks."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

import numpy as np
from engram.streams.embedder.base import F32, check_texts, normalise_rows

DEFAULT_HASHING_DIM = 256
_WORD = re.compile(r"\w+")


class HashingEmbedder:
    """Signed feature hashing of lowercased word tokens, L2-normalised.

    Same text, same vector, in every process (blake2b, not Python's salted ``hash``); texts that
    share words get a positive cosine. It has no notion of meaning, so use it only where the test or
    bench is about plumbing, not retrieval quality.
    """

    def __init__(self, dim: int = DEFAULT_HASHING_DIM) -> None:
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
            raise ValueError(f"HashingEmbedder dim must be a positive int, not {dim!r}")
        self.dim = dim
        self.name = f"engram/hashing-{dim}"

    def _tokens(self, text: str) -> list[str]:
        return _WORD.findall(text.lower())

    def _add(self, row: np.ndarray, token: str) -> None:
        h = int.from_bytes(hashlib.blake2b(token.encode("utf-8"), digest_size=8).digest(), "little")
        row[(h >> 1) % self.dim] += F32(1.0) if h & 1 else F32(-1.0)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = check_texts(texts)
        out = np.zeros((len(texts), self.dim), dtype=F32)
        for row, text in zip(out, texts, strict=True):
            for token in self._tokens(text):
                self._add(row, token)
            if not row.any():  # no words ("", "!!!") or every bucket cancelled: hash the raw text
                self._add(row, "\x00" + text)
        return normalise_rows(out)

    def count_tokens(self, text: str) -> int:
        """Word tokens (``\\w+`` runs) in the text."""
        return len(self._tokens(text))

    def __repr__(self) -> str:
        return f"HashingEmbedder(dim={self.dim})"
