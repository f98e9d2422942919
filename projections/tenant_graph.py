"""One tenant's on-disk store: asserted facts, ontology, inferred facts and the checkpoint.

``TenantGraph.apply`` commits an event's delta (from ``projections.plan``) *and* the new
checkpoint in one SPARQL update (one oxigraph transaction), so a crash leaves either both or
neither, and an event at or below the checkpoint is skipped: redelivery is harmless. An event id
applied before is skipped too (same content) or rejected (different content).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from engram.projections.batch import AlreadyApplied, Outcome, Overlay, Status, Step, plan_batch, prepare
from engram.projections.knowledge import Knowledge, load_knowledge
from engram.projections.listing import Listing
from engram.projections.plan import Delta
from engram.projections.rules.engine import Derivation
from engram.projections.terms import (
    ASSERTED,
    GRAPHS,
    INFERRED,
    META,
    ONTOLOGY,
    PROJECTION,
    REMOVED,
    VECTORS,
    Term,
    e,
    event_iri,
)
from engram.schemas import vocabulary as v
from engram.schemas.events import Event, Position
from pyoxigraph import Literal, NamedNode, Quad, Store, Triple

from engram import metrics

__all__ = ["AlreadyApplied", "Outcome", "Planned", "Status", "Step", "StoreLocked", "TenantGraph", "opened"]

log = logging.getLogger(__name__)
_T = TypeVar("_T")


@dataclass(frozen=True)
class Planned:
    """A batch decided against a store, not yet written: what ``commit_planned`` commits."""

    outcomes: list[Outcome]
    delta: Delta  # net, against the store as it was planned
    last: Position | None  # the checkpoint it moves to; None when every step was already applied
    handled: int  # records it moves past (the checkpoint's count of handled records grows by it)


def _nt(quads: Iterable[Quad]) -> str:
    """SPARQL DATA blocks from terms serialised by pyoxigraph (escaped; never raw strings)."""
    by_graph: dict[str, list[str]] = {}
    for q in quads:
        by_graph.setdefault(str(q.graph_name), []).append(f"{q.subject} {q.predicate} {q.object} .")
    return " ".join(f"GRAPH {g} {{ {' '.join(ts)} }}" for g, ts in by_graph.items())


# A value replaced in place (a KPI's, a checkpoint's) leaves a tombstone in RocksDB's memtable,
# and every scan of its subject and predicate steps past all of them until the memtable is flushed
# and compacted: a KPI update went 0.72 -> 3.1 ms over 2,000 updates of one series with nothing
# flushed, and stayed at 0.68-1.1 ms over 6,000 flushing every ~5,000 deletions (``bench/
# kpi_update.py --sustained``). A flush costs 50-100 ms (20-55 ms of CPU) at 10k memories, ~0.1 ms
# an update at this interval. The memtable budget bounds memory, not this: one busy tenant fills
# it slowly; ``TenantStores.flush_over_budget`` flushes for both, between batches, in a thread.
TOMBSTONES_PER_FLUSH = 5_000

# What an open graph holds in memory, for the open tenants' budget (``TenantStores``; measured by
# ``bench/open_tenants.py``, 2026-12-07): a RocksDB store ~4 MiB once open and ~6.5 MiB with its
# block cache warm at 1,000 memories, plus its memtables' unflushed quads (735-790 bytes each,
# its 12 column families); an in-memory store ~500 bytes per quad it holds (~25 per memory).
STORE_OPEN_BYTES = 6 << 20
QUAD_MEMTABLE_BYTES = 768
MEMORY_QUAD_BYTES = 512

# the projection's facts a commit moves (the rules' offset follows once they have caught up)
_MOVED = frozenset({"partition", "offset", "handled", "appendedAt", "inferredOffset"})


class TenantGraph:
    """One tenant's on-disk store: asserted facts, ontology, inferred facts, checkpoint.

    Asserted facts and the checkpoint move together in one transaction. The rules then bring
    the inferred graph up to date and record the offset they reached; a store opened with the
    two out of step (a crash between them) or with a changed ontology or rule set is
    re-materialised from its asserted facts before it is used.
    """

    def __init__(
        self, path: Path, knowledge: Knowledge | None = None, *, memory: Store | None = None
    ) -> None:
        """``memory``: the graph held in this in-memory store (``ENGRAM_STORE=memory``; ``path`` then
        names the tenant's directory for its indexes, and snapshots are its durable copies)."""
        (path.parent if memory is not None else path).mkdir(parents=True, exist_ok=True)
        self.path = path
        self.knowledge = knowledge or load_knowledge()
        self.in_memory = memory is not None
        self._meta_cache: dict[str, Term] | None = None  # the projection's own facts (``_metas``)
        self.store = memory if memory is not None else Store(str(path))
        # what the rules run with for this store: the core keeps the facts they read between updates
        self.reasoner = self.knowledge.engine.reasoner()
        # moves before and after every write, so a reader's cache of derived facts (the search
        # indexes' candidates) knows whether they may have changed since it looked
        self.generation = 0
        self._listing: Listing | None = None  # built on the first list (``listing``)
        # quads written (asserted, checkpoint, inferred) since the store's last flush: its RocksDB
        # memtables hold them, ~750 bytes each, until a flush (``TenantStores.flush_over_budget``)
        self.unflushed = 0
        self.removed_unflushed = 0  # of those, deletions: tombstones every scan over them steps past
        self._ensure_inferred()
        # a disk store that is a cache of its snapshots (set by ``TenantStores``, with ``saved``)
        self.cached = False
        # held (in memory, or cached): the checkpoint its newest snapshot holds (None: none yet); the
        # log after it is durable nowhere but the log itself, so the projector commits no offset past it
        self.saved: Position | None = self.checkpoint() if self.in_memory else None

    @property
    def store(self) -> Store:
        return self._store

    @store.setter
    def store(self, store: Store) -> None:
        """A new store (a reopen, an erasure's copy) is read afresh: no cached fact outlives it."""
        self._store = store
        self._meta_cache = None
        self._quads: int | None = None  # an in-memory store's quads, counted when first asked

    def resident_bytes(self) -> int:
        """What the graph holds in memory, estimated: an in-memory store's quads, or a disk store's
        fixed part and its memtables' unflushed quads."""
        if self.in_memory:
            if self._quads is None:
                self._quads = len(self.store)
            return self._quads * MEMORY_QUAD_BYTES
        return STORE_OPEN_BYTES + self.unflushed * QUAD_MEMTABLE_BYTES

    def _held(self, net: int) -> None:
        """``net`` quads more in the store (an estimate's count, kept only once it is known)."""
        if self._quads is not None:
            self._quads += net

    @property
    def held(self) -> bool:
        """Whether the graph is durable through its snapshots (in memory, or a cache of them)."""
        return self.in_memory or self.cached

    def unsaved(self) -> bool:
        """Whether a held graph holds events its newest snapshot does not."""
        return self.held and self.checkpoint() != self.saved

    # -- state ------------------------------------------------------------------------------
    def objects(self, subject: NamedNode, predicate: NamedNode) -> list[Term]:
        return [q.object for q in self.store.quads_for_pattern(subject, predicate, None, ASSERTED)]  # type: ignore[misc]

    def facts(self, subject: NamedNode) -> list[tuple[NamedNode, Term]]:
        return [(q.predicate, q.object) for q in self.store.quads_for_pattern(subject, None, None, ASSERTED)]  # type: ignore[misc]

    def vectors(self, subject: NamedNode) -> list[Term]:
        return [q.object for q in self.store.quads_for_pattern(subject, e("embedding"), None, VECTORS)]  # type: ignore[misc]

    def listing(self, columns: Iterable[str] = ()) -> Listing:
        """The memories in listing order, holding ``columns`` (``projections.listing``): kept current
        by this graph's commits, built again after any other write (a re-materialisation, an
        erasure's copy, a reopen)."""
        if self._listing is None or self._listing.generation != self.generation:
            self._listing = Listing.build(self.store, self.generation)
        self._listing.need(self.store, columns)
        return self._listing

    def _metas(self) -> dict[str, Term]:
        """The projection's own facts (checkpoint, handled count, the rules' offset and digest) by
        name, read from the store once and then kept with every write of them: this is the store's
        only writer. Each commit replaces them, so in RocksDB their keys collect a tombstone per
        event until a compaction, and a scan of them grows with the events since (measured: a KPI
        update 1.3 -> 10.8 ms over 4,000 updates while they were read from the store)."""
        if self._meta_cache is None:
            quads = self.store.quads_for_pattern(PROJECTION, None, None, META)
            self._meta_cache = {q.predicate.value.removeprefix(v.ENGRAM): q.object for q in quads}  # type: ignore[misc]
        return self._meta_cache

    def _meta(self, name: str) -> Term | None:
        return self._metas().get(name)

    def _set_meta(self, name: str, value: Term | None) -> None:
        metas = self._metas()
        if (old := metas.pop(name, None)) is not None:
            self.store.remove(Quad(PROJECTION, e(name), old, META))
        if value is not None:
            self.store.add(Quad(PROJECTION, e(name), value, META))
            metas[name] = value

    def checkpoint(self) -> Position | None:
        part, off, at = self._meta("partition"), self._meta("offset"), self._meta("appendedAt")
        if part is None or off is None:
            return None
        return Position(int(part.value), int(off.value), int(at.value) if at is not None else 0)

    def handled(self) -> int:
        found = self._meta("handled")
        return int(found.value) if found is not None else 0

    def already_applied(self, position: Position) -> bool:
        cp = self.checkpoint()
        return cp is not None and cp.partition == position.partition and position.offset <= cp.offset

    # -- reasoning --------------------------------------------------------------------------
    def _ensure_inferred(self) -> None:
        k = self.knowledge
        digest = self._meta("knowledgeDigest")
        cp = self.checkpoint()
        offset = self._meta("inferredOffset")
        want = Literal(cp.offset if cp else -1)
        if digest is not None and digest.value == k.digest and offset == want:
            return
        log.info(
            "re-materialising %s (%s)",
            self.path,
            "knowledge changed"
            if digest is None or digest.value != k.digest
            else "inferences behind the checkpoint",
        )
        self.rematerialize()

    def rematerialize(self) -> int:
        """Reload the ontology and recompute every inferred fact from the asserted ones."""
        with self._writing():
            return self._rematerialize()

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """Moves ``generation`` before and after a write, whether it succeeds or not."""
        self.generation += 1
        try:
            yield
        finally:
            self.generation += 1

    def _rematerialize(self) -> int:
        k = self.knowledge
        self._set_meta("knowledgeDigest", None)  # a crash part-way leaves the store marked stale
        self._set_meta("inferredOffset", None)
        self.store.remove_graph(REMOVED)
        self.store.remove_graph(ONTOLOGY)
        self.store.extend(k.ontology.quads(ONTOLOGY))
        self.reasoner = k.engine.reasoner()
        count = self.reasoner.materialize(self.store, GRAPHS)
        self.unflushed += count
        self._quads = None  # recounted when asked: the inferred graph was written again
        cp = self.checkpoint()
        self._set_meta("knowledgeDigest", Literal(k.digest))
        self._set_meta("inferredOffset", Literal(cp.offset if cp else -1))
        return count

    def inferred(self) -> set[Triple]:
        return {q.triple for q in self.store.quads_for_pattern(None, None, None, INFERRED)}

    def explain(self, fact: Triple, *, depth: int = 4) -> list[Derivation]:
        return self.knowledge.engine.explain(self.store, GRAPHS, fact, depth=depth)

    # -- applying events --------------------------------------------------------------------
    def applied_digest(self, event_id: str) -> str | None:
        """The content digest of an event id this store has applied, if any."""
        return Overlay(self.store).applied_digest(event_id)

    def applied_position(self, event_id: str) -> Position | None:
        """Where the log holds the event that applied ``event_id``."""
        found = list(self.store.quads_for_pattern(event_iri(event_id), e("position"), None, META))
        if not found:
            return None
        partition, offset = found[0].object.value.split(":")
        return Position(int(partition), int(offset))

    def plan(self, steps: Sequence[Step]) -> Planned:
        """Decide a run of this tenant's records in log order, each against the facts the ones
        before it leave (nothing is written); steps at or below the checkpoint are skipped."""
        overlay = Overlay(self.store)
        done = [self.already_applied(s.position) for s in steps]
        todo = [s for s, skip in zip(steps, done, strict=True) if not skip]
        decided = iter(plan_batch(self.knowledge, overlay, todo))
        outcomes = [Outcome(Status.SKIPPED) if skip else next(decided) for skip in done]
        return Planned(outcomes, overlay.net(), todo[-1].position if todo else None, len(todo))

    def apply(
        self, event: Event, position: Position, *, before_commit: Callable[[], object] | None = None
    ) -> Outcome:
        """Apply one event: a batch of one (see ``plan`` and ``commit_planned``).

        ``before_commit`` runs once the event is known to apply, just before it is committed (so a
        crash between the two applies it again rather than skipping it).
        """
        planned = self.plan([Step(position, event)])
        if planned.outcomes[0].status is Status.APPLIED and before_commit is not None:
            before_commit()
        self.commit_planned(planned)
        return planned.outcomes[0]

    def prepare(self, event: Event, position: Position) -> Delta:
        """The delta ``event`` would commit now; raises what ``apply`` refuses or skips."""
        return prepare(self.knowledge, event, position, Overlay(self.store))

    def reject(self, position: Position) -> Outcome:
        """Move past a record that could not be decoded or validated at all."""
        planned = self.plan([Step(position, refusal="refused")])
        self.commit_planned(planned)
        return planned.outcomes[0]

    def commit_planned(self, planned: Planned) -> None:
        """A planned batch's net delta and its last position in one transaction; the rules follow."""
        if planned.last is not None:
            with self._writing():
                self._commit(planned.delta, planned.last, planned.handled)

    def commit(self, delta: Delta, position: Position) -> None:
        """Asserted delta + checkpoint in one transaction, then the rules catch up (one record)."""
        with self._writing():
            self._commit(delta, position, 1)

    def _commit(self, delta: Delta, position: Position, handled: int) -> None:
        """The incremental update is only sound from an inferred graph that was current at the
        previous checkpoint; otherwise (an earlier update failed) or if it fails now, the
        inferred graph is recomputed from scratch before the new offset is recorded."""
        previous = self.checkpoint()
        current = self._meta("inferredOffset") == Literal(previous.offset if previous else -1)
        adds = [q for q in delta.adds if q not in self.store]
        removes = [q for q in delta.removes if q in self.store]
        metas = {
            **{name: value for name, value in self._metas().items() if name not in _MOVED},
            "partition": Literal(position.partition),
            "offset": Literal(position.offset),
            "handled": Literal(self.handled() + handled),
            # the log time of the checkpoint's event: where a snapshot of this state sits in time
            "appendedAt": Literal(position.timestamp_ms),
        }
        meta_old = [Quad(PROJECTION, e(name), value, META) for name, value in self._metas().items()]
        meta_new = [Quad(PROJECTION, e(name), value, META) for name, value in metas.items()]
        parts = []
        if removes or meta_old:
            parts.append(f"DELETE DATA {{ {_nt([*removes, *meta_old])} }}")
        parts.append(f"INSERT DATA {{ {_nt([*adds, *meta_new])} }}")
        self.store.update(" ; ".join(parts))
        self._meta_cache = metas
        listing = self._listing
        if listing is not None and listing.generation == self.generation - 1:  # current before this write
            listing.apply(adds, removes)
            listing.generation = self.generation + 1  # what ``_writing`` leaves when this returns
        self.unflushed += len(adds) + len(removes) + len(meta_old) + len(meta_new)
        self._held(len(adds) - len(removes))
        self.removed_unflushed += len(removes) + len(meta_old)
        if not current:
            log.warning("%s: inferences were not current; re-materialising", self.path)
            self._rematerialize()
            return
        try:
            added = [q.triple for q in adds if q.graph_name == ASSERTED]
            removed = [q.triple for q in removes if q.graph_name == ASSERTED]
            if added or removed:
                started = time.perf_counter()
                stats = self.reasoner.update(self.store, GRAPHS, added, removed)
                self.unflushed += stats.added + stats.removed
                self._held(stats.added - stats.removed)
                self.removed_unflushed += stats.removed
                metrics.rule_seconds.observe(time.perf_counter() - started)
        except Exception:
            log.exception("%s: incremental rule update failed; re-materialising", self.path)
            self._rematerialize()
            return
        self._set_meta("inferredOffset", Literal(position.offset))

    def quads(self, graph: NamedNode = ASSERTED) -> Iterator[Quad]:
        return self.store.quads_for_pattern(None, None, None, graph)

    def tombstones_due(self) -> bool:
        """Whether the deletions since the last flush call for one (``TOMBSTONES_PER_FLUSH``)."""
        return not self.in_memory and self.removed_unflushed >= TOMBSTONES_PER_FLUSH

    def flush(self) -> None:
        if not self.in_memory:
            self.store.flush()
        self.unflushed = self.removed_unflushed = 0

    def reopen(self, move: Callable[[], None]) -> None:
        """Close the store, let ``move`` replace its directory (a vacuum's fresh copy), open it again,
        in this same object: whoever holds the graph keeps one that works. Nothing else may hold
        ``store`` itself meanwhile (RocksDB's lock goes with its last reference)."""
        self.flush()
        self.generation += 1
        self.store = None  # type: ignore[assignment]
        gc.collect()
        move()
        self.store = Store(str(self.path))
        self.reasoner = self.knowledge.engine.reasoner()  # built again from the new store when next used
        self.generation += 1


class StoreLocked(Exception):
    """Another opener holds the tenant's store (RocksDB's lock): another process on this data dir."""

    def __init__(self, tenant: str, cause: OSError) -> None:
        super().__init__(
            f"the store of tenant {tenant!r} is locked by another process using the same data "
            f"directory ({str(cause)[:200]})"
        )


class StoreOpening(StoreLocked):
    """The tenant's store is being opened in a thread (``TenantStores.get_async``): asked again in
    a moment (an HTTP read is a 503 with Retry-After), it is open."""

    def __init__(self, tenant: str) -> None:  # not StoreLocked.__init__: no lock error to name
        Exception.__init__(self, f"the store of tenant {tenant!r} is being opened")


def opened(tenant: str, opener: Callable[[], _T]) -> _T:
    """``opener()``, with RocksDB's lock error (another process has the store) as StoreLocked."""
    try:
        return opener()
    except OSError as exc:
        if "lock" in str(exc).lower():
            raise StoreLocked(tenant, exc) from exc
        raise
