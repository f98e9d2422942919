"""all-MiniLM-L6-v2 with int8 weights on onnxruntime: the same model ~3-4x faster, as a model id of its own.

The float32 numpy pass (``minilm``) does ~80-110 texts per CPU-second: MiniLM-L6 is ~21 MFLOP a
token and sgemm tops out near 130 GFLOP/s on a core here. This embedder runs the same weights with
every projection (QKV, attention output, both feed-forward layers) in int8: weights quantised per
output column (symmetric, at build), activations per tensor as each text runs (onnxruntime's
``DynamicQuantizeMatMul``/``QAttention``, VNNI kernels on this machine); embeddings, attention
scores, GELU and the layer norms stay float32. Its vectors are within ~0.02 cosine of float32's,
not the 1e-4 of "the same model", so it carries its own model id and a switch to it means a
re-embed (``engram rebuild-index``).

Each text is a run of its own: no padding, and a text's vector never depends on what else was in
its call (a batch equals one-by-one bit for bit); runs take the same CPU per text as batched ones
here. ``threads`` runs that many texts at once (onnxruntime releases the GIL).

The graph is written from the safetensors weights with ``onnx.helper`` (no torch, no network) the
first time it is needed, and cached under ``ENGRAM_CACHE_DIR``; later processes only load it.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from engram.streams.embedder import bert
from engram.streams.embedder.base import F32, check_texts, normalise_rows
from engram.streams.embedder.minilm import (
    _BERT_SPACE,
    MINILM_ID,
    _chunk_tokens,
    _tokenizer,
    minilm_model_dir,
)

if TYPE_CHECKING:
    import onnxruntime

MINILM_INT8_ID = "engram/all-MiniLM-L6-v2-int8"
RECIPE = "minilm-int8-v1"  # bump when the graph or the quantisation changes: it names the cached file


def quantise_columns(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int8 per output column of ``w`` (in, out): ``w ~ q * scale``, |q| <= 127."""
    scale = np.maximum(np.abs(w).max(axis=0) / F32(127), F32(1e-12)).astype(F32)
    q = np.clip(np.rint(w / scale), -127, 127).astype(np.int8)
    return q, scale


def build_graph(m: bert.Bert) -> bytes:
    """The serialised ONNX model: ``input_ids`` (1, seq) -> last hidden states (1, seq, hidden)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    inits: list[onnx.TensorProto] = []
    nodes: list[onnx.NodeProto] = []

    def const(name: str, a: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(np.ascontiguousarray(a), name))
        return name

    def node(op: str, ins: list[str], out: str, ms: bool = False, **attrs: Any) -> str:
        domain = "com.microsoft" if ms else ""
        nodes.append(helper.make_node(op, ins, [out], name=out, domain=domain, **attrs))
        return out

    def linear(p: str, x: str, w: np.ndarray, b: np.ndarray) -> str:
        q, scale = quantise_columns(w)
        zero = np.zeros_like(scale, dtype=np.int8)
        ins = [x, const(p + "w", q), const(p + "ws", scale), const(p + "wz", zero), const(p + "b", b)]
        return node("DynamicQuantizeMatMul", ins, p + "y", ms=True)

    def add_norm(p: str, a: str, skip: str, g: np.ndarray, b: np.ndarray) -> str:
        # Add + LayerNormalization, not SkipLayerNormalization: its kernel measured slower here
        s = node("Add", [a, skip], p + "sum")
        return node(
            "LayerNormalization", [s, const(p + "g", g), const(p + "b", b)], p + "y", axis=-1, epsilon=m.eps
        )

    word = node("Gather", [const("word", m.word), "input_ids"], "word_e")
    pos = node("Gather", [const("pos_type", m.pos_type[: m.max_seq_length]), "positions"], "pos_e")
    x = add_norm("emb_", word, pos, m.ln_g, m.ln_b)
    for i, layer in enumerate(m.layers):
        p = f"l{i}_"
        # QAttention: dynamic-quantised input, int8 QKV weights; load_bert folded 1/sqrt(d) into q
        xq = f"{p}xq"
        nodes.append(helper.make_node("DynamicQuantizeLinear", [x], [xq, xq + "s", xq + "z"], name=xq))
        q, scale = quantise_columns(layer.qkv_w)
        ins = [
            xq,
            const(p + "qkv_w", q),
            const(p + "qkv_b", layer.qkv_b),
            xq + "s",
            const(p + "qkv_s", scale),
        ]
        ins += ["mask_index", xq + "z", const(p + "qkv_z", np.zeros_like(scale, dtype=np.int8))]
        ctx = node("QAttention", ins, p + "ctx", ms=True, num_heads=m.heads, scale=1.0)
        x1 = add_norm(p + "n1_", linear(p + "o_", ctx, layer.out_w, layer.out_b), x, layer.ln1_g, layer.ln1_b)
        h = node("Gelu", [linear(p + "f1_", x1, layer.ff1_w, layer.ff1_b)], p + "gelu", ms=True)  # erf GELU
        x = add_norm(p + "n2_", linear(p + "f2_", h, layer.ff2_w, layer.ff2_b), x1, layer.ln2_g, layer.ln2_b)
    node("Identity", [x], "hidden")
    graph = helper.make_graph(
        nodes,
        "all-MiniLM-L6-v2-int8",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, "seq"]),
            helper.make_tensor_value_info("positions", TensorProto.INT64, ["seq"]),
            helper.make_tensor_value_info("mask_index", TensorProto.INT32, [1]),
        ],
        [helper.make_tensor_value_info("hidden", TensorProto.FLOAT, [1, "seq", m.word.shape[1]])],
        initializer=inits,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    )
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def default_cache_dir() -> Path:
    from engram.settings import load_settings

    return load_settings().cache_dir


_build_lock = threading.Lock()


def graph_path(model_dir: Path, cache_dir: Path) -> Path:
    """The cached graph for these weights, written (atomically) on first use."""
    weights = model_dir / "model.safetensors"
    stat = weights.stat()
    key = hashlib.sha256(
        f"{RECIPE}\0{weights.resolve()}\0{stat.st_size}\0{stat.st_mtime_ns}".encode()
    ).hexdigest()
    path = cache_dir / "embedders" / f"{RECIPE}-{key[:16]}.onnx"
    with _build_lock:
        if not path.is_file():
            path.parent.mkdir(parents=True, exist_ok=True)
            data = build_graph(bert.load_bert(model_dir))
            fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".part")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                os.chmod(tmp, 0o644)
                os.replace(tmp, path)  # a concurrent process builds the same bytes: last one wins
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
    return path


@cache
def _session(path: Path) -> onnxruntime.InferenceSession:
    try:
        import onnxruntime as ort
    except ImportError as exc:  # pragma: no cover - a dependency of engram
        raise RuntimeError("the minilm-int8 embedder needs onnxruntime: pip install onnxruntime") from exc
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1  # one text per run: parallel runs (``threads``) beat splitting one
    opts.inter_op_num_threads = 1
    # basic: the graph is already fused by hand; "all" turns Add+LayerNormalization into the slower
    # SkipLayerNormalization
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


class MiniLMInt8:
    """all-MiniLM-L6-v2, int8 projections on onnxruntime: same tokenizer, window and pooling as ``MiniLM``.

    ``threads`` (default 2) texts of a call run at once; a call of one text uses one core.
    """

    name = MINILM_INT8_ID
    dim = 384
    base_model = MINILM_ID

    def __init__(
        self, model_dir: str | Path | None = None, *, cache_dir: str | Path | None = None, threads: int = 2
    ) -> None:
        self.model_dir = Path(model_dir) if model_dir is not None else minilm_model_dir()
        if not (self.model_dir / "model.safetensors").is_file():
            raise FileNotFoundError(f"no model.safetensors under {self.model_dir}")
        if threads < 1:
            raise ValueError("threads must be at least 1")
        self.cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        self.threads = threads
        # its threads start on the first call of 2+ texts
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="minilm-int8") if threads > 1 else None

    @property
    def max_seq_length(self) -> int:
        return _max_seq_length(self.model_dir)

    def _run(self, session: onnxruntime.InferenceSession, ids: list[int]) -> np.ndarray:
        n = len(ids)
        feed = {
            "input_ids": np.asarray(ids, dtype=np.int64)[None, :],
            "positions": np.arange(n, dtype=np.int64),
            "mask_index": np.array([n], dtype=np.int32),
        }
        return session.run(None, feed)[0][0].mean(axis=0)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = check_texts(texts)
        out = np.empty((len(texts), self.dim), dtype=F32)
        if not texts:
            return out
        session = _session(graph_path(self.model_dir, self.cache_dir))
        encodings = _tokenizer(self.model_dir, self.max_seq_length).encode_batch(texts)
        ids = [e.ids for e in encodings]
        if self._pool is None or len(texts) == 1:
            for i, seq in enumerate(ids):
                out[i] = self._run(session, seq)
        else:
            order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))  # longest first: even finish
            for i, row in zip(
                order, self._pool.map(lambda i: self._run(session, ids[i]), order), strict=True
            ):
                out[i] = row
        return normalise_rows(out)

    def count_tokens(self, text: str) -> int:
        """As ``MiniLM.count_tokens``: the same tokenizer, word pieces without [CLS]/[SEP], untruncated."""
        return sum(_chunk_tokens(self.model_dir, chunk) for chunk in _BERT_SPACE.split(text) if chunk)

    def __repr__(self) -> str:
        return f"MiniLMInt8({str(self.model_dir)!r})"


@cache
def _max_seq_length(model_dir: Path) -> int:
    import json

    cfg = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    st = json.loads((model_dir / "sentence_bert_config.json").read_text(encoding="utf-8"))
    return min(int(st.get("max_seq_length", 512)), cfg["max_position_embeddings"])
