"""Who may make which change (DESIGN §6), decided on an event's actor against the tenant's facts.

One decision for a write over HTTP (its actor is the bearer token's) and for an event that arrives
straight on Kafka (the actor it names): a refused event is dead-lettered with the reason, so the
log cannot be used to go around the API.

* KPI, spend and clock events: pipelines and operators; a pipeline may emit nothing else.
* A user-scoped memory: its user, or an agent acting for that user. Team and company memories:
  operators.
* Revising, superseding or restoring a memory (and naming it in ``replaces``): its owner (a
  user-scoped memory's user, or whoever wrote a shared one); operators may for team and company
  memories.
* Forgetting, and placing or releasing a legal hold: operators and auditors. A user's teams and
  role: operators.
"""

from __future__ import annotations

from pyoxigraph import NamedNode

from projections.plan import GraphState
from projections.terms import e, memory_iri
from schemas import payloads as ev
from schemas import vocabulary as v
from schemas.checks import InvalidEvent
from schemas.events import Actor, Event

Role = v.Role
LIVE_DATA = (ev.KpiObserved, ev.SpendObserved, ev.ClockTicked)


class Forbidden(InvalidEvent):
    """A valid event its actor may not cause (403 over HTTP; dead-lettered off Kafka)."""


def check(event: Event, state: GraphState) -> None:
    """Raise :class:`Forbidden` if the event's actor may not make this change."""
    reason = refusal(event, state)
    if reason is not None:
        raise Forbidden(reason)


def refusal(event: Event, state: GraphState) -> str | None:
    actor, p = event.actor, event.payload
    if actor.role not in v.values(Role):
        return f"actor role {actor.role!r} is not one of {', '.join(Role)}"
    if isinstance(p, LIVE_DATA):
        if actor.role in (Role.PIPELINE, Role.OPERATOR):
            return None
        return f"{event.type} comes from a pipeline or an operator, not a {actor.role}"
    if actor.role == Role.PIPELINE:
        return "a pipeline may only emit KpiObserved, SpendObserved and ClockTicked"
    if isinstance(p, ev.MemoryForgotten | ev.LegalHoldPlaced | ev.LegalHoldReleased):
        ok = actor.role in (Role.OPERATOR, Role.AUDITOR)
        return None if ok else f"{event.type} is an operator's or an auditor's action"
    if actor.role == Role.AUDITOR:
        return "an auditor reads and forgets; it does not write memories"
    if isinstance(p, ev.StakeholderChanged):
        return None if actor.role == Role.OPERATOR else "a user's teams and role are set by an operator"
    if isinstance(p, ev.MemoryRemembered):
        reason = _may_write(actor, p.scope, p.stakeholders.user_id)
        if reason is None and p.replaces:
            reason = _may_change(actor, state, p.replaces, "replace")
        return reason
    if isinstance(p, ev.MemoryRevised | ev.MemorySuperseded | ev.MemoryRestored):
        verb = {ev.MemoryRevised: "revise", ev.MemorySuperseded: "supersede", ev.MemoryRestored: "restore"}
        return _may_change(actor, state, p.memory_id, verb[type(p)])
    return None


def _may_write(actor: Actor, scope: str, user: str | None) -> str | None:
    if scope == v.Scope.USER:
        if actor.role in (Role.USER, Role.AGENT, Role.OPERATOR) and actor.acting_user == user:
            return None
        return f"a user-scoped memory is written by its user ({user}) or an agent on their behalf"
    if actor.role == Role.OPERATOR:
        return None
    return f"{scope} memories are written by an operator, not a {actor.role}"


def _may_change(actor: Actor, state: GraphState, memory_id: str, verb: str) -> str | None:
    m = memory_iri(memory_id)
    scope = _one(state, m, "scope")
    if scope == v.Scope.USER:
        owner = _one(state, m, "stakeholderUser")
        if actor.acting_user == owner and actor.role in (Role.USER, Role.AGENT, Role.OPERATOR):
            return None
        return f"only {owner} (or an agent on their behalf) may {verb} memory {memory_id}"
    if actor.role == Role.OPERATOR or (actor.role != Role.AGENT and _one(state, m, "actor") == actor.id):
        return None
    return f"only an operator or its author may {verb} {scope} memory {memory_id}"


def _one(state: GraphState, subject: NamedNode, name: str) -> str | None:
    found = state.objects(subject, e(name))
    return found[0].value if found else None
