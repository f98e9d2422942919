"""The tenant's graph: events become asserted facts, applied atomically with the checkpoint.

``plan`` is the projection proper: a pure function of an event, its log position and the current
facts, returning the quads to remove and to add. ``TenantGraph.apply`` commits that delta *and*
the new checkpoint in one SPARQL update (one oxigraph transaction), so a crash leaves either
both or neither, and an event at or below the checkpoint is skipped: redelivery is harmless.
"""

from __future__ import annotations

import base64
import enum
import logging
import math
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from pyoxigraph import Literal, NamedNode, Quad, Store, Triple

from projections.knowledge import Knowledge, load_knowledge
from projections.rules.engine import Graphs
from schemas import vocabulary as v
from schemas.events import Conflict, Event, InvalidEvent, Position, content_digest, parse_time

log = logging.getLogger(__name__)

ASSERTED = NamedNode(v.GRAPH_ASSERTED)
INFERRED = NamedNode(v.GRAPH_INFERRED)
ONTOLOGY = NamedNode(v.GRAPH_ONTOLOGY)
REMOVED = NamedNode("urn:engram:graph:removed")  # scratch, only during a rule update
META = NamedNode(v.GRAPH_META)
VECTORS = NamedNode(v.GRAPH_VECTORS)  # a memory's embedding; invisible to the rules
GRAPHS = Graphs(base=(ASSERTED, ONTOLOGY), inferred=INFERRED, removed=REMOVED)
RDF_TYPE = NamedNode(v.RDF_TYPE)
XSD_DATETIME = NamedNode(v.XSD + "dateTime")
COMPANY = NamedNode("urn:engram:company")
CLOCK = NamedNode("urn:engram:clock")
PROJECTION = NamedNode("urn:engram:projection")
REDACTED = "[redacted]"

Term = NamedNode | Literal


def e(local: str) -> NamedNode:
    """A term of engram's own vocabulary."""
    return NamedNode(v.ENGRAM + local)


def memory_iri(memory_id: str) -> NamedNode:
    return NamedNode(f"urn:engram:memory:{memory_id}")


def kpi_iri(metric: str) -> NamedNode:
    return NamedNode(f"urn:engram:kpi:{metric}")


def spend_iri(platform: str) -> NamedNode:
    return NamedNode(f"urn:engram:spend:{platform}")


def user_iri(user_id: str) -> NamedNode:
    return NamedNode(f"urn:engram:user:{user_id}")


def event_iri(event_id: str) -> NamedNode:
    return NamedNode(f"urn:engram:event:{event_id}")


def time_literal(value: datetime) -> Literal:
    """An xsd:dateTime in the store's canonical form: UTC, ``Z``, no trailing zeros in the fraction.

    Oxigraph compares times by value but writes them back canonically; building the same form
    here keeps "replace with an equal time" a no-op instead of a removal.
    """
    text = value.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "")
    whole, _, fraction = text.partition(".")
    fraction = fraction.rstrip("0")
    return Literal(f"{whole}.{fraction}Z" if fraction else f"{whole}Z", datatype=XSD_DATETIME)


def vector_literal(vector: Sequence[float]) -> Literal:
    """An embedding as one literal: base64 of little-endian float32, the form the index reads."""
    return Literal(base64.b64encode(array("f", vector).tobytes()).decode("ascii"))


def value_literal(value: Any) -> Literal:
    """A typed literal for a property value: boolean, integer, double or string, canonical."""
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidEvent(f"numbers must be finite, got {value!r}")
        return Literal(value + 0.0)  # -0.0 + 0.0 is 0.0: one zero
    if isinstance(value, bool | int | str):
        return Literal(value)
    raise InvalidEvent(f"unsupported property value {value!r}")


# The shared fields of a memory and their predicates; the RDF shape of a memory is defined here.
FIELD_PREDICATES: Mapping[str, NamedNode] = {
    "label": e("label"),
    "content": e("content"),
    "kind": e("kind"),
    "importance": e("importance"),
    "confidence": e("confidence"),
    "expires_at": e("expiresAt"),
}


class GraphState(Protocol):
    """What a projection may read of the current asserted facts."""

    def objects(self, subject: NamedNode, predicate: NamedNode) -> list[Term]: ...

    def facts(self, subject: NamedNode) -> list[tuple[NamedNode, Term]]: ...

    def vectors(self, subject: NamedNode) -> list[Term]: ...


@dataclass(frozen=True)
class Delta:
    removes: tuple[Quad, ...] = ()
    adds: tuple[Quad, ...] = ()


class _Builder:
    """Collects a delta; replacing a value removes whatever the subject had for the predicate."""

    def __init__(self, state: GraphState) -> None:
        self.state = state
        self.removes: list[Quad] = []
        self.adds: list[Quad] = []

    def add(self, s: NamedNode, p: NamedNode, o: Term) -> None:
        self.adds.append(Quad(s, p, o, ASSERTED))

    def clear(self, s: NamedNode, p: NamedNode) -> None:
        self.removes.extend(Quad(s, p, o, ASSERTED) for o in self.state.objects(s, p))

    def replace(self, s: NamedNode, p: NamedNode, o: Term | None) -> None:
        self.clear(s, p)
        if o is not None:
            self.add(s, p, o)

    def delta(self) -> Delta:
        adds = set(self.adds)
        removes = [q for q in dict.fromkeys(self.removes) if q not in adds]
        return Delta(tuple(removes), tuple(dict.fromkeys(self.adds)))


def plan(event: Event, position: Position, state: GraphState) -> Delta:
    """The asserted facts an event changes; raises InvalidEvent if it cannot apply to ``state``."""
    b = _Builder(state)
    p = event.payload
    recorded = datetime.fromtimestamp(position.timestamp_ms / 1000, UTC)
    match event.type:
        case "MemoryRemembered":
            _remember(b, event, recorded)
        case "MemoryRevised":
            m = _existing(state, p["memory_id"])
            for name, value in (p.get("changes") or {}).items():
                b.replace(m, FIELD_PREDICATES[name], _field_literal(name, value))
            for name, value in (p.get("property_changes") or {}).items():
                b.replace(m, e(name), None if value is None else value_literal(value))
            _touch(b, m, event, recorded)
        case "MemorySuperseded":
            old, new = _existing(state, p["memory_id"]), _existing(state, p["superseded_by"])
            b.replace(old, e("supersededBy"), new)
            _touch(b, old, event, recorded)
        case "MemoryRestored":
            m = _existing(state, p["memory_id"])
            if not state.objects(m, e("supersededBy")):
                raise InvalidEvent(f"memory {p['memory_id']} is not superseded; nothing to restore")
            b.clear(m, e("supersededBy"))
            _touch(b, m, event, recorded)
        case "MemoryForgotten":
            m = _existing(state, p["memory_id"])
            b.replace(m, e("content"), Literal(REDACTED))
            b.removes.extend(Quad(m, e("embedding"), o, VECTORS) for o in state.vectors(m))
            b.replace(m, e("forgotten"), Literal(True))
            b.replace(m, e("forgottenAt"), time_literal(event.occurred_at))
            if p.get("reason"):
                b.replace(m, e("forgottenReason"), Literal(p["reason"]))
            _touch(b, m, event, recorded)
        case "KpiObserved":
            k = kpi_iri(p["metric"])
            b.add(COMPANY, RDF_TYPE, e("Company"))
            b.add(COMPANY, e("hasKpi"), k)
            b.add(k, RDF_TYPE, e("Kpi"))
            b.add(k, e("metric"), Literal(p["metric"]))
            b.replace(k, e("value"), value_literal(float(p["value"])))
            b.replace(k, e("period"), Literal(p["period"]))
            b.replace(k, e("observedAt"), time_literal(event.occurred_at))
        case "SpendObserved":
            s = spend_iri(p["platform"])
            b.add(COMPANY, RDF_TYPE, e("Company"))
            b.add(COMPANY, e("hasSpend"), s)
            b.add(s, RDF_TYPE, e("Spend"))
            b.add(s, e("platform"), Literal(p["platform"]))
            b.replace(s, e("amount"), value_literal(float(p["amount"])))
            b.replace(s, e("currency"), Literal(p["currency"]))
            b.replace(s, e("period"), Literal(p["period"]))
            b.replace(s, e("observedAt"), time_literal(event.occurred_at))
        case "ClockTicked":
            b.add(CLOCK, RDF_TYPE, e("Clock"))
            b.replace(CLOCK, e("now"), time_literal(p["now"]))
        case "StakeholderChanged":
            u = user_iri(p["user_id"])
            b.add(u, RDF_TYPE, e("User"))
            b.add(u, e("userId"), Literal(p["user_id"]))
            b.clear(u, e("team"))
            for team in p.get("team_ids") or []:
                b.add(u, e("team"), Literal(team))
            b.replace(u, e("role"), Literal(p["role"]))
        case other:  # a newer event type this build does not project: only the position moves
            log.warning("no projection for event type %s; skipped", other)
    return b.delta()


def _existing(state: GraphState, memory_id: str) -> NamedNode:
    m = memory_iri(memory_id)
    if not state.objects(m, e("memoryId")):
        raise InvalidEvent(f"unknown memory {memory_id}")
    return m


def _field_literal(name: str, value: Any) -> Literal | None:
    if value is None:
        return None
    if name == "expires_at":
        return time_literal(parse_time(value, "expires_at"))
    if name == "confidence":
        return value_literal(float(value))
    return value_literal(value)


def _touch(b: _Builder, m: NamedNode, event: Event, recorded: datetime) -> None:
    """Lineage: every event that changed a memory stays linked to it."""
    b.add(m, e("changedBy"), Literal(event.event_id))
    b.replace(m, e("updatedAt"), time_literal(recorded))


def _remember(b: _Builder, event: Event, recorded: datetime) -> None:
    p = event.payload
    m = memory_iri(p["memory_id"])
    if b.state.objects(m, e("rememberedBy")):
        raise Conflict(f"memory {p['memory_id']} already exists; revise it instead")
    cls = NamedNode(v.class_iri(p.get("memory_class") or "Memory"))
    b.add(m, RDF_TYPE, cls)
    b.add(m, e("memoryClass"), cls)
    b.add(m, e("memoryId"), Literal(p["memory_id"]))
    b.add(m, e("rememberedBy"), Literal(event.event_id))
    b.add(m, e("label"), Literal(p["label"]))
    b.add(m, e("content"), Literal(p["content"]))
    b.add(m, e("kind"), Literal(p["kind"]))
    b.add(m, e("scope"), Literal(p["scope"]))
    holders = p.get("stakeholders") or {}
    if holders.get("user_id"):
        b.add(m, e("stakeholderUser"), Literal(holders["user_id"]))
    for team in holders.get("team_ids") or []:
        b.add(m, e("stakeholderTeam"), Literal(team))
    b.add(m, e("importance"), Literal(int(p["importance"])))
    b.add(m, e("confidence"), value_literal(float(p.get("confidence", 1.0))))
    if p.get("expires_at") is not None:
        b.add(m, e("expiresAt"), time_literal(p["expires_at"]))
    for name, value in (p.get("properties") or {}).items():
        if value is not None:
            b.add(m, e(name), value_literal(value))
    if p.get("embedding_model"):
        b.add(m, e("embeddingModel"), Literal(p["embedding_model"]))
    if p.get("embedding"):
        b.adds.append(Quad(m, e("embedding"), vector_literal(p["embedding"]), VECTORS))
    b.add(m, e("source"), Literal(event.source))
    b.add(m, e("actor"), Literal(event.actor.id))
    b.add(m, e("actorRole"), Literal(event.actor.role))
    b.add(m, e("validFrom"), time_literal(event.occurred_at))
    b.add(m, e("recordedAt"), time_literal(recorded))
    b.add(m, e("updatedAt"), time_literal(recorded))
    b.add(m, e("changedBy"), Literal(event.event_id))
    if p.get("replaces"):
        old = _existing(b.state, p["replaces"])
        b.replace(old, e("supersededBy"), m)


class Status(enum.Enum):
    APPLIED = "applied"
    SKIPPED = "skipped"  # at or below the checkpoint: already applied
    REJECTED = "rejected"  # invalid against the current facts: dead-lettered, position moves


@dataclass(frozen=True)
class Outcome:
    status: Status
    reason: str | None = None


def _nt(quads: Iterable[Quad]) -> str:
    """SPARQL DATA blocks from terms serialised by pyoxigraph (escaped; never raw strings)."""
    by_graph: dict[str, list[str]] = {}
    for q in quads:
        by_graph.setdefault(str(q.graph_name), []).append(f"{q.subject} {q.predicate} {q.object} .")
    return " ".join(f"GRAPH {g} {{ {' '.join(ts)} }}" for g, ts in by_graph.items())


class NoFacts:
    """The state before a tenant's first event: a remember is validated against it at the edge."""

    def objects(self, subject: NamedNode, predicate: NamedNode) -> list[Term]:
        return []

    def facts(self, subject: NamedNode) -> list[tuple[NamedNode, Term]]:
        return []

    def vectors(self, subject: NamedNode) -> list[Term]:
        return []


def node_violations(knowledge: Knowledge, delta: Delta, state: GraphState, subject: NamedNode) -> list[str]:
    """SHACL violations of ``subject`` as it would be after ``delta``."""
    removed = {(q.predicate.value, str(q.object)) for q in delta.removes if q.subject == subject}
    facts: dict[str, list[Any]] = {}
    for pred, obj in state.facts(subject):
        if (pred.value, str(obj)) not in removed:
            facts.setdefault(pred.value, []).append(obj)
    for q in delta.adds:
        if q.subject == subject and q.object not in facts.get(q.predicate.value, []):
            facts.setdefault(q.predicate.value, []).append(q.object)
    classes = [c.value for c in facts.get(v.ENGRAM + "memoryClass", [])]
    return knowledge.shapes.validate(classes, facts, knowledge.ontology)


def precheck(knowledge: Knowledge, event: Event, graph: TenantGraph | None) -> None:
    """What the projection would decide for ``event`` now, before it is appended to the log.

    Raises :class:`AlreadyApplied` for a retry of an applied event, :class:`Conflict` for a taken
    memory id or a reused event id, and another of ``PLAN_ERRORS`` for an event it would reject.
    """
    if graph is None:
        checked_plan(knowledge, event, Position(0, 0), NoFacts())
    else:
        graph.prepare(event, Position(0, 0))


class AlreadyApplied(Exception):
    """The same event id with the same content: nothing to do."""


# plan() is a pure function of the event and the facts, so these failures are deterministic:
# retrying cannot help, and a replay must reach the same decision.
PLAN_ERRORS = (InvalidEvent, ValueError, TypeError, KeyError, AttributeError)


def rejection_reason(exc: BaseException) -> str:
    if isinstance(exc, InvalidEvent):
        return str(exc)
    return f"cannot be projected: {type(exc).__name__}: {exc}"


def checked_plan(knowledge: Knowledge, event: Event, position: Position, state: GraphState) -> Delta:
    """``plan`` followed by the shapes of the memory it creates or revises."""
    if event.type == "MemoryRemembered":
        cls = v.class_iri(event.payload.get("memory_class") or "Memory")
        if cls in knowledge.derived_classes:
            raise InvalidEvent(
                f"memory_class {cls.removeprefix(v.ENGRAM)} is derived by the rules; it cannot be asserted"
            )
    delta = plan(event, position, state)
    if event.type in ("MemoryRemembered", "MemoryRevised"):
        violations = node_violations(knowledge, delta, state, memory_iri(event.payload["memory_id"]))
        if violations:
            raise InvalidEvent("shape violations: " + "; ".join(violations))
    return delta


class TenantGraph:
    """One tenant's on-disk store: asserted facts, ontology, inferred facts, checkpoint.

    Asserted facts and the checkpoint move together in one transaction. The rules then bring
    the inferred graph up to date and record the offset they reached; a store opened with the
    two out of step (a crash between them) or with a changed ontology or rule set is
    re-materialised from its asserted facts before it is used.
    """

    def __init__(self, path: Path, knowledge: Knowledge | None = None) -> None:
        path.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.knowledge = knowledge or load_knowledge()
        self.store = Store(str(path))
        self._ensure_inferred()

    # -- state ------------------------------------------------------------------------------
    def objects(self, subject: NamedNode, predicate: NamedNode) -> list[Term]:
        return [q.object for q in self.store.quads_for_pattern(subject, predicate, None, ASSERTED)]  # type: ignore[misc]

    def facts(self, subject: NamedNode) -> list[tuple[NamedNode, Term]]:
        return [(q.predicate, q.object) for q in self.store.quads_for_pattern(subject, None, None, ASSERTED)]  # type: ignore[misc]

    def vectors(self, subject: NamedNode) -> list[Term]:
        return [q.object for q in self.store.quads_for_pattern(subject, e("embedding"), None, VECTORS)]  # type: ignore[misc]

    def _meta(self, name: str) -> Term | None:
        found = list(self.store.quads_for_pattern(PROJECTION, e(name), None, META))
        return found[0].object if found else None  # type: ignore[return-value]

    def _set_meta(self, name: str, value: Term | None) -> None:
        for q in list(self.store.quads_for_pattern(PROJECTION, e(name), None, META)):
            self.store.remove(q)
        if value is not None:
            self.store.add(Quad(PROJECTION, e(name), value, META))

    def checkpoint(self) -> Position | None:
        part, off = self._meta("partition"), self._meta("offset")
        if part is None or off is None:
            return None
        return Position(int(part.value), int(off.value))

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
        k = self.knowledge
        self._set_meta("knowledgeDigest", None)  # a crash part-way leaves the store marked stale
        self._set_meta("inferredOffset", None)
        self.store.remove_graph(REMOVED)
        self.store.remove_graph(ONTOLOGY)
        self.store.extend(k.ontology.quads(ONTOLOGY))
        count = k.engine.materialize(self.store, GRAPHS)
        cp = self.checkpoint()
        self._set_meta("knowledgeDigest", Literal(k.digest))
        self._set_meta("inferredOffset", Literal(cp.offset if cp else -1))
        return count

    def inferred(self) -> set[Triple]:
        return {q.triple for q in self.store.quads_for_pattern(None, None, None, INFERRED)}

    def explain(self, fact: Triple, *, depth: int = 4) -> list[dict[str, Any]]:
        return self.knowledge.engine.explain(self.store, GRAPHS, fact, depth=depth)

    # -- applying events --------------------------------------------------------------------
    def applied_digest(self, event_id: str) -> str | None:
        """The content digest of an event id this store has applied, if any."""
        found = list(self.store.quads_for_pattern(event_iri(event_id), e("digest"), None, META))
        return found[0].object.value if found else None

    def applied_position(self, event_id: str) -> Position | None:
        """Where the log holds the event that applied ``event_id``."""
        found = list(self.store.quads_for_pattern(event_iri(event_id), e("position"), None, META))
        if not found:
            return None
        partition, offset = found[0].object.value.split(":")
        return Position(int(partition), int(offset))

    def apply(self, event: Event, position: Position) -> Outcome:
        """Apply once, by offset and by event id; rejected (position still moves) if invalid.

        An event id applied before is skipped when its content is the same (a retry, a file
        produced twice) and rejected as a conflict when it is not (an idempotency key reused).
        """
        if self.already_applied(position):
            return Outcome(Status.SKIPPED)
        try:
            delta = self.prepare(event, position)
        except AlreadyApplied as dup:
            self.commit(Delta(), position)
            return Outcome(Status.SKIPPED, str(dup))
        except PLAN_ERRORS as exc:
            self.commit(Delta(), position)
            return Outcome(Status.REJECTED, rejection_reason(exc))
        self.commit(delta, position)
        return Outcome(Status.APPLIED)

    def prepare(self, event: Event, position: Position) -> Delta:
        """The delta ``event`` would commit, with its event-id record; raises what ``apply`` rejects."""
        digest = content_digest(event)
        seen = self.applied_digest(event.event_id)
        if seen == digest:
            raise AlreadyApplied(f"event {event.event_id} was already applied")
        if seen is not None:
            raise Conflict(f"event_id {event.event_id} was already used for a different event")
        delta = checked_plan(self.knowledge, event, position, self)
        node = event_iri(event.event_id)
        records = (
            Quad(node, e("digest"), Literal(digest), META),
            Quad(node, e("position"), Literal(f"{position.partition}:{position.offset}"), META),
        )
        return Delta(delta.removes, (*delta.adds, *records))

    def reject(self, position: Position) -> Outcome:
        """Move past a record that could not be decoded or validated at all."""
        if self.already_applied(position):
            return Outcome(Status.SKIPPED)
        self.commit(Delta(), position)
        return Outcome(Status.REJECTED)

    def commit(self, delta: Delta, position: Position) -> None:
        """Asserted delta + checkpoint in one transaction, then the rules catch up.

        The incremental update is only sound from an inferred graph that was current at the
        previous checkpoint; otherwise (an earlier update failed) or if it fails now, the
        inferred graph is recomputed from scratch before the new offset is recorded.
        """
        previous = self.checkpoint()
        current = self._meta("inferredOffset") == Literal(previous.offset if previous else -1)
        adds = [q for q in delta.adds if q not in self.store]
        removes = [q for q in delta.removes if q in self.store]
        meta_old = list(self.store.quads_for_pattern(PROJECTION, None, None, META))
        meta_new = [
            Quad(PROJECTION, e("partition"), Literal(position.partition), META),
            Quad(PROJECTION, e("offset"), Literal(position.offset), META),
            Quad(PROJECTION, e("handled"), Literal(self.handled() + 1), META),
            *(
                q
                for q in meta_old
                if q.predicate.value
                not in (
                    v.ENGRAM + "partition",
                    v.ENGRAM + "offset",
                    v.ENGRAM + "handled",
                    v.ENGRAM + "inferredOffset",
                )
            ),
        ]
        parts = []
        if removes or meta_old:
            parts.append(f"DELETE DATA {{ {_nt([*removes, *meta_old])} }}")
        parts.append(f"INSERT DATA {{ {_nt([*adds, *meta_new])} }}")
        self.store.update(" ; ".join(parts))
        if not current:
            log.warning("%s: inferences were not current; re-materialising", self.path)
            self.rematerialize()
            return
        try:
            added = [q.triple for q in adds if q.graph_name == ASSERTED]
            removed = [q.triple for q in removes if q.graph_name == ASSERTED]
            if added or removed:
                self.knowledge.engine.update(self.store, GRAPHS, added, removed)
        except Exception:
            log.exception("%s: incremental rule update failed; re-materialising", self.path)
            self.rematerialize()
            return
        self._set_meta("inferredOffset", Literal(position.offset))

    def quads(self, graph: NamedNode = ASSERTED) -> Iterator[Quad]:
        return self.store.quads_for_pattern(None, None, None, graph)

    def flush(self) -> None:
        self.store.flush()
