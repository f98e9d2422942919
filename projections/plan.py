"""The projection proper: what an event changes in a tenant's asserted facts.

``plan(event, position, state)`` is a pure function of the event, its log position and the
current facts; it returns the quads to remove and to add (a ``Delta``) or raises
``InvalidEvent`` when the event cannot apply to those facts. Each event type has one planner,
registered with ``@planner``; the RDF shape of a memory is defined here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar

from engram.projections.terms import (
    ASSERTED,
    RDF_TYPE,
    REDACTED,
    VECTORS,
    Term,
    e,
    memory_iri,
    time_literal,
    value_literal,
    vector_literal,
)
from engram.schemas import payloads as ev
from engram.schemas import vocabulary as v
from engram.schemas.checks import Conflict, InvalidEvent, parse_time
from engram.schemas.events import Event, Position
from engram.schemas.sealing import ERASED
from pyoxigraph import Literal, NamedNode, Quad


class GraphState(Protocol):
    """What a projection may read of the current asserted facts (and a memory's vectors)."""

    def objects(self, subject: NamedNode, predicate: NamedNode) -> list[Term]: ...

    def facts(self, subject: NamedNode) -> list[tuple[NamedNode, Term]]: ...

    def vectors(self, subject: NamedNode) -> list[Term]: ...


@dataclass(frozen=True)
class Delta:
    removes: tuple[Quad, ...] = ()
    adds: tuple[Quad, ...] = ()


class QuadReads:
    """``GraphState``'s reads over ``_match``: the one place that says which graph each read looks in."""

    def _match(self, subject: NamedNode, predicate: NamedNode | None, graph: NamedNode) -> list[Quad]:
        raise NotImplementedError

    def objects(self, subject: NamedNode, predicate: NamedNode) -> list[Term]:
        return [q.object for q in self._match(subject, predicate, ASSERTED)]  # type: ignore[misc]

    def facts(self, subject: NamedNode) -> list[tuple[NamedNode, Term]]:
        return [(q.predicate, q.object) for q in self._match(subject, None, ASSERTED)]  # type: ignore[misc]

    def vectors(self, subject: NamedNode) -> list[Term]:
        return [q.object for q in self._match(subject, e("embedding"), VECTORS)]  # type: ignore[misc]


class FactSet(QuadReads):
    """Asserted facts and vectors held in memory: the state before a tenant's first event (what a
    write is checked against at the edge), and the reference the store's state is tested against."""

    def __init__(self, quads: Iterable[Quad] = ()) -> None:
        self._quads: dict[Quad, None] = dict.fromkeys(quads)

    def apply(self, delta: Delta) -> None:
        for q in delta.removes:
            self._quads.pop(q, None)
        self._quads.update(dict.fromkeys(delta.adds))

    def _match(self, subject: NamedNode, predicate: NamedNode | None, graph: NamedNode) -> list[Quad]:
        return [
            q
            for q in self._quads
            if q.subject == subject and q.graph_name == graph and predicate in (None, q.predicate)
        ]


def no_facts() -> FactSet:
    """The state of a tenant that has no events yet."""
    return FactSet()


class Builder:
    """Collects a delta; replacing a value removes whatever the subject had for the predicate."""

    def __init__(self, state: GraphState, event: Event, position: Position) -> None:
        self.state = state
        self.event = event
        self.recorded = datetime.fromtimestamp(position.timestamp_ms / 1000, UTC)  # system time
        self.position = position
        self.removes: list[Quad] = []
        self.adds: list[Quad] = []

    def add(self, s: NamedNode, p: NamedNode, o: Term, graph: NamedNode = ASSERTED) -> None:
        self.adds.append(Quad(s, p, o, graph))

    def clear(self, s: NamedNode, p: NamedNode) -> None:
        self.removes.extend(Quad(s, p, o, ASSERTED) for o in self.state.objects(s, p))

    def replace(self, s: NamedNode, p: NamedNode, o: Term | None) -> None:
        self.clear(s, p)
        if o is not None:
            self.add(s, p, o)

    def existing(self, memory_id: str) -> NamedNode:
        m = memory_iri(memory_id)
        if not self.state.objects(m, e("memoryId")):
            raise InvalidEvent(f"unknown memory {memory_id}")
        return m

    def touch(self, m: NamedNode) -> None:
        """Lineage: every event that changed a memory stays linked to it."""
        self.add(m, e("changedBy"), Literal(self.event.event_id))
        self.replace(m, e("updatedAt"), time_literal(self.recorded))

    def delta(self) -> Delta:
        adds = set(self.adds)
        removes = [q for q in dict.fromkeys(self.removes) if q not in adds]
        return Delta(tuple(removes), tuple(dict.fromkeys(self.adds)))


P = TypeVar("P", bound=ev.Payload)
Planner = Callable[[Builder, Any], None]
PLANNERS: dict[type[ev.Payload], Planner] = {}


def planner(payload_type: type[P]) -> Callable[[Callable[[Builder, P], None]], Callable[[Builder, P], None]]:
    """Register the function that projects one event type."""

    def register(fn: Callable[[Builder, P], None]) -> Callable[[Builder, P], None]:
        PLANNERS[payload_type] = fn
        return fn

    return register


def plan(event: Event, position: Position, state: GraphState) -> Delta:
    """The asserted facts an event changes; raises InvalidEvent if it cannot apply to ``state``."""
    b = Builder(state, event, position)
    PLANNERS[type(event.payload)](b, event.payload)
    return b.delta()


# The shared fields of a memory that a revision may change, and their predicates.
FIELD_PREDICATES: Mapping[str, NamedNode] = {
    "label": e("label"),
    "content": e("content"),
    "kind": e("kind"),
    "importance": e("importance"),
    "confidence": e("confidence"),
    "expires_at": e("expiresAt"),
}


def _field_literal(name: str, value: Any) -> Literal | None:
    if value is None:
        return None
    if name == "expires_at":
        return time_literal(parse_time(value, "expires_at"))
    if name == "confidence":
        return value_literal(float(value))
    return value_literal(value)


@planner(ev.MemoryRemembered)
def _remembered(b: Builder, p: ev.MemoryRemembered) -> None:
    m = memory_iri(p.memory_id)
    if b.state.objects(m, e("rememberedBy")):
        # the same words whoever holds the id and whether or not the writer may see it: ids are
        # tenant-wide, so that one is taken is all a writer learns (README, Governance)
        raise Conflict(f"memory {p.memory_id} already exists: leave memory_id out to have one minted")
    event = b.event
    cls = NamedNode(v.class_iri(p.memory_class or "Memory"))
    b.add(m, RDF_TYPE, cls)
    b.add(m, e("memoryClass"), cls)
    b.add(m, e("memoryId"), Literal(p.memory_id))
    b.add(m, e("rememberedBy"), Literal(event.event_id))
    b.add(m, e("label"), Literal(p.label))
    b.add(m, e("content"), Literal(p.content))
    b.add(m, e("kind"), Literal(p.kind.value))
    b.add(m, e("scope"), Literal(p.scope.value))
    if p.stakeholders.user_id:
        b.add(m, e("stakeholderUser"), Literal(p.stakeholders.user_id))
    for team in p.stakeholders.team_ids:
        b.add(m, e("stakeholderTeam"), Literal(team))
    b.add(m, e("importance"), Literal(int(p.importance)))
    b.add(m, e("confidence"), value_literal(float(p.confidence)))
    if p.expires_at is not None:
        b.add(m, e("expiresAt"), time_literal(p.expires_at))
    for name, value in p.properties.items():
        if value is not None:
            b.add(m, e(name), value_literal(value))
    if p.embedding_model:
        b.add(m, e("embeddingModel"), Literal(p.embedding_model))
    if p.embedding:
        b.add(m, e("embedding"), vector_literal(p.embedding), VECTORS)
    b.add(m, e("source"), Literal(event.source))
    b.add(m, e("actor"), Literal(event.actor.id))
    b.add(m, e("actorRole"), Literal(event.actor.role))
    b.add(m, e("validFrom"), time_literal(event.occurred_at))
    b.add(m, e("recordedAt"), time_literal(b.recorded))
    b.add(m, e("updatedAt"), time_literal(b.recorded))
    b.add(m, e("changedBy"), Literal(event.event_id))
    if event.purpose:
        b.add(m, e("purpose"), Literal(event.purpose))
    if p.evidence is not None:  # ids only, no words: kept when the memory is forgotten
        b.add(m, e("evidenceConversation"), Literal(p.evidence.conversation_id))
        for turn in p.evidence.turn_ids:
            b.add(m, e("evidenceTurn"), Literal(turn))
    if p.replaces:
        old = b.existing(p.replaces)
        b.replace(old, e("supersededBy"), m)
        b.replace(old, e("validTo"), time_literal(event.occurred_at))
    if p.proposes:  # a proposal: inactive (rules/active.dlog) until a ProposalDecided accepts it
        for old_id in p.proposed:  # one :proposes per memory it would replace
            b.add(m, e("proposes"), b.existing(old_id))
        b.add(m, e("proposalStatus"), Literal(v.ProposalStatus.PENDING.value))


@planner(ev.MemoryRevised)
def _revised(b: Builder, p: ev.MemoryRevised) -> None:
    m = b.existing(p.memory_id)
    if b.state.objects(m, e("forgotten")):
        raise InvalidEvent(f"memory {p.memory_id} is forgotten; there is nothing left to revise")
    for name, value in p.changes.items():
        b.replace(m, FIELD_PREDICATES[name], _field_literal(name, value))
    for name, value in p.property_changes.items():
        b.replace(m, e(name), None if value is None else value_literal(value))
    if "label" in p.changes or "content" in p.changes:
        # the vector was of the old words: dropped, the model kept, so the indexer embeds it anew
        b.removes.extend(Quad(m, e("embedding"), o, VECTORS) for o in b.state.vectors(m))
    b.touch(m)


@planner(ev.MemorySuperseded)
def _superseded(b: Builder, p: ev.MemorySuperseded) -> None:
    old, new = b.existing(p.memory_id), b.existing(p.superseded_by)
    b.replace(old, e("supersededBy"), new)
    # valid time: the old belief held until the new one began to
    b.replace(old, e("validTo"), next(iter(b.state.objects(new, e("validFrom"))), None))
    b.touch(old)


@planner(ev.ProposalDecided)
def _decided(b: Builder, p: ev.ProposalDecided) -> None:
    """Accepted: the proposal is active and supersedes every memory it proposed to replace, as a
    MemorySuperseded of each would, or none: refused if any is no longer active (the question the
    person answered is not the one that stands). Rejected: it stays inactive. Either way once, and
    who decided is kept."""
    m = b.existing(p.memory_id)
    status = next((s.value for s in b.state.objects(m, e("proposalStatus"))), None)
    if status is None:
        raise InvalidEvent(f"memory {p.memory_id} is not a proposal")
    if status != v.ProposalStatus.PENDING:
        raise Conflict(f"proposal {p.memory_id} is already {status}")
    if b.state.objects(m, e("forgotten")):
        raise Conflict(f"proposal {p.memory_id} is forgotten; there is nothing left to decide")
    if p.decision == v.ProposalDecision.ACCEPTED:
        olds = sorted(
            (o for o in b.state.objects(m, e("proposes")) if isinstance(o, NamedNode)), key=_node_id
        )
        gone = [
            _node_id(o)
            for o in olds
            if b.state.objects(o, e("supersededBy")) or b.state.objects(o, e("forgotten"))
        ]
        if gone:
            names = ("memory " if len(gone) == 1 else "memories ") + ", ".join(gone)
            raise Conflict(
                f"{names}, which {p.memory_id} proposes to replace, "
                f"{'is' if len(gone) == 1 else 'are'} no longer active"
            )
        valid_from = next(iter(b.state.objects(m, e("validFrom"))), None)
        for old in olds:
            b.replace(old, e("supersededBy"), m)
            b.replace(old, e("validTo"), valid_from)
            b.touch(old)
    actor = b.event.actor
    b.replace(m, e("proposalStatus"), Literal(p.decision.value))
    b.replace(m, e("decidedBy"), Literal(actor.id))
    b.replace(m, e("decidedByRole"), Literal(actor.role))
    b.replace(m, e("decidedFor"), Literal(actor.acting_user))
    b.replace(m, e("decidedAt"), time_literal(b.event.occurred_at))
    if p.reason:
        b.replace(m, e("decisionReason"), Literal(p.reason))
    b.touch(m)


def _node_id(node: NamedNode) -> str:
    return node.value.rsplit(":", 1)[-1]


@planner(ev.MemoryRestored)
def _restored(b: Builder, p: ev.MemoryRestored) -> None:
    m = b.existing(p.memory_id)
    if not b.state.objects(m, e("supersededBy")):
        raise InvalidEvent(f"memory {p.memory_id} is not superseded; nothing to restore")
    b.clear(m, e("supersededBy"))
    b.clear(m, e("validTo"))  # it holds again, open-ended
    b.touch(m)


@planner(ev.MemoryForgotten)
def _forgotten(b: Builder, p: ev.MemoryForgotten) -> None:
    m = b.existing(p.memory_id)
    if hold := b.state.objects(m, e("legalHold")):
        raise Conflict(f"memory {p.memory_id} is under a legal hold ({hold[0].value}); release it first")
    # what is left is what a replay makes of the memory once its key is destroyed (schemas.sealing):
    # no label, content, class properties or vector, and the plain Memory class
    b.replace(m, e("label"), Literal(ERASED))
    b.replace(m, e("content"), Literal(REDACTED))
    b.removes.extend(Quad(m, e("embedding"), o, VECTORS) for o in b.state.vectors(m))
    b.replace(m, e("embeddingModel"), None)
    for predicate, value in b.state.facts(m):
        if predicate.value.removeprefix(v.ENGRAM) not in v.MEMORY_PREDICATES and predicate != RDF_TYPE:
            b.removes.append(Quad(m, predicate, value, ASSERTED))
    plain = NamedNode(v.class_iri("Memory"))
    b.removes.extend(Quad(m, RDF_TYPE, c, ASSERTED) for c in b.state.objects(m, RDF_TYPE) if c != plain)
    b.replace(m, e("memoryClass"), plain)
    b.add(m, RDF_TYPE, plain)
    b.replace(m, e("forgotten"), Literal(True))
    b.replace(m, e("forgottenAt"), time_literal(b.event.occurred_at))
    if p.reason:
        b.replace(m, e("forgottenReason"), Literal(p.reason))
    b.touch(m)


@planner(ev.LegalHoldPlaced)
def _held(b: Builder, p: ev.LegalHoldPlaced) -> None:
    m = b.existing(p.memory_id)
    if b.state.objects(m, e("forgotten")):
        raise InvalidEvent(f"memory {p.memory_id} is forgotten; there is nothing left to hold")
    b.replace(m, e("legalHold"), Literal(p.reason or "legal hold"))
    b.touch(m)


@planner(ev.LegalHoldReleased)
def _released(b: Builder, p: ev.LegalHoldReleased) -> None:
    m = b.existing(p.memory_id)
    if not b.state.objects(m, e("legalHold")):
        raise InvalidEvent(f"memory {p.memory_id} is not under a legal hold")
    b.clear(m, e("legalHold"))
    b.touch(m)


def _elsewhere(b: Builder, p: ev.ConversationEvent) -> None:
    """Capture's events are projected by the conversation store, from the conversations topic: one
    on the events topic was put there by hand, and is refused (dead-lettered) with where it goes."""
    raise InvalidEvent(f"{type(p).__name__} belongs on engram.conversations, not the events topic")


for _conversation_type in (ev.ConversationTurn, ev.TurnsExtracted, ev.ConversationErased):
    planner(_conversation_type)(_elsewhere)


# The live-data and agent-work planners live in their own modules; importing them registers them.
from engram.projections import plan_agents, plan_live  # noqa: E402, F401

_unplanned = [name for name, cls in ev.PAYLOADS.items() if cls not in PLANNERS]
if _unplanned:  # fail at import: an event type the projection cannot apply is a build error
    raise ImportError(f"no @planner for {', '.join(_unplanned)} in projections/plan.py")
