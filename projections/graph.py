"""The tenant's graph: events become asserted facts, applied atomically with the checkpoint.

``plan`` is the projection proper: a pure function of an event, its log position and the current
facts, returning the quads to remove and to add. ``TenantGraph.apply`` commits that delta *and*
the new checkpoint in one SPARQL update (one oxigraph transaction), so a crash leaves either
both or neither, and an event at or below the checkpoint is skipped: redelivery is harmless.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from pyoxigraph import Literal, NamedNode, Quad, Store, Triple

from projections.knowledge import Knowledge, load_knowledge
from projections.rules.engine import Graphs
from schemas import vocabulary as v
from schemas.events import Event, InvalidEvent, Position, parse_time

log = logging.getLogger(__name__)

ASSERTED = NamedNode(v.GRAPH_ASSERTED)
INFERRED = NamedNode(v.GRAPH_INFERRED)
ONTOLOGY = NamedNode(v.GRAPH_ONTOLOGY)
REMOVED = NamedNode("urn:engram:graph:removed")  # scratch, only during a rule update
META = NamedNode(v.GRAPH_META)
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


def time_literal(value: datetime) -> Literal:
    text = value.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return Literal(text, datatype=XSD_DATETIME)


def value_literal(value: Any) -> Literal:
    """A typed literal for a property value: boolean, integer, double or string."""
    if isinstance(value, bool | int | float | str):
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
            b.replace(k, e("value"), Literal(float(p["value"])))
            b.replace(k, e("period"), Literal(p["period"]))
            b.replace(k, e("observedAt"), time_literal(event.occurred_at))
        case "SpendObserved":
            s = spend_iri(p["platform"])
            b.add(COMPANY, RDF_TYPE, e("Company"))
            b.add(COMPANY, e("hasSpend"), s)
            b.add(s, RDF_TYPE, e("Spend"))
            b.add(s, e("platform"), Literal(p["platform"]))
            b.replace(s, e("amount"), Literal(float(p["amount"])))
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
        return Literal(float(value))
    return Literal(value)


def _touch(b: _Builder, m: NamedNode, event: Event, recorded: datetime) -> None:
    """Lineage: every event that changed a memory stays linked to it."""
    b.add(m, e("changedBy"), Literal(event.event_id))
    b.replace(m, e("updatedAt"), time_literal(recorded))


def _remember(b: _Builder, event: Event, recorded: datetime) -> None:
    p = event.payload
    m = memory_iri(p["memory_id"])
    origin = b.state.objects(m, e("rememberedBy"))
    if origin:
        if origin[0].value == event.event_id:
            return  # the same event produced again: already remembered
        raise InvalidEvent(f"memory {p['memory_id']} already exists; revise it instead")
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
    b.add(m, e("confidence"), Literal(float(p.get("confidence", 1.0))))
    if p.get("expires_at") is not None:
        b.add(m, e("expiresAt"), time_literal(p["expires_at"]))
    for name, value in (p.get("properties") or {}).items():
        if value is not None:
            b.add(m, e(name), value_literal(value))
    if p.get("embedding_model"):
        b.add(m, e("embeddingModel"), Literal(p["embedding_model"]))
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


def event_violations(knowledge: Knowledge, event: Event, state: GraphState | None = None) -> list[str]:
    """Shape violations of the memory an event creates or revises (empty for other events)."""
    if event.type not in ("MemoryRemembered", "MemoryRevised"):
        return []
    state = state or NoFacts()
    delta = plan(event, Position(0, 0), state)
    return node_violations(knowledge, delta, state, memory_iri(event.payload["memory_id"]))


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
    def apply(self, event: Event, position: Position) -> Outcome:
        """Apply once: skipped at or below the checkpoint, rejected (position still moves) if invalid."""
        if self.already_applied(position):
            return Outcome(Status.SKIPPED)
        try:
            delta = plan(event, position, self)
            if event.type in ("MemoryRemembered", "MemoryRevised"):
                violations = node_violations(
                    self.knowledge, delta, self, memory_iri(event.payload["memory_id"])
                )
                if violations:
                    raise InvalidEvent("shape violations: " + "; ".join(violations))
        except InvalidEvent as exc:
            self.commit(Delta(), position)
            return Outcome(Status.REJECTED, str(exc))
        self.commit(delta, position)
        return Outcome(Status.APPLIED)

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
            if adds or removes:
                self.knowledge.engine.update(
                    self.store, GRAPHS, [q.triple for q in adds], [q.triple for q in removes]
                )
        except Exception:
            log.exception("%s: incremental rule update failed; re-materialising", self.path)
            self.rematerialize()
            return
        self._set_meta("inferredOffset", Literal(position.offset))

    def quads(self, graph: NamedNode = ASSERTED) -> Iterator[Quad]:
        return self.store.quads_for_pattern(None, None, None, graph)

    def flush(self) -> None:
        self.store.flush()
