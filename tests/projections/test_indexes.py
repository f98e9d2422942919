"""The search indexes against the graph: refreshed == rebuilt, catch-up after a crash, erasure.

Real tantivy and hnswlib indexes in a real on-disk store; the embedder is the hashing one, so
vectors are deterministic without model weights.
"""

from __future__ import annotations

import gc
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tantivy
from engram.projections import index_source
from engram.projections.bm25 import bm25
from engram.projections.context import ContextOptions, build_context
from engram.projections.indexes import TenantIndexes
from engram.projections.stores import TenantStores
from engram.projections.tenant_graph import Status
from engram.projections.visibility import Principal
from engram.schemas.events import Position
from engram.streams.embedder import embedding_text, load_embedder, memory_embedding
from engram.streams.pipeline import embed_missing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.factories import event, remembered

EMB = load_embedder("hashing")
WORDS = ["meta", "budget", "headline", "emoji", "tone", "roas", "target", "brand", "voice", "cap"]


def stores(root: Path) -> TenantStores:
    return TenantStores(root, vectors=(EMB.name, EMB.dim), embed=memory_embedding(EMB))  # as the projector


class Tenant:
    """Applies events to a tenant's graph and (when asked) its indexes, as the projector does."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.stores = stores(root)
        self.offset = -1

    def apply(self, event_type: str, payload: dict[str, Any], *, index: bool = True) -> Status:
        ev = event(event_type, payload, tenant="t")
        if event_type == "MemoryRemembered":
            ev = embed_missing([(0, ev)], EMB)[0][1]
        self.offset += 1
        graph = self.stores.get("t", create=True)
        assert graph is not None
        outcome = graph.apply(ev, Position(0, self.offset, 1_700_000_000_000 + self.offset))
        if index:
            ix = self.indexes()
            if outcome.status is Status.APPLIED and "memory_id" in payload:
                ix.refresh([payload["memory_id"]])
            ix.commit(Position(0, self.offset))
        return outcome.status

    def indexes(self) -> TenantIndexes:
        found = self.stores.indexes("t")
        assert found is not None
        return found

    def reopen(self) -> None:
        self.stores.close()
        self.stores = stores(self.root)
        gc.collect()


def contents(ix: TenantIndexes) -> tuple[dict[str, list[str]], dict[str, tuple[float, ...]]]:
    """What the indexes hold, by memory id: the ids every word finds, and each vector."""
    words = {w: sorted(i for i, _ in ix.text.search(w, 1000)) for w in WORDS}
    vectors = {
        mid: tuple(np.round(ix.vectors.index.get_items([label])[0], 5))
        for label, mid in sorted(ix.vectors.ids.items())
    }
    return words, vectors


def test_remember_revise_forget_reach_both_indexes(tmp_path: Path) -> None:
    t = Tenant(tmp_path)
    t.apply("MemoryRemembered", remembered("cap", label="Meta cap", content="Max 40k a month on meta"))
    t.apply("MemoryRemembered", remembered("tone", label="Tone", content="No emoji in headlines"))
    ix = t.indexes()
    assert [i for i, _ in ix.text.search("emoji", 10)] == ["tone"]
    assert ix.vectors.count() == 2
    query = EMB.embed([embedding_text("Tone", "No emoji in headlines")])[0]
    assert ix.vectors.search(query, 1)[0][0] == "tone"

    t.apply("MemoryRevised", {"memory_id": "tone", "changes": {"content": "Emoji only on Fridays"}})
    assert [i for i, _ in ix.text.search("fridays", 10)] == ["tone"]
    assert ix.text.search("headlines", 10) == []

    t.apply("MemoryForgotten", {"memory_id": "cap", "reason": "erasure request"})
    assert ix.text.search("meta", 10) == []  # erased: no longer searchable at all
    assert [mid for mid, _ in ix.vectors.search(query, 5)] == ["tone"]
    graph = t.stores.get("t")
    assert graph is not None and ix.memory_vector("cap") is None  # the vector left the graph too


def test_a_revised_memory_is_found_by_its_new_words_not_its_old(tmp_path: Path) -> None:
    """A revision of label or content drops the vector of the old words from the graph (the model
    stays named); the index embeds the memory anew as it refreshes it, and again when rebuilt."""
    t = Tenant(tmp_path)
    t.apply("MemoryRemembered", remembered("tone", label="Tone", content="No emoji in headlines"))
    t.apply("MemoryRemembered", remembered("cap", label="Cap", content="meta budget target"))
    old = EMB.embed([embedding_text("Tone", "No emoji in headlines")])[0]
    new = EMB.embed([embedding_text("Brand voice", "roas target for brand voice")])[0]
    t.apply(
        "MemoryRevised",
        {"memory_id": "tone", "changes": {"label": "Brand voice", "content": "roas target for brand voice"}},
    )
    ix = t.indexes()
    assert ix.memory_vector("tone") is None and ix.stale("tone")  # the graph holds no stale vector
    assert ix.vectors.similarities(new, ["tone"])["tone"] > 1 - 1e-5  # exactly the new words' vector
    assert ix.vectors.similarities(old, ["tone"])["tone"] < 0.5  # the old words' is gone
    # a revision of other fields keeps the vector it has
    t.apply("MemoryRevised", {"memory_id": "cap", "changes": {"importance": 4}})
    assert ix.memory_vector("cap") is not None
    # rebuilt (a lost index): embedded anew too; without an embedder it has no vector at all
    ix.rebuild(only="vectors")
    assert ix.vectors.similarities(new, ["tone"])["tone"] > 1 - 1e-5
    bare = TenantIndexes(tmp_path / "bare", ix.graph, EMB.name, EMB.dim)
    assert sorted(bare.vectors.ids.values()) == ["cap"]


def test_rebuild_with_reembed_embeds_a_tenant_for_another_model(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``engram rebuild-index`` after the model changed: every memory embedded by the new one. Until
    then, opening the tenant with the new model says how many memories it cannot search by vector."""
    t = Tenant(tmp_path)
    for i, w in enumerate(WORDS[:5]):
        t.apply("MemoryRemembered", remembered(f"m{i}", content=f"{w} words"))
    other = load_embedder("hashing-64")
    graph = t.stores.get("t")
    assert graph is not None
    ix = TenantIndexes(tmp_path / "other", graph, other.name, other.dim, memory_embedding(other))
    assert ix.vectors.count() == 0  # opened: nothing of this model in the graph, nothing embedded
    warned = [r.getMessage() for r in caplog.records if "of another model only" in r.getMessage()]
    assert len(warned) == 1 and "5 memories" in warned[0] and other.name in warned[0]
    ticks: list[tuple[int, int]] = []
    assert ix.rebuild(reembed=True, tick=lambda done, total: ticks.append((done, total))) == 5
    assert ix.vectors.count() == 5 and ticks[-1] == (5, 5)
    query = other.embed([embedding_text("", "budget words")])[0]
    assert ix.vectors.search(query, 1)[0][0] == "m1"


def test_an_index_behind_its_graph_catches_up_when_opened(tmp_path: Path) -> None:
    t = Tenant(tmp_path)
    t.apply("MemoryRemembered", remembered("a", content="meta budget"))
    # a crash between the graph and the indexes: these reach the graph only
    t.apply("MemoryRemembered", remembered("b", content="emoji tone"), index=False)
    t.apply("MemoryRevised", {"memory_id": "a", "changes": {"content": "brand voice"}}, index=False)
    t.stores._indexes.clear()  # the process died: nothing of the open indexes survives
    t.reopen()
    ix = t.indexes()
    assert [i for i, _ in ix.text.search("emoji", 10)] == ["b"]
    assert [i for i, _ in ix.text.search("voice", 10)] == ["a"]
    assert ix.text.search("budget", 10) == []
    assert sorted(ix.vectors.ids.values()) == ["a", "b"]
    assert ix.text.checkpoint.read() == Position(0, 2)


def test_a_lost_index_is_rebuilt_from_the_graph(tmp_path: Path) -> None:
    t = Tenant(tmp_path)
    for i, w in enumerate(WORDS):
        t.apply("MemoryRemembered", remembered(f"m{i}", content=f"{w} words"))
    before = contents(t.indexes())
    t.reopen()
    t.stores.close()
    shutil.rmtree(tmp_path / "t" / "text")
    shutil.rmtree(tmp_path / "t" / "vectors")
    t.reopen()
    assert contents(t.indexes()) == before


def test_the_vector_ids_saved_with_the_index_are_read_back_without_the_graph(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store opens without reading every vector of its graph for the ids behind the labels; an
    index saved without them (an older build) reads them from the graph as before."""
    t = Tenant(tmp_path)
    for i in range(4):
        t.apply("MemoryRemembered", remembered(f"m{i}", content=f"{WORDS[i]} words"))
    t.apply("MemoryForgotten", {"memory_id": "m1", "reason": "erasure request"})
    live = dict(t.indexes().vectors.ids)
    assert sorted(live.values()) == ["m0", "m2", "m3"]

    def unread(*_: object) -> None:
        raise AssertionError("the graph's vectors were read")

    with monkeypatch.context() as patched:
        patched.setattr(index_source, "stored_vectors", unread)
        t.reopen()
        assert t.indexes().vectors.ids == live
    t.stores.close()
    [saved] = (tmp_path / "t" / "vectors").rglob("ids-*.json")
    saved.unlink()
    t.reopen()
    assert t.indexes().vectors.ids == live


def test_conversation_neighbours_are_read_on_first_use_after_the_store_opens(tmp_path: Path) -> None:
    t = Tenant(tmp_path)
    for i in range(3):
        evidence = {"conversation_id": "c1", "turn_ids": [f"t{i}"]}
        t.apply("MemoryRemembered", remembered(f"m{i}", content=f"{WORDS[i]} words", evidence=evidence))
    t.reopen()
    ix = t.indexes()
    threads = ix.threads
    assert threads._threads is None  # not read as the store opens
    assert ix.neighbours("m1", 1) == ["m0", "m2"]
    assert threads._threads == {"c1": [(threads._thread_of[f"m{i}"][1], f"m{i}") for i in range(3)]}


def test_a_text_index_of_an_older_schema_is_rebuilt_when_opened(tmp_path: Path) -> None:
    """Schema 1 did not store the text BM25 is scored again from: opened, the index is found to be
    of another schema, deleted with its checkpoint and rebuilt from the graph."""
    t = Tenant(tmp_path)
    t.apply("MemoryRemembered", remembered("cap", label="Meta cap", content="Max 40k a month"))
    t.apply("MemoryRemembered", remembered("tone", label="Tone", content="No emoji in headlines"))
    t.reopen()
    t.stores.close()
    text = tmp_path / "t" / "text"
    checkpoint = (text / "checkpoint.json").read_text()
    shutil.rmtree(text)
    text.mkdir()
    builder = tantivy.SchemaBuilder()  # schema 1, as the builds before wrote it
    builder.add_text_field("id", stored=True, tokenizer_name="raw")
    builder.add_text_field("text", stored=False, tokenizer_name="en_stem")
    old = tantivy.Index(builder.build(), path=str(text))
    writer = old.writer(15_000_000, 1)
    writer.add_document(tantivy.Document(id="stale", text="Meta cap Max 40k a month"))
    writer.commit()
    (text / "checkpoint.json").write_text(checkpoint)  # up to date: only the schema betrays it
    del writer, old
    t.reopen()
    ix = t.indexes()
    assert ix.text.count() == 2
    assert [i for i, _ in ix.text.search("meta", 10)] == ["cap"]
    assert [i for i, _ in ix.text.search("emoji", 10)] == ["tone"]


def test_a_revised_memory_is_scored_by_its_new_words_once_committed(tmp_path: Path) -> None:
    """The term counts kept for rescoring are those of the committed text, not a revision's old."""
    t = Tenant(tmp_path)
    t.apply("MemoryRemembered", remembered("a", label="Trip", content="ski trip"))
    t.apply("MemoryRemembered", remembered("b", label="Other", content="budget roas target brand voice"))
    ix = t.indexes()
    before = dict(ix.text.search("ski", 10))["a"]  # counted and kept
    t.apply("MemoryRevised", {"memory_id": "a", "changes": {"content": "ski ski and more ski"}})
    after = dict(ix.text.search("ski", 10))["a"]
    del ix
    t.reopen()
    assert after > 1.2 * before  # three times the word, not the old text's once
    fresh = dict(t.indexes().text.search("ski", 10))["a"]
    assert abs(fresh - after) < 0.05 * fresh  # as a fresh index counts (its average length is new)


def test_bm25_is_scored_with_the_k1_and_b_given() -> None:
    """b weighs a document's length against the average; k1 saturates repeated terms."""
    idf = {"ski": 2.0}
    short, long = bm25(5, {"ski": 1}, {"ski": 1.0}, idf, 10), bm25(20, {"ski": 1}, {"ski": 1.0}, idf, 10)
    assert short > long  # the same match in a shorter document
    assert bm25(5, {"ski": 1}, {"ski": 1.0}, idf, 10, b=0) == bm25(20, {"ski": 1}, {"ski": 1.0}, idf, 10, b=0)
    assert bm25(10, {"ski": 1}, {"ski": 1.0}, idf, 10, k1=1.2, b=0.75) == 2.0  # avgdl, tf 1: the idf
    assert bm25(10, {"ski": 3}, {"ski": 0.5}, idf, 10, k1=0.9) == 0.5 * 2.0 * 3 * 1.9 / (3 + 0.9)
    assert bm25(10, {"run": 3}, {"ski": 1.0}, idf, 10) == 0.0


ops = st.lists(
    st.tuples(
        st.sampled_from(["remember", "revise", "forget", "supersede"]),
        st.integers(0, 5),
        st.lists(st.sampled_from(WORDS), min_size=1, max_size=4),
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=ops)
def test_refreshed_indexes_equal_rebuilt_ones(tmp_path_factory: Any, steps: list[Any]) -> None:
    """Whatever the sequence, the incrementally kept indexes hold what a rebuild from the graph does."""
    root = tmp_path_factory.mktemp("ix")
    t = Tenant(root)
    for op, n, words in steps:
        text = " ".join(words)
        if op == "remember":
            t.apply("MemoryRemembered", remembered(f"m{n}", content=text))
        elif op == "revise":
            t.apply("MemoryRevised", {"memory_id": f"m{n}", "changes": {"content": text}})
        elif op == "forget":
            t.apply("MemoryForgotten", {"memory_id": f"m{n}"})
        else:
            t.apply("MemorySuperseded", {"memory_id": f"m{n}", "superseded_by": f"m{(n + 1) % 6}"})
    live = contents(t.indexes())
    ix = t.indexes()
    ix.rebuild()
    ix.commit(Position(0, t.offset))
    assert contents(ix) == live
    t.stores.close()


def test_a_class_the_rules_derive_cannot_be_asserted(tmp_path: Path) -> None:
    """Writing LiveContext directly would put a memory in the live context past its cap."""
    t = Tenant(tmp_path)
    for cls in ("LiveContext", "ActiveMemory", "LiveCandidate"):
        assert t.apply("MemoryRemembered", remembered(f"x-{cls}", memory_class=cls)) is Status.REJECTED
    assert t.apply("MemoryRemembered", remembered("ok", memory_class="BrandVoiceMemory")) is Status.APPLIED


def test_exact_similarities_match_the_nearest_neighbours(tmp_path: Path) -> None:
    t = Tenant(tmp_path)
    for i, w in enumerate(WORDS):
        t.apply("MemoryRemembered", remembered(f"m{i}", content=f"{w} {WORDS[(i + 1) % len(WORDS)]}"))
    ix = t.indexes()
    query = EMB.embed(["meta budget headline"])[0]
    nearest = dict(ix.vectors.search(query, len(WORDS)))
    exact = ix.vectors.similarities(query, [*nearest, "unknown"])
    assert set(exact) == set(nearest)
    assert all(abs(exact[k] - nearest[k]) < 1e-5 for k in nearest)
    # the exact copy is kept in step with later writes: a new vector, a new memory, a forgotten one
    t.apply("MemoryRevised", {"memory_id": "m0", "changes": {"content": "sourcing engineers in berlin"}})
    t.apply("MemoryRemembered", remembered("late", content="meta budget headline cap"))
    t.apply("MemoryForgotten", {"memory_id": "m1"})
    nearest = dict(ix.vectors.search(query, len(WORDS) + 1))
    exact = ix.vectors.similarities(query, [*nearest, "m1"])
    assert "late" in exact and "m1" not in exact and set(exact) == set(nearest)
    assert all(abs(exact[k] - nearest[k]) < 1e-5 for k in nearest)


def test_a_candidates_state_follows_every_write(tmp_path: Path) -> None:
    t = Tenant(tmp_path)
    t.apply("MemoryRemembered", remembered("a"))
    t.apply("MemoryRemembered", remembered("b"))
    ix = t.indexes()
    assert ix.candidate("a").active and ix.candidate("a").active  # type: ignore[union-attr]  # cached
    t.apply("MemorySuperseded", {"memory_id": "a", "superseded_by": "b"})
    assert ix.candidate("a").active is False  # type: ignore[union-attr]
    t.apply("MemoryRestored", {"memory_id": "a"})
    assert ix.candidate("a").active is True  # type: ignore[union-attr]


def test_engram_rebuild_index_rebuilds_both_with_progress(
    tmp_path: Path, monkeypatch: Any, capsys: Any
) -> None:
    from engram.cli import main

    t = Tenant(tmp_path / "tenants")
    for i, w in enumerate(WORDS):
        t.apply("MemoryRemembered", remembered(f"m{i}", content=f"{w} words"))
    before = contents(t.indexes())
    t.stores.close()
    shutil.rmtree(tmp_path / "tenants" / "t" / "text")
    monkeypatch.setenv("ENGRAM_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("ENGRAM_EMBEDDER", "hashing")
    assert main(["rebuild-index", "t"]) == 0
    out, err = capsys.readouterr()
    assert (
        f"{len(WORDS)} documents, {len(WORDS)} vectors" in out
        and f"{len(WORDS)}/{len(WORDS)} memories" in err
    )
    assert "0 embedded anew" in out  # every memory had its vector of this model
    t.reopen()
    assert contents(t.indexes()) == before
    assert main(["rebuild-index", "nobody"]) == 1
    t.stores.close()
    # the embedder changed: every memory is embedded by the new model, with the figure at the end
    monkeypatch.setenv("ENGRAM_EMBEDDER", "hashing-32")
    assert main(["rebuild-index", "t"]) == 0
    out, err = capsys.readouterr()
    assert f"{len(WORDS)} vectors (engram/hashing-32; {len(WORDS)} embedded anew)" in out, out
    assert f"{len(WORDS)}/{len(WORDS)} memories" in err


def test_candidates_after_a_reopen_equal_ones_read_one_by_one(tmp_path: Path) -> None:
    from engram.projections.visibility import memory_facts

    t = Tenant(tmp_path)
    t.apply("MemoryRemembered", remembered("c", importance=5, memory_class="BrandVoiceMemory"))
    t.apply("MemoryRemembered", remembered("u", scope="user", stakeholders={"user_id": "bob"}))
    t.apply("MemoryRemembered", remembered("g", scope="team", stakeholders={"team_ids": ["a", "b"]}))
    t.apply("MemorySuperseded", {"memory_id": "c", "superseded_by": "u"})
    t.reopen()
    ix = t.indexes()
    assert ix._lean == {}  # nothing read ahead as the store opens: each read as asked for
    graph = t.stores.get("t")
    assert graph is not None
    for mid in ("c", "g", "u"):
        assert ix.candidate(mid) == memory_facts(graph, mid, lean=True), mid
    assert ix.candidate("c").active is False  # type: ignore[union-attr]


principals = [
    Principal("ann", frozenset({"red"})),
    Principal("bob", frozenset({"red", "blue"})),
    Principal(None, frozenset()),
    Principal("cy", frozenset(), role="operator"),
]
holders = st.sampled_from(
    [
        {"scope": "company"},
        {"scope": "user", "stakeholders": {"user_id": "ann"}},
        {"scope": "user", "stakeholders": {"user_id": "bob"}},
        {"scope": "team", "stakeholders": {"team_ids": ["red"]}},
        {"scope": "team", "stakeholders": {"team_ids": ["blue", "green"]}},
    ]
)
context_ops = st.lists(
    st.tuples(
        st.sampled_from(["remember", "importance", "confidence", "forget", "supersede", "reopen"]),
        st.integers(0, 5),
        st.integers(1, 5),
        holders,
    ),
    min_size=1,
    max_size=20,
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=context_ops)
def test_context_through_the_indexes_equals_context_from_the_graph(
    tmp_path_factory: Any, steps: list[Any]
) -> None:
    """The indexes' list of top-tier holders (kept lazily, warmed on open) never changes a context
    bundle: for every principal, after every step, it equals the bundle read from the graph alone."""
    t = Tenant(tmp_path_factory.mktemp("ctx"))
    options = ContextOptions(0.5, EMB.count_tokens)
    graph = None
    for op, n, level, holder in steps:
        mid = f"m{n}"
        if op == "remember":
            t.apply("MemoryRemembered", remembered(mid, importance=level, **holder))
        elif op == "importance":
            t.apply("MemoryRevised", {"memory_id": mid, "changes": {"importance": level}})
        elif op == "confidence":
            t.apply("MemoryRevised", {"memory_id": mid, "changes": {"confidence": level / 5 - 0.1}})
        elif op == "forget":
            t.apply("MemoryForgotten", {"memory_id": mid})
        elif op == "supersede":
            t.apply("MemorySuperseded", {"memory_id": mid, "superseded_by": f"m{(n + 1) % 6}"})
        else:
            graph = None  # the store's lock goes with its last reference
            t.reopen()
        graph = t.stores.get("t")
        if graph is None:
            continue
        ontology = t.stores.knowledge.ontology
        for who in principals:
            fast = build_context(graph, t.indexes(), who, None, ontology, options)
            assert fast == build_context(graph, None, who, None, ontology, options), (op, who)
    t.stores.close()
