"""What the projection refuses: ``plan`` plus the SHACL shapes and the rules' own classes.

``checked_plan`` is the one decision, made the same way by the projector (live and replay) and by
the edge before an event is appended, so a write the API accepts is a write the projector applies.
"""

from __future__ import annotations

from typing import Any

from engram.projections import governance
from engram.projections.knowledge import Knowledge
from engram.projections.plan import Delta, GraphState, plan
from engram.projections.terms import agent_iri, memory_iri
from engram.schemas import payloads as ev
from engram.schemas import vocabulary as v
from engram.schemas.checks import InvalidEvent
from engram.schemas.events import Event, Position
from pyoxigraph import NamedNode

# plan() is a pure function of the event and the facts, so these failures are deterministic:
# retrying cannot help, and a replay must reach the same decision.
PLAN_ERRORS = (InvalidEvent, ValueError, TypeError, KeyError, AttributeError)


def rejection_reason(exc: BaseException) -> str:
    if isinstance(exc, InvalidEvent):
        return str(exc)
    return f"cannot be projected: {type(exc).__name__}: {exc}"


def node_violations(
    knowledge: Knowledge, delta: Delta, state: GraphState, subject: NamedNode, *, memory: bool = True
) -> list[str]:
    """SHACL violations of ``subject`` as it would be after ``delta`` (a memory, by its memory
    class; else an agent-work node, by its asserted types)."""
    removed = {(q.predicate.value, str(q.object)) for q in delta.removes if q.subject == subject}
    facts: dict[str, list[Any]] = {}
    for pred, obj in state.facts(subject):
        if (pred.value, str(obj)) not in removed:
            facts.setdefault(pred.value, []).append(obj)
    for q in delta.adds:
        if q.subject == subject and q.object not in facts.get(q.predicate.value, []):
            facts.setdefault(q.predicate.value, []).append(q.object)
    if not memory:
        classes = [c.value for c in facts.get(v.RDF_TYPE, [])]
        return knowledge.shapes.validate(classes, facts, knowledge.ontology, memory=False)
    classes = [c.value for c in facts.get(v.ENGRAM + "memoryClass", [])]
    return knowledge.shapes.validate(classes, facts, knowledge.ontology)


def check_property_names(knowledge: Knowledge, event: Event) -> None:
    """Refuse class properties named like what the projection writes or a rule concludes: the rules
    are data (``ENGRAM_RULES_DIR``), so this is decided with the loaded knowledge, not in ``schemas``."""
    p = event.payload
    names = p.property_names() if isinstance(p, ev.MemoryEvent) else ()
    reserved = [f"property name {name!r} is reserved by engram" for name in names if knowledge.reserved(name)]
    if reserved:
        raise InvalidEvent("; ".join(reserved))


def checked_plan(knowledge: Knowledge, event: Event, position: Position, state: GraphState) -> Delta:
    """Whether its actor may make the change (``governance``: first, so no refusal says whether a
    memory the actor may not see exists), then ``plan``, then the shapes of the memory it creates
    or revises."""
    p = event.payload
    if isinstance(p, ev.MemoryRemembered):
        cls = v.class_iri(p.memory_class or "Memory")
        if cls in knowledge.derived_classes:
            raise InvalidEvent(
                f"memory_class {cls.removeprefix(v.ENGRAM)} is derived by the rules; it cannot be asserted"
            )
    check_property_names(knowledge, event)
    governance.check(event, state)
    delta = plan(event, position, state)
    if isinstance(p, ev.MemoryEvent) and p.reshapes:
        violations = node_violations(knowledge, delta, state, memory_iri(p.memory_id))
        if violations:
            raise InvalidEvent("shape violations: " + "; ".join(violations))
    if isinstance(p, ev.AgentEvent):  # the node it records, against the agent types' shapes
        node = agent_iri(NODE_KINDS[p.id_field], getattr(p, p.id_field))
        violations = node_violations(knowledge, delta, state, node, memory=False)
        if violations:
            raise InvalidEvent("shape violations: " + "; ".join(violations))
    return delta


# an agent event's id field -> the kind of node it records (``terms.agent_iri``)
NODE_KINDS = {
    "session_id": "session",
    "episode_id": "episode",
    "call_id": "toolcall",
    "decision_id": "decision",
    "association_id": "association",
}
