"""A tenant's search indexes, kept in step with its graph: BM25 text and vectors of one model.

Both are caches of the graph (text from the asserted facts, vectors from the vectors graph), each
with its own checkpoint. ``refresh`` re-reads the memories a batch of events touched; opening
catches up whatever happened after an index's checkpoint (found through the event records the
graph keeps), and an index with no checkpoint is rebuilt from the graph.
"""

from __future__ import annotations

import dataclasses
import gc
import logging
import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from engram.projections import index_source as source
from engram.projections.tenant_graph import TenantGraph
from engram.projections.terms import (
    ASSERTED,
    CLOCK,
    INFERRED,
    MEMORY_PREFIX,
    RDF_TYPE,
    e,
    memory_iri,
)
from engram.projections.text_index import TextIndex
from engram.projections.threads import Threads
from engram.projections.vector_index import VectorIndex, label_of
from engram.projections.visibility import (
    MemoryFacts,
    inferred_by_name,
    memory_facts,
    with_display,
)
from engram.schemas import vocabulary as v
from engram.schemas.events import Position
from pyoxigraph import Literal, Quad

log = logging.getLogger(__name__)

ACTIVE, EXPIRED = e("ActiveMemory"), e("Expired")
LEAN_CACHE = 200_000  # memories whose lean facts are kept (~1 KB each)
LEAN_BYTES = 1024  # a memory's facts in one of those caches
FREEZE_FROM = 512  # cached memories past which the caches are frozen as they double (``_settle``)
SAVE_VECTORS_EVERY = 2_000  # changed points between two saves of the vector index
EMBED_BATCH = 64  # memories embedded per call when re-embedding
Tick = Callable[[int, int], None]
EmbedMemories = Callable[[Sequence[tuple[str, str]]], np.ndarray]
"""Vectors (unit rows) of memories given as (label, content), by the model the index holds."""


def _holder_keys(user: str | None, teams: Iterable[str]) -> tuple[str, ...]:
    """How the top-tier lists name a user and teams ("user:u", "team:t")."""
    return (*([f"user:{user}"] if user is not None else []), *(f"team:{t}" for t in sorted(teams)))


def model_dir(model: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", model)


class TenantIndexes:
    def __init__(
        self, root: Path, graph: TenantGraph, model: str, dim: int, embed: EmbedMemories | None = None
    ) -> None:
        """``embed`` gives a vector to a memory whose graph holds none of this model: a revised one
        (its old vector is dropped) as it is refreshed, and any, on ``rebuild(reembed=True)``."""
        self.graph = graph
        self.model = model
        self.embed = embed
        self._lean: dict[str, MemoryFacts] = {}  # what changes only with the memory's own events
        self._tokens: dict[str, tuple[str, int]] = {}
        self._display: dict[str, MemoryFacts] = {}  # lean facts + label, content, who and when
        self._checked: dict[str, int] = {}  # the graph generation a candidate's state was read at
        self._derived: dict[str, tuple[int, dict[str, list[Any]]]] = {}  # by generation read at
        # top-tier memories by who holds them ("user:u", "team:t"), so a context reads the
        # principal's few instead of every memory they hold; refreshed ones are placed again lazily
        self._holders: dict[str, set[str]] = {}
        self._held: dict[str, tuple[str, ...]] = {}
        self._unplaced: set[str] = set()
        self._placed = False  # every memory placed (on the first context, ``_place_all``)
        self._frozen_at = FREEZE_FROM  # the caches' size at the last ``gc.freeze`` (``_settle``)
        self.threads = Threads(graph)  # a hit's conversation neighbours (``projections.threads``)
        self.text = TextIndex(root / "text")
        self.vectors = VectorIndex(root / "vectors" / model_dir(model), dim)
        saved = self.vectors.saved_ids()
        if saved is None:  # an index saved without them (an older build): read from the graph
            labels = set(self.vectors.index.get_ids_list())
            saved = {
                label_of(mid): mid
                for mid, _ in source.stored_vectors(self.graph.store)
                if label_of(mid) in labels
            }
            self.vectors.known(saved)
            if labels:
                self.vectors.save_ids()  # the next open reads them from there
        else:
            self.vectors.known(saved)
        self.catch_up()
        self.warm()

    # -- reading the graph (``projections.index_source``) -----------------------------------
    def memory_vector(self, memory_id: str) -> np.ndarray | None:
        return source.memory_vector(self.graph.store, memory_id, self.model, self.vectors.dim)

    def stale(self, memory_id: str) -> bool:
        """Embedded by this index's model, but its vector dropped (a revision changed its words)."""
        return source.stale(self.graph.store, memory_id, self.model)

    def stale_words(self, memory_ids: Iterable[str]) -> dict[str, tuple[str, str]]:
        """``words`` of the stale ones: what ``refresh`` embeds (nothing without an ``embed``)."""
        if self.embed is None:
            return {}
        return source.words(self.graph.store, (mid for mid in memory_ids if self.stale(mid)))

    def embed_words(self, words: dict[str, tuple[str, str]]) -> dict[str, np.ndarray]:
        """Vectors of ``words`` by ``embed``; reads nothing of the graph, so it may run in a thread."""
        if self.embed is None or not words:
            return {}
        return dict(zip(words, self.embed(list(words.values())), strict=True))

    def warm(self) -> None:
        """Nothing is read ahead as the store opens but what every read needs: the caches of the
        memories' facts fill as reads ask for them (a candidate's lean facts, a context item's
        display, a point's exact vector, the conversation threads), and the top tier's holders on
        the first context. Reading every memory's facts ahead took 18 s at 100k memories, all of
        it before a cold tenant's first read (issue 37); the first recall after an open now reads
        its own candidates (~0.1 ms each) and the next finds them cached."""
        # the caches are long-lived and acyclic: out of the collector's way, or every full
        # collection walks them (measured: +8 ms p95 on a recall at 100k memories)
        gc.freeze()

    def _settle(self) -> None:
        """The caches are long-lived and acyclic: each time they have doubled since, what is held
        is moved out of the collector's way (``gc.freeze``), as ``warm`` does as the store opens."""
        size = len(self._lean) + len(self._display)
        if size >= 2 * self._frozen_at:
            self._frozen_at = size
            gc.freeze()

    def _place_all(self) -> None:
        """Every High or Critical memory under who holds it, what ``warm`` read ahead before for
        every memory, now on the first context: the top tier found by its importance values (an
        index lookup each, ~60 ms at 100k memories, where a scan of every importance took 1.1 s),
        then who holds each (~0.3 s for 12k)."""
        store = self.graph.store
        importance = e("importance")
        top = [
            q.subject
            for level in v.Importance
            if level >= v.Importance.HIGH
            for q in store.quads_for_pattern(None, importance, Literal(int(level)), ASSERTED)
            if q.subject.value.startswith(MEMORY_PREFIX)  # type: ignore[union-attr]
        ]
        on_team = {
            q.subject
            for q in store.quads_for_pattern(None, e("scope"), Literal(v.Scope.TEAM.value), ASSERTED)
        }
        user_of = e("stakeholderUser")
        self._holders, self._held = {}, {}
        for node in top:
            teams: frozenset[str] = frozenset()
            if node in on_team:
                found = store.quads_for_pattern(node, e("stakeholderTeam"), None, ASSERTED)  # type: ignore[arg-type]
                teams = frozenset(q.object.value for q in found)  # type: ignore[misc]
            user = next(store.quads_for_pattern(node, user_of, None, ASSERTED), None)  # type: ignore[arg-type]
            keys = _holder_keys(user.object.value if user is not None else None, teams)  # type: ignore[union-attr]
            memory_id = source.memory_id_of(node)  # type: ignore[arg-type]
            for key in keys:
                self._holders.setdefault(key, set()).add(memory_id)
            self._held[memory_id] = keys
        self._unplaced.clear()
        self._placed = True

    def clock(self) -> str | None:
        """The tenant's clock, which recency and forgetting are computed against: its clock node
        (ClockTicked), else the latest valid time of a memory it holds; never the server's wall
        clock, so an old history is ranked as it was when it was current, and a replay or an
        ``as_of`` read ranks exactly as the live read did."""
        found = next(self.graph.store.quads_for_pattern(CLOCK, e("now"), None, ASSERTED), None)
        if found is not None:
            return found.object.value
        return self.threads.latest_valid() or None

    def neighbours(self, memory_id: str, window: int) -> list[str]:
        """The memories of the same conversation next to this one in valid time (``Threads``)."""
        return self.threads.neighbours(memory_id, window)

    def candidate(self, memory_id: str) -> MemoryFacts | None:
        """A memory's lean facts for eligibility and ranking, cheap enough for every candidate.

        Its own fields change only through events this index refreshes (which drop them from the
        cache); whether it is active or expired is the rules' and is looked up fresh every time.
        """
        base = self._lean.get(memory_id)
        if base is None:
            base = memory_facts(self.graph, memory_id, lean=True)
            if base is None:
                return None
            if len(self._lean) >= LEAN_CACHE:
                self._lean.clear()
                self._checked.clear()
            self._lean[memory_id] = base
            self._settle()
        generation = self.graph.generation
        if self._checked.get(memory_id) == generation:  # nothing was written since it was looked up
            return base
        m = memory_iri(memory_id)
        store = self.graph.store
        active = Quad(m, RDF_TYPE, ACTIVE, INFERRED) in store
        expired = Quad(m, RDF_TYPE, EXPIRED, INFERRED) in store
        if (active, expired) != (base.active, base.expired):
            base = self._lean[memory_id] = dataclasses.replace(base, active=active, expired=expired)
        if len(self._checked) >= LEAN_CACHE:
            self._checked.clear()
        self._checked[memory_id] = generation
        return base

    def resident_bytes(self) -> int:
        """What the indexes and their caches of the graph's facts hold in memory, estimated."""
        cached = len(self._lean) + len(self._display) + len(self._derived)
        return self.text.resident_bytes() + self.vectors.resident_bytes() + LEAN_BYTES * cached

    def _unhold(self, memory_id: str) -> None:
        for key in self._held.pop(memory_id, ()):
            self._holders[key].discard(memory_id)

    def _hold(self, lean: MemoryFacts) -> None:
        self._unhold(lean.id)
        if lean.importance < v.Importance.HIGH:
            return
        keys = _holder_keys(lean.user, lean.teams)
        for key in keys:
            self._holders.setdefault(key, set()).add(lean.id)
        self._held[lean.id] = keys

    def top_tier_held(self, user: str | None, teams: Iterable[str]) -> list[str]:
        """High and Critical memories this user or these teams hold (a superset of what they may
        see: the caller still checks each, as facts read now)."""
        if not self._placed:
            self._place_all()
        for memory_id in sorted(self._unplaced):
            if (lean := self.candidate(memory_id)) is None:
                self._unhold(memory_id)  # gone: held by no one
            else:
                self._hold(lean)
        self._unplaced.clear()
        return sorted({m for key in _holder_keys(user, teams) for m in self._holders.get(key, ())})

    def candidates(self, memory_ids: Iterable[str]) -> list[MemoryFacts]:
        """``candidate`` of each, leaving out those that are not memories (any more)."""
        candidate = self.candidate
        return [found for memory_id in memory_ids if (found := candidate(memory_id)) is not None]

    def derived(self, memory_id: str) -> dict[str, list[Any]]:
        """The rules' facts about a memory by predicate name, read again only after a write."""
        generation = self.graph.generation
        found = self._derived.get(memory_id)
        if found is not None and found[0] == generation:
            return found[1]
        facts = inferred_by_name(self.graph, memory_id)
        if len(self._derived) >= LEAN_CACHE:
            self._derived.clear()
        self._derived[memory_id] = (generation, facts)
        return facts

    def display(self, lean: MemoryFacts) -> MemoryFacts:
        """``lean`` with what a context item shows; that part changes only with the memory's events."""
        shown = self._display.get(lean.id)
        if shown is None:
            if len(self._display) >= LEAN_CACHE:
                self._display.clear()
            shown = self._display[lean.id] = with_display(self.graph, lean)
            self._settle()
        if (shown.active, shown.expired) != (lean.active, lean.expired):
            shown = self._display[lean.id] = dataclasses.replace(
                shown, active=lean.active, expired=lean.expired
            )
        return shown

    def tokens(self, memory_id: str, text: str, count: Callable[[str], int]) -> int:
        """Tokens of a memory's text, counted once per version of it."""
        found = self._tokens.get(memory_id)
        if found is None or found[0] != text:
            if len(self._tokens) >= LEAN_CACHE:
                self._tokens.clear()
            found = self._tokens[memory_id] = (text, count(text))
        return found[1]

    # -- writing ----------------------------------------------------------------------------
    def refresh(self, memory_ids: Iterable[str], fresh: dict[str, np.ndarray] | None = None) -> None:
        """Re-read these memories from the graph into both indexes (not yet committed); a revised
        one whose vector was dropped takes its vector from ``fresh`` (the indexer embeds them off
        the event loop), else is embedded here (with ``embed``)."""
        memory_ids = list(memory_ids)
        if fresh is None:
            fresh = self.embed_words(self.stale_words(memory_ids))
        for memory_id in memory_ids:
            self._lean.pop(memory_id, None)
            self._display.pop(memory_id, None)
            self._checked.pop(memory_id, None)
            self._unplaced.add(memory_id)
            self.threads.rethread(memory_id)
            text = source.memory_text(self.graph.store, memory_id)
            if text is None:
                self.text.delete(memory_id)
            else:
                self.text.upsert(memory_id, text)
            vector = self.memory_vector(memory_id) if text is not None else None
            if vector is None:
                vector = fresh.get(memory_id)
            if vector is None:
                self.vectors.delete(memory_id)
            else:
                self.vectors.upsert(memory_id, vector)

    def stage(self, position: Position | None) -> None:
        """The refreshed memories are searchable (the text index's overlay, the vectors' graph in
        memory) and reflect the log up to ``position``; the text index commits them later
        (``streams.indexer``: ``TextIndex.begin_flush``), the vectors every ``SAVE_VECTORS_EVERY``."""
        self.text.stage(position)

    def vectors_due(self) -> bool:
        return self.vectors.unsaved >= SAVE_VECTORS_EVERY

    def commit(self, position: Position | None, *, save_vectors: bool = False) -> None:
        """Make the refreshed memories searchable and durable up to ``position``, now."""
        self.text.stage(position)
        self.text.commit()
        self.text.checkpoint.write(position)
        if save_vectors or self.vectors_due():
            self.save_vectors(position)

    def save_vectors(self, position: Position | None) -> None:
        if self.vectors.unsaved or self.vectors.checkpoint.read() != position:
            self.vectors.save()
            self.vectors.checkpoint.write(position)

    def catch_up(self) -> None:
        cp = self.graph.checkpoint()
        text_cp, vector_cp = self.text.checkpoint.read(), self.vectors.checkpoint.read()
        if cp is None:
            return
        for name, index_cp in (("text", text_cp), ("vectors", vector_cp)):
            if index_cp is None or index_cp.partition != cp.partition or index_cp.offset > cp.offset:
                log.info("%s: rebuilding the %s index from the graph", self.graph.path, name)
                self.rebuild(only=name)
            elif index_cp.offset < cp.offset:
                changed = source.changed_since(self.graph.store, index_cp)
                log.info(
                    "%s: %s index behind by %d memories; catching up", self.graph.path, name, len(changed)
                )
                self.refresh(changed)
        self.commit(cp, save_vectors=True)

    def rebuild(self, *, only: str | None = None, tick: Tick | None = None, reembed: bool = False) -> int:
        """Every memory of the graph into the index(es), from empty; returns how many. A memory with
        no vector of this model is embedded (with ``embed``) if it is stale, or with ``reembed``
        any: a tenant whose memories were embedded by another model."""
        self._lean.clear()
        self._display.clear()
        self._checked.clear()
        self.threads.forget_all()
        ids = source.memory_ids(self.graph.store)
        if only in (None, "text"):
            self.text.clear()
        if only in (None, "vectors"):
            self.vectors.clear()
        todo: list[str] = []  # memories to embed, a batch at a time
        other_model = 0  # memories with a vector of another model only, left without one here
        for i, memory_id in enumerate(ids, start=1):
            text = source.memory_text(self.graph.store, memory_id)
            if only in (None, "text") and text is not None:
                self.text.upsert(memory_id, text)
            if only in (None, "vectors") and text is not None:
                vector = self.memory_vector(memory_id)
                if vector is not None:
                    self.vectors.upsert(memory_id, vector)
                elif self.embed is not None and (reembed or self.stale(memory_id)):
                    todo.append(memory_id)
                elif self._embedded_by_another(memory_id):
                    other_model += 1
            if len(todo) >= EMBED_BATCH or (todo and i == len(ids)):
                for mid, vec in self.embed_words(source.words(self.graph.store, todo)).items():
                    self.vectors.upsert(mid, vec)
                todo = []
            if tick is not None and (
                i % (EMBED_BATCH if self.embed and reembed else 500) == 0 or i == len(ids)
            ):
                tick(i, len(ids))
        if other_model:
            # the embedder changed (or a deployment written with another default was upgraded): these
            # are found by BM25 alone until `engram rebuild-index` embeds them with this model
            log.warning(
                "%s: %d memories have a vector of another model only, none of %s; run `engram "
                "rebuild-index` (server stopped) to embed them, or set ENGRAM_EMBEDDER to their model",
                self.graph.path,
                other_model,
                self.model,
            )
        return len(ids)

    def _embedded_by_another(self, memory_id: str) -> bool:
        models = source.models(self.graph.store, memory_id)
        return bool(models) and self.model not in models

    def close(self) -> None:
        self.save_vectors(self.graph.checkpoint())
        self.text.close()
