"""A tenant's run of events planned as one batch: each event decided against the facts as the
events before it in the batch leave them, the batch committed as one net delta.

``Overlay`` is the store (or nothing, for a tenant without one yet) with the uncommitted delta on
top; ``plan_batch`` decides every step in log order against it, so an event is accepted or refused
exactly as it would be if each event before it had been committed on its own, and one bad event
is refused alone while the rest apply.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from engram.projections.knowledge import Knowledge
from engram.projections.plan import Delta, QuadReads
from engram.projections.terms import META, e, event_iri
from engram.projections.validation import PLAN_ERRORS, checked_plan, rejection_reason
from engram.schemas.checks import Conflict
from engram.schemas.events import Event, Position, content_digest
from pyoxigraph import Literal, NamedNode, Quad, Store


class Status(enum.Enum):
    APPLIED = "applied"
    SKIPPED = "skipped"  # at or below the checkpoint, or the same event id again: already applied
    REJECTED = "rejected"  # invalid against the current facts: dead-lettered, position moves


@dataclass(frozen=True)
class Outcome:
    status: Status
    reason: str | None = None


class AlreadyApplied(Exception):
    """The same event id with the same content: nothing to do."""


@dataclass(frozen=True)
class Step:
    """One record of a tenant's batch: a decoded event, or the reason it was refused before planning
    (undecodable, invalid on its own)."""

    position: Position
    event: Event | None = None
    refusal: str | None = None


class Overlay(QuadReads):
    """What a planner reads: the store's quads with a batch's uncommitted adds and removes on top.

    ``net()`` is the delta against the store as it was: a quad added then removed (or removed then
    added back) within the batch is not in it, so one commit equals the events committed one by one.
    """

    def __init__(self, store: Store | None) -> None:
        self.store = store
        self._added: dict[Quad, None] = {}
        self._by_subject: dict[tuple[NamedNode, NamedNode], list[Quad]] = {}
        self._removed: dict[Quad, None] = {}

    def _stored(self, quad: Quad) -> bool:
        return self.store is not None and quad in self.store

    def apply(self, delta: Delta) -> None:
        for q in delta.removes:
            if q in self._added:
                del self._added[q]
                self._by_subject[(q.subject, q.graph_name)].remove(q)  # type: ignore[index]
            elif self._stored(q):
                self._removed[q] = None
        for q in delta.adds:
            if q in self._removed:
                del self._removed[q]
            elif q not in self._added and not self._stored(q):
                self._added[q] = None
                self._by_subject.setdefault((q.subject, q.graph_name), []).append(q)  # type: ignore[arg-type]

    def net(self) -> Delta:
        return Delta(tuple(self._removed), tuple(self._added))

    def _match(self, subject: NamedNode, predicate: NamedNode | None, graph: NamedNode) -> list[Quad]:
        found = []
        if self.store is not None:
            stored = self.store.quads_for_pattern(subject, predicate, None, graph)
            found = [q for q in stored if q not in self._removed]
        for q in self._by_subject.get((subject, graph), ()):
            if predicate is None or q.predicate == predicate:
                found.append(q)
        return found

    def applied_digest(self, event_id: str) -> str | None:
        found = self._match(event_iri(event_id), e("digest"), META)
        return found[0].object.value if found else None


def prepare(knowledge: Knowledge, event: Event, position: Position, state: Overlay) -> Delta:
    """The delta ``event`` would commit, with its event-id record; raises what the projection refuses.

    An event id applied before is ``AlreadyApplied`` when its content is the same (a retry, a file
    produced twice) and a ``Conflict`` when it is not (an idempotency key reused).
    """
    digest = content_digest(event)
    seen = state.applied_digest(event.event_id)
    if seen == digest:
        raise AlreadyApplied(f"event {event.event_id} was already applied")
    if seen is not None:
        raise Conflict(f"event_id {event.event_id} was already used for a different event")
    delta = checked_plan(knowledge, event, position, state)
    node = event_iri(event.event_id)
    records = (
        Quad(node, e("digest"), Literal(digest), META),
        Quad(node, e("position"), Literal(f"{position.partition}:{position.offset}"), META),
    )
    return Delta(delta.removes, (*delta.adds, *records))


def plan_batch(knowledge: Knowledge, state: Overlay, steps: Sequence[Step]) -> list[Outcome]:
    """Decide each step in order against ``state``, applying what applies to it; one outcome each."""
    outcomes = []
    for step in steps:
        if step.event is None:
            outcomes.append(Outcome(Status.REJECTED, step.refusal))
            continue
        try:
            delta = prepare(knowledge, step.event, step.position, state)
        except AlreadyApplied as dup:
            outcomes.append(Outcome(Status.SKIPPED, str(dup)))
            continue
        except PLAN_ERRORS as exc:
            outcomes.append(Outcome(Status.REJECTED, rejection_reason(exc)))
            continue
        state.apply(delta)
        outcomes.append(Outcome(Status.APPLIED))
    return outcomes
