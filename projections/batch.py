"""A tenant's run of events planned as one batch: each event decided against the facts as the
events before it in the batch leave them, the batch committed as one net delta.

``Overlay`` is the store (or nothing, for a tenant without one yet) with the uncommitted delta on
top; ``plan_batch`` decides every step in log order against it, so an event is accepted or refused
exactly as it would be if each event before it had been committed on its own, and one bad event
is refused alone while the rest apply.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from engram.projections.knowledge import Knowledge
from engram.projections.plan import Delta, QuadReads
from engram.projections.rules.core import core_call
from engram.projections.terms import ASSERTED, META, e, event_iri
from engram.projections.validation import PLAN_ERRORS, checked_plan, rejection_reason
from engram.schemas.checks import Conflict
from engram.schemas.events import Event, Position, content_digest
from pyoxigraph import Literal, NamedNode, Quad, RdfFormat, Store, parse

log = logging.getLogger(__name__)


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
    (undecodable, invalid on its own), or its place in a stretch of live data the core plans
    together (``live``: the group and the record's index in it)."""

    position: Position
    event: Event | None = None
    refusal: str | None = None
    live: tuple[LiveGroup, int] | None = None


@dataclass
class LiveGroup:
    """Consecutive records of a run whose live data (KPIs, spend, the clock) the compiled core decoded
    and plans together (``streams.live_path``), on the run's overlay, when its first is reached:
    one outcome each. If the core declines (an event id used before with other content), each
    record is decided in Python from ``fallback(index)``, its step as Python decodes it."""

    run: Any  # engram._core.LiveRun
    positions: Sequence[Position]
    fallback: Callable[[int], Step]
    outcomes: list[Outcome] | None = None


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


def plan_live_group(state: Overlay, run: Any, positions: Sequence[Position]) -> list[Outcome] | None:
    """A live group planned by the core against ``state`` (the stored facts of the nodes it touches,
    with the batch's changes so far, and whether its event ids were applied), its delta applied to
    ``state``; None if the core declines it, or fails (logged): Python decides it then."""
    facts = [
        (str(q.subject), str(q.predicate), str(q.object))
        for node in run.nodes()
        for q in state._match(NamedNode(node), None, ASSERTED)
    ]
    applied = {i: d for i in set(run.event_ids()) if (d := state.applied_digest(i)) is not None}
    where = [(p.partition, p.offset, p.timestamp_ms) for p in positions]
    try:
        planned = core_call(run.plan, where, facts, applied)
    except RuntimeError:  # a panic in the core (a bug)
        log.exception("the core could not plan a run of live data; planning it in Python")
        return None
    if planned is None:
        return None
    decided, removes, adds = planned
    state.apply(Delta(_quads(removes), _quads(adds)))
    statuses = (Status.APPLIED, Status.SKIPPED)
    return [Outcome(statuses[s], reason) for s, reason in decided]


def _quads(text: str) -> tuple[Quad, ...]:
    return tuple(parse(text, format=RdfFormat.N_QUADS)) if text else ()  # type: ignore[misc]


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
        if step.live is not None:
            group, index = step.live
            if index == 0:
                group.outcomes = plan_live_group(
                    state, group.run, [s.position for s in steps if s.live and s.live[0] is group]
                )
            if group.outcomes is not None:
                outcomes.append(group.outcomes[index])
                continue
            step = group.fallback(index)
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
