"""The BERT encoder of all-MiniLM-L6-v2 in numpy: its weights read once, and the forward pass.

Mean pooling over the real tokens is part of the pass; tokenizing, batching and the final L2
normalisation are the caller's (``streams.embedder.minilm``). ``encode_packed`` is the pass in
use: a batch's tokens end to end, so padding costs nothing but in attention. The pass is exactly HF BERT with
absolute positions and erf GELU; ``load_bert`` refuses a model that is anything else.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
from engram.streams.embedder.base import F32


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
class Bert:
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
def load_bert(model_dir: Path) -> Bert:
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
    w = {k.removeprefix("bert."): v.astype(F32, copy=False) for k, v in w.items()}
    hidden, heads = cfg["hidden_size"], cfg["num_attention_heads"]
    scale = F32(1.0 / np.sqrt(hidden // heads))  # folded into the query projection: one op fewer per layer

    def ro(a: np.ndarray) -> np.ndarray:
        a = np.ascontiguousarray(a, dtype=F32)
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
    return Bert(
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


def _layer_norm(x: np.ndarray, g: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    """In place over the last axis (biased variance, as torch.nn.LayerNorm)."""
    x -= x.mean(axis=-1, keepdims=True)
    var = np.einsum("ij,ij->i", x, x)
    var *= F32(1.0 / x.shape[-1])
    var += F32(eps)
    np.sqrt(var, out=var)
    x /= var[:, None]
    x *= g
    x += b
    return x


# erf as a float32 rational approximation (Eigen's generic_fast_erf_float, accurate to a few ulp), because
# numpy has no erf and HF BERT's "gelu" is the exact 0.5*x*(1+erf(x/sqrt(2))), not the tanh approximation.
_ERF_ALPHA = tuple(
    F32(c)
    for c in (
        -2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06, -5.69250639462346e-05,
        -7.34990630326855e-04, -2.95459980854025e-03, -1.60960333262415e-02,
    )
)  # fmt: skip
_ERF_BETA = tuple(
    F32(c)
    for c in (
        -1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03, -7.37332916720468e-03,
        -1.42647390514189e-02,
    )
)  # fmt: skip
_ERF_ALPHA_HALF = tuple(F32(0.5) * c for c in _ERF_ALPHA)  # numerator of 0.5*erf (scaling by 0.5 is exact)
_GELU_CHUNK = 1 << 15  # elements per GELU chunk: its few temporaries then stay in L2


def _gelu(x: np.ndarray) -> np.ndarray:
    """Exact GELU, 0.5*x*(1 + erf(x/sqrt(2))), in place, in chunks so its ~27 passes run in cache."""
    rows = max(1, _GELU_CHUNK // x.shape[1])
    for r in range(0, x.shape[0], rows):
        xc = x[r : r + rows]
        t = xc * F32(1.0 / np.sqrt(2.0))
        np.clip(t, F32(-4.0), F32(4.0), out=t)  # erf is +-1 in float32 beyond 4
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
        p += F32(0.5)
        xc *= p
    return x


_FF_ROWS = 512  # the feed-forward runs in row blocks so its 4x-wide activations are not all live at once
_ATTN_SCORES = 1 << 20  # attention scores held at a time (4 MB): bounds memory for long batches


def encode(m: Bert, ids: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Mean-pooled last hidden states, shape (batch, hidden), for right-padded ``ids``.

    The pass ``MiniLM`` ran before ``encode_packed``: kept as the reference that one is tested
    against, and as ``bench/embed.py``'s "old"."""
    batch, seq = ids.shape
    hidden = m.word.shape[1]
    heads, head_dim = m.heads, hidden // m.heads
    x = m.word[ids.ravel()]  # (batch*seq, hidden), a fresh array we may work on in place
    x.reshape(batch, seq, hidden)[:] += m.pos_type[:seq]
    _layer_norm(x, m.ln_g, m.ln_b, m.eps)

    padded = bool((lengths < seq).any())
    if padded:  # additive mask over key positions, as HF's extended attention mask
        bias = np.where(np.arange(seq) < lengths[:, None], F32(0), np.finfo(F32).min).astype(F32)
        bias = bias[:, None, None, :]
    per_step = max(1, _ATTN_SCORES // (heads * seq * seq))
    ctx = np.empty((batch, seq, heads, head_dim), dtype=F32)

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
    mask = (np.arange(seq) < lengths[:, None]).astype(F32)
    pooled = np.einsum("bs,bsh->bh", mask, x3)
    pooled /= np.maximum(lengths, 1e-9).astype(F32)[:, None]
    return pooled


_GROUP_SLACK = 0.8  # a sequence shares an attention group with longer ones down to this share of their length


def _groups(lengths: np.ndarray, heads: int) -> list[np.ndarray]:
    """Sequences (indexes into ``lengths``, longest first) that attend together, padded to the first's
    length: similar lengths, and at most ``_ATTN_SCORES`` scores at a time."""
    order = np.argsort(-lengths, kind="stable")
    groups, s = [], 0
    while s < len(order):
        longest = int(lengths[order[s]])
        per_step = max(1, _ATTN_SCORES // (heads * longest * longest))
        e = s + 1
        while e < len(order) and e - s < per_step and lengths[order[e]] >= _GROUP_SLACK * longest:
            e += 1
        groups.append(order[s:e])
        s = e
    return groups


def encode_packed(m: Bert, ids: list[list[int]]) -> np.ndarray:
    """Mean-pooled last hidden states, shape (len(ids), hidden), of sequences of any lengths.

    The dense work (projections, feed-forward, layer norms: ~95% of the FLOPs) runs on the batch's
    tokens packed end to end, so no padding is ever multiplied; only attention is per sequence, in
    groups of similar length padded to the group's longest (masked, as ``encode``). Same maths as
    ``encode`` row for row; float32 sums in another order give ~1e-7 differences, not more.
    """
    lengths = np.fromiter((len(s) for s in ids), dtype=np.int64, count=len(ids))
    if lengths.min(initial=1) < 1 or lengths.max(initial=0) > m.max_seq_length:
        raise ValueError(f"sequences must hold 1 to {m.max_seq_length} tokens")
    hidden = m.word.shape[1]
    heads, head_dim = m.heads, hidden // m.heads
    starts = np.zeros(len(ids), dtype=np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    total = int(lengths.sum())
    flat = np.fromiter((t for s in ids for t in s), dtype=np.int64, count=total)
    positions = np.arange(total) - np.repeat(starts, lengths)
    x = m.word[flat]
    x += m.pos_type[positions]
    _layer_norm(x, m.ln_g, m.ln_b, m.eps)

    # per group: where its padded (sequences, longest) grid reads from the packed rows, and its mask
    plans = []
    for group in _groups(lengths, heads):
        longest = int(lengths[group[0]])
        offs = np.arange(longest)
        real = offs < lengths[group][:, None]  # (g, longest)
        rows = np.where(real, starts[group][:, None] + offs, 0)  # padding reads row 0, then is masked
        bias = None
        if not real.all():
            bias = np.where(real, F32(0), np.finfo(F32).min).astype(F32)[:, None, None, :]
        plans.append((rows, real, rows[real], bias))

    for layer in m.layers:
        qkv = x @ layer.qkv_w
        qkv += layer.qkv_b
        ctx = np.empty((total, hidden), dtype=F32)
        for rows, real, dest, bias in plans:
            g, longest = rows.shape
            grid = qkv[rows]  # (g, longest, 3*hidden)
            q, k, v = grid.reshape(g, longest, 3, heads, head_dim).transpose(2, 0, 3, 1, 4)
            scores = q @ k.transpose(0, 1, 3, 2)  # (g, heads, longest, longest)
            if bias is not None:
                scores += bias
            scores -= scores.max(axis=-1, keepdims=True)
            np.exp(scores, out=scores)
            scores /= scores.sum(axis=-1, keepdims=True)
            out = (scores @ v).transpose(0, 2, 1, 3).reshape(g, longest, hidden)
            ctx[dest] = out[real]
        attn = ctx @ layer.out_w
        attn += layer.out_b
        attn += x
        x = _layer_norm(attn, layer.ln1_g, layer.ln1_b, m.eps)

        out = np.empty_like(x)
        for r in range(0, total, _FF_ROWS):
            xr = x[r : r + _FF_ROWS]
            h = xr @ layer.ff1_w
            h += layer.ff1_b
            np.matmul(_gelu(h), layer.ff2_w, out=out[r : r + _FF_ROWS])
        out += layer.ff2_b
        out += x
        x = _layer_norm(out, layer.ln2_g, layer.ln2_b, m.eps)

    pooled = np.add.reduceat(x, starts, axis=0)
    pooled /= lengths.astype(F32)[:, None]
    return pooled
