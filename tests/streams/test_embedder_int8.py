"""minilm-int8 against the float32 MiniLM it quantises: near its vectors, deterministic, batch-free.

The tolerance is measured: over 5,032 REALTALK turns (``bench/embed.py``) 1 - cosine against the
float32 vector was at most 0.017 (mean 0.0067); the texts below, odd ones included, reach 0.02
(the empty text). The tests allow 0.04, and a mean of 0.015.
"""

from __future__ import annotations

import gc
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from engram.projections.stores import TenantStores
from engram.schemas.events import Position
from engram.streams.embedder import (
    MINILM_ID,
    MINILM_INT8_ID,
    Embedder,
    MiniLM,
    MiniLMInt8,
    load_embedder,
    memory_embedding,
    minilm_int8,
)
from engram.streams.pipeline import embed_missing

from tests.factories import event, remembered

SHORT = "The cat sat on the mat."
RELATED = "A kitten is sitting on a rug."
UNICODE = "Café déjà vu — naïve façade?! Ünïcödé, emoji 🙂, 東京タワー & «quotes» (ok)…"
LONG = " ".join(f"Event {i}: the projector folded memory m{i} into the tenant graph." for i in range(40))
NUL = "before\x00after"
TEXTS = [SHORT, RELATED, UNICODE, LONG, "x", "", NUL, "Alice met Bob in Paris last week\nweekend plans"]
MAX_DEVIATION = 0.04
MEAN_DEVIATION = 0.015


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def int8(cache_dir: Path) -> MiniLMInt8:
    return MiniLMInt8(cache_dir=cache_dir)


@pytest.fixture(scope="module")
def vectors(int8: MiniLMInt8) -> np.ndarray:
    return int8.embed(TEXTS)


def test_near_the_float32_vectors(vectors: np.ndarray) -> None:
    reference = MiniLM().embed(TEXTS)
    deviation = 1 - np.einsum("ij,ij->i", reference, vectors)
    assert deviation.max() < MAX_DEVIATION, deviation
    assert deviation.mean() < MEAN_DEVIATION, deviation
    assert deviation.max() > 1e-4  # it is not the float32 model: hence a model id of its own
    # what ranking needs: a related pair stays far closer than an unrelated one
    assert vectors[0] @ vectors[1] > 0.55 > 0.1 > vectors[0] @ vectors[2]


def test_rows_are_unit_float32_with_their_own_model_id(int8: MiniLMInt8, vectors: np.ndarray) -> None:
    assert (int8.name, int8.dim, int8.base_model) == (MINILM_INT8_ID, 384, MINILM_ID)
    assert int8.name != MINILM_ID
    assert vectors.dtype == np.float32
    assert vectors.shape == (len(TEXTS), 384)
    assert np.isfinite(vectors).all()
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)
    assert isinstance(int8, Embedder)


def test_batch_equals_one_by_one_bit_for_bit(int8: MiniLMInt8, cache_dir: Path, vectors: np.ndarray) -> None:
    """Each text is a run of its own: its vector cannot depend on the others in its call."""
    one_by_one = np.vstack([int8.embed([t]) for t in TEXTS])
    np.testing.assert_array_equal(vectors, one_by_one)
    serial = MiniLMInt8(cache_dir=cache_dir, threads=1).embed(TEXTS)
    np.testing.assert_array_equal(vectors, serial)
    reordered = int8.embed([NUL, SHORT, NUL, *TEXTS])
    np.testing.assert_array_equal(reordered[:3], vectors[[6, 0, 6]])
    np.testing.assert_array_equal(reordered[3:], vectors)


def test_the_graph_is_built_deterministically_once_and_cached(
    int8: MiniLMInt8, cache_dir: Path, vectors: np.ndarray, tmp_path: Path
) -> None:
    [cached] = (cache_dir / "embedders").glob("*.onnx")
    assert cached.name.startswith(minilm_int8.RECIPE)
    stamp = cached.stat().st_mtime_ns
    assert minilm_int8.graph_path(int8.model_dir, cache_dir) == cached
    assert cached.stat().st_mtime_ns == stamp  # not written again
    # a second build, elsewhere, writes the same bytes and so the same vectors
    again = minilm_int8.graph_path(int8.model_dir, tmp_path)
    assert again.read_bytes() == cached.read_bytes()
    assert not list((tmp_path / "embedders").glob("*.part"))


def test_truncates_at_256_tokens(int8: MiniLMInt8, vectors: np.ndarray) -> None:
    assert int8.max_seq_length == 256
    assert int8.count_tokens(LONG) > 300
    longer = int8.embed([LONG + " Words past the window change nothing at all."])
    np.testing.assert_array_equal(longer[0], vectors[3])
    assert np.abs(int8.embed([SHORT + " And a dog."])[0] - vectors[0]).max() > 1e-2


def test_edge_and_hostile_inputs_as_the_float32_model(int8: MiniLMInt8, vectors: np.ndarray) -> None:
    empty = int8.embed([])
    assert empty.shape == (0, 384) and empty.dtype == np.float32
    with pytest.raises(TypeError, match="not a single str"):
        int8.embed(SHORT)  # type: ignore[arg-type]
    np.testing.assert_array_equal(int8.embed((NUL,)), vectors[[6]])  # NUL: a text like another
    # a lone surrogate is not Unicode: both models refuse it the same way (the API rejects it first)
    lone = "broken \ud800 text"
    with pytest.raises(TypeError) as f32_error:
        MiniLM().embed([lone])
    with pytest.raises(type(f32_error.value)):
        int8.embed([lone])
    for text in TEXTS:
        assert int8.count_tokens(text) == MiniLM().count_tokens(text)


def test_constructor_checks_and_cheap_import(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="threads"):
        MiniLMInt8(cache_dir=tmp_path, threads=0)
    with pytest.raises(FileNotFoundError):
        MiniLMInt8(tmp_path, cache_dir=tmp_path)
    code = (
        "import sys\n"
        "from streams.embedder import load_embedder\n"
        "e = load_embedder('minilm-int8')\n"
        "print(sorted(m for m in ('onnx', 'onnxruntime', 'tokenizers', 'torch') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("name", ["minilm-int8", "MiniLM-int8", "all-MiniLM-L6-v2-int8", MINILM_INT8_ID])
def test_load_embedder_minilm_int8(name: str) -> None:
    e = load_embedder(name)
    assert isinstance(e, MiniLMInt8)
    assert e.name == MINILM_INT8_ID
    with pytest.raises(ValueError, match="minilm-int8"):
        load_embedder("minilm-int4")


def test_rebuild_index_re_embeds_a_tenant_after_a_switch_to_int8(
    tmp_path: Path, cache_dir: Path, monkeypatch: Any, capsys: Any
) -> None:
    """The documented re-embed: memories with float32 vectors, then ``engram rebuild-index`` with
    ENGRAM_EMBEDDER=minilm-int8 embeds every one of them again, by the int8 model."""
    from engram.cli import main

    f32 = MiniLM()
    stores = TenantStores(tmp_path / "tenants", vectors=(f32.name, f32.dim), embed=memory_embedding(f32))
    words = ["budget", "headline", "brand voice"]
    for i, w in enumerate(words):
        ev = embed_missing([(0, event("MemoryRemembered", remembered(f"m{i}", content=w), tenant="t"))], f32)[
            0
        ][1]
        graph = stores.get("t", create=True)
        assert graph is not None
        graph.apply(ev, Position(0, i, 1_700_000_000_000 + i))
        ix = stores.indexes("t")
        assert ix is not None
        ix.refresh([f"m{i}"])
        ix.commit(Position(0, i))
    stores.close()
    del graph, ix, stores
    gc.collect()  # the graph store's lock goes with its last reference
    built = minilm_int8.graph_path(f32.model_dir, cache_dir)
    shutil.copytree(built.parent, tmp_path / "cache" / built.parent.name)  # no second build
    monkeypatch.setenv("ENGRAM_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("ENGRAM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("ENGRAM_EMBEDDER", "minilm-int8")
    assert main(["rebuild-index", "t"]) == 0
    out, err = capsys.readouterr()
    assert f"{len(words)} vectors ({MINILM_INT8_ID}; {len(words)} embedded anew)" in out, out
    assert f"{len(words)}/{len(words)} memories" in err
    # reopened with the int8 model (as the server would be), the index holds its vectors: none embedded
    calls: list[int] = []
    int8 = MiniLMInt8(cache_dir=tmp_path / "cache")

    def counting(memories: Any) -> np.ndarray:
        calls.append(len(memories))
        return memory_embedding(int8)(memories)

    reopened = TenantStores(tmp_path / "tenants", vectors=(int8.name, int8.dim), embed=counting)
    ix = reopened.indexes("t")
    assert ix is not None and ix.vectors.count() == len(words)
    assert calls == []
    reopened.close()
