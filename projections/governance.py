"""Who may make which change (DESIGN §6), decided on an event's actor against the tenant's facts.

One decision for a write over HTTP (its actor is the bearer token's) and for an event that arrives
straight on Kafka (the actor it names): a refused event is dead-lettered with the reason, so the
log cannot be used to go around the API.

Authorisation decides before anything reveals existence: first what the actor's role alone
refuses (whatever memory is named), then every memory the event names (its ``memory_id``,
``superseded_by``, ``replaces``, ``proposes``, ``also_proposes``) must be one the actor may see,
else the event is refused as :class:`Unseen`, worded exactly as for a memory that does not exist;
only then whether it may make the change, and only then (``validation.checked_plan``) whether the
change applies.

* Seeing a memory: operators and auditors see all; company memories everyone; a user-scoped one its
  user (an agent acting for them); a team one the team's members, as the tenant's
  StakeholderChanged events record them (over HTTP the token's teams must say so too).
* KPI, spend and clock events: pipelines and operators; a pipeline may emit nothing else.
* A user-scoped memory: its user, or an agent acting for that user. Team and company memories:
  operators.
* Revising, superseding or restoring a memory (and naming it in ``replaces``): its owner (a
  user-scoped memory's user, or whoever wrote a shared one); operators may for team and company
  memories.
* Deciding a proposal (accepting or rejecting an extracted memory that would replace a person's):
  whoever may supersede every memory it would replace, so a person's own answer, an agent's on that
  person's behalf (recorded as the agent's, for the user), an operator's for team and company
  memories; never an event whose source is ``extraction``, whoever its actor: the workflow that
  made a proposal does not decide it.
* Forgetting, and placing or releasing a legal hold: operators and auditors. A user's teams and
  role: operators.
* Conversation turns: users, agents, operators and pipelines (the conversation's owner is the
  conversation store's to check); the extraction's progress: agents, pipelines and operators; a
  conversation's erasure: its owner or an operator.
* Agent work (sessions, episodes, tool calls, decisions, associations): users, agents and
  operators, for the acting user; every session, episode, decision and memory it names must be one
  the actor may see (a session is its acting user's; operators and auditors see all).

The decisions are a registry keyed by payload class (``@governs``, as ``plan.py``'s ``@planner``):
an event type with no decision fails this module's import, so a new event type is refused to
everyone until someone decides who may emit it, never allowed by a default.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Set
from dataclasses import dataclass
from typing import Any, TypeVar

from engram.projections.plan import GraphState
from engram.projections.terms import agent_iri, e, memory_iri, user_iri
from engram.schemas import payloads as ev
from engram.schemas import vocabulary as v
from engram.schemas.checks import InvalidEvent
from engram.schemas.events import Actor, Event
from pyoxigraph import NamedNode

Role = v.Role


class Forbidden(InvalidEvent):
    """A valid event its actor may not cause (403 over HTTP; dead-lettered off Kafka)."""


class Unseen(InvalidEvent):
    """The event names a memory its actor may not see, or one that does not exist: the two are
    one refusal, so a refusal never tells them apart (404 over HTTP; dead-lettered off Kafka)."""

    def __init__(self, field: str, memory_id: str, what: str = "memory") -> None:
        super().__init__(f"{what} {memory_id} not found")
        self.field = field
        self.memory_id = memory_id


def check(event: Event, state: GraphState, teams: Set[str] | None = None) -> None:
    """Raise :class:`Forbidden` or :class:`Unseen` if the event's actor may not make this change.

    ``teams``: the teams a bearer token gives the actor; a team memory must then be one of theirs
    by the token as well as by the tenant's records, so a write never sees more than a read."""
    reason = role_refusal(event)
    if reason is not None:
        raise Forbidden(reason)
    for name, memory_id in references(event.payload):
        if not sees(event.actor, state, memory_id, teams):
            raise Unseen(name, memory_id)
    for name, kind, node_id in node_references(event.payload):
        if not sees_node(event.actor, state, kind, node_id):
            raise Unseen(name, node_id, kind)
    reason = refusal(event, state)
    if reason is not None:
        raise Forbidden(reason)


def references(p: ev.Payload) -> list[tuple[str, str]]:
    """Every memory an event names, as (field, id): the ones the actor must be able to see."""
    if isinstance(p, ev.MemoryRemembered):
        named = [(name, i) for name, i in (("replaces", p.replaces), ("proposes", p.proposes)) if i]
        return named + [("also_proposes", i) for i in p.also_proposes]
    if isinstance(p, ev.DecisionRecorded):
        return [("relied_on", m) for m in p.relied_on]
    if isinstance(p, ev.MemoriesAssociated):
        ends = [("from", ev.parse_ref(p.from_ref)), ("to", ev.parse_ref(p.to_ref))]
        return [(name, node_id) for name, (kind, node_id) in ends if kind == "memory"]
    if not isinstance(p, ev.MemoryEvent):
        return []
    named = [("memory_id", p.memory_id)]
    if isinstance(p, ev.MemorySuperseded):
        named.append(("superseded_by", p.superseded_by))
    return named


def node_references(p: ev.Payload) -> list[tuple[str, str, str]]:
    """Every session, episode or decision an event names, as (field, kind, id): the actor must be
    able to see each (the agent-work nodes are the user's they were recorded for)."""
    named: list[tuple[str, str, str | None]] = []
    if isinstance(p, ev.SessionEnded | ev.EpisodeRecorded | ev.ToolCalled | ev.DecisionRecorded):
        named.append(("session_id", "session", p.session_id))
    if isinstance(p, ev.ToolCalled | ev.DecisionRecorded):
        named.append(("episode_id", "episode", p.episode_id))
    if isinstance(p, ev.MemoriesAssociated):
        for name, ref in (("from", p.from_ref), ("to", p.to_ref)):
            kind, node_id = ev.parse_ref(ref)
            if kind != "memory":
                named.append((name, kind, node_id))
    if isinstance(p, ev.AssociationRemoved):  # its acting user's (or any, for an operator)
        named.append(("association_id", "association", p.association_id))
    return [(name, kind, node_id) for name, kind, node_id in named if node_id]


def sees_node(actor: Actor, state: GraphState, kind: str, node_id: str) -> bool:
    """Whether an agent-work node exists and ``actor`` may see it: operators and auditors see all,
    anyone else the nodes recorded for their own user (``visibility.may_see_node``, for an event)."""
    n = agent_iri(kind, node_id)
    if not state.objects(n, e("nodeId")):
        return False
    return actor.role in (Role.OPERATOR, Role.AUDITOR) or _one(state, n, "actingFor") == actor.acting_user


def sees(actor: Actor, state: GraphState, memory_id: str, teams: Set[str] | None = None) -> bool:
    """Whether the memory exists and ``actor`` may see it (``visibility.may_see``, for an event)."""
    m = memory_iri(memory_id)
    if not state.objects(m, e("memoryId")):
        return False
    if actor.role in (Role.OPERATOR, Role.AUDITOR):
        return True
    scope = _one(state, m, "scope")
    if scope == v.Scope.COMPANY:
        return True
    if scope == v.Scope.USER:
        return actor.acting_user == _one(state, m, "stakeholderUser")
    theirs = {t.value for t in state.objects(m, e("stakeholderTeam"))}
    recorded = {t.value for t in state.objects(user_iri(actor.acting_user), e("team"))}
    return bool(theirs & recorded) and (teams is None or bool(theirs & set(teams)))


def role_refusal(event: Event) -> str | None:
    """What the actor's role alone refuses, whatever memory the event names."""
    actor = event.actor
    if actor.role not in v.values(Role):
        return f"actor role {actor.role!r} is not one of {', '.join(Role)}"
    d = decision(event.payload)
    if event.source in d.not_from:
        return f"{event.type} never comes from source {event.source}"
    if actor.role in d.roles:
        return None
    if actor.role == Role.PIPELINE:
        return f"a pipeline may only emit {_listed(_emitted_by(Role.PIPELINE))}"
    if actor.role == Role.AUDITOR and Role.PIPELINE not in d.roles:  # live data says it in its own words
        return "an auditor reads and forgets; it does not write memories"
    return d.refused.format(type=event.type, role=actor.role)


def refusal(event: Event, state: GraphState) -> str | None:
    """Whether the actor may make the change, once it may see every memory the event names."""
    return decision(event.payload).change(event.actor, state, event.payload)


# -- the decisions: one per payload class, or importing this module fails ---------------------


Change = Callable[[Actor, GraphState, Any], "str | None"]


@dataclass(frozen=True)
class Decision:
    """Who may emit an event type (``roles``; ``refused`` says why anyone else may not, with
    ``{type}`` and ``{role}``), then what the change itself needs (``change``: a reason or None)."""

    roles: frozenset[Role]
    refused: str
    change: Change
    not_from: frozenset[v.Source] = frozenset()  # sources that may never emit it, whoever the actor


DECISIONS: dict[type[ev.Payload], Decision] = {}
P = TypeVar("P", bound=ev.Payload)
WRITERS = (Role.USER, Role.AGENT, Role.OPERATOR)  # a memory's own checks say which of them


def governs(
    *payload_types: type[P], roles: Iterable[Role], refused: str, not_from: Iterable[v.Source] = ()
) -> Callable[[Callable[[Actor, GraphState, P], str | None]], Callable[[Actor, GraphState, P], str | None]]:
    """Register the decision for ``payload_types``: the roles that may emit them, and the decorated
    function, which says what else the change needs (None: nothing)."""

    def register(
        fn: Callable[[Actor, GraphState, P], str | None],
    ) -> Callable[[Actor, GraphState, P], str | None]:
        for t in payload_types:
            if t in DECISIONS:
                raise ImportError(f"two governance decisions for {t.__name__}")
            DECISIONS[t] = Decision(frozenset(roles), refused, fn, frozenset(not_from))
        return fn

    return register


def decision(p: ev.Payload) -> Decision:
    return DECISIONS[type(p)]


@governs(
    ev.KpiObserved,
    ev.SpendObserved,
    ev.ClockTicked,
    roles=(Role.PIPELINE, Role.OPERATOR),
    refused="{type} comes from a pipeline or an operator, not a {role}",
)
def _live_data(actor: Actor, state: GraphState, p: ev.Payload) -> str | None:
    return None


@governs(
    ev.MemoryForgotten,
    ev.LegalHoldPlaced,
    ev.LegalHoldReleased,
    roles=(Role.OPERATOR, Role.AUDITOR),
    refused="{type} is an operator's or an auditor's action",
)
def _erasure(actor: Actor, state: GraphState, p: ev.MemoryEvent) -> str | None:
    return None


@governs(
    ev.StakeholderChanged, roles=(Role.OPERATOR,), refused="a user's teams and role are set by an operator"
)
def _stakeholder(actor: Actor, state: GraphState, p: ev.StakeholderChanged) -> str | None:
    return None


@governs(ev.MemoryRemembered, roles=WRITERS, refused="a {role} does not write memories")
def _remembered(actor: Actor, state: GraphState, p: ev.MemoryRemembered) -> str | None:
    reason = _may_write(actor, p.scope, p.stakeholders.user_id)
    if reason is None and p.replaces:
        reason = _may_change(actor, state, p.replaces, "replace")
    return reason


@governs(ev.MemoryRevised, roles=WRITERS, refused="a {role} does not revise memories")
def _revised(actor: Actor, state: GraphState, p: ev.MemoryRevised) -> str | None:
    return _may_change(actor, state, p.memory_id, "revise")


@governs(ev.MemorySuperseded, roles=WRITERS, refused="a {role} does not supersede memories")
def _superseded(actor: Actor, state: GraphState, p: ev.MemorySuperseded) -> str | None:
    return _may_change(actor, state, p.memory_id, "supersede")


@governs(ev.MemoryRestored, roles=WRITERS, refused="a {role} does not restore memories")
def _restored(actor: Actor, state: GraphState, p: ev.MemoryRestored) -> str | None:
    return _may_change(actor, state, p.memory_id, "restore")


@governs(
    ev.ProposalDecided,
    roles=WRITERS,
    refused="a {role} does not decide proposals",
    not_from=(v.Source.EXTRACTION,),
)
def _proposal_decided(actor: Actor, state: GraphState, p: ev.ProposalDecided) -> str | None:
    """Whoever may supersede every memory the proposal would replace (and see each: else the same
    words as for a memory that does not exist, since the proposal names it); the first refused, by
    id, is the reason. Not a proposal: the planner says so."""
    olds = sorted(o.value.rsplit(":", 1)[-1] for o in state.objects(memory_iri(p.memory_id), e("proposes")))
    for old_id in olds:
        if not sees(actor, state, old_id):
            return f"memory {old_id} not found"
        reason = _may_change(actor, state, old_id, "decide a proposal to replace")
        if reason is not None:
            return reason
    return None


@governs(
    ev.SessionStarted,
    ev.SessionEnded,
    ev.EpisodeRecorded,
    ev.ToolCalled,
    ev.DecisionRecorded,
    ev.MemoriesAssociated,
    ev.AssociationRemoved,
    roles=WRITERS,
    refused="a {role} does not record agent work",
)
def _agent_work(actor: Actor, state: GraphState, p: ev.Payload) -> str | None:
    """Agent work is recorded for the acting user: seeing every node and memory it names (checked
    before this, as ``Unseen``) is all it needs, since an association or a decision changes neither
    end, only links to it (and removing an association, seeing it: it is its acting user's)."""
    return None


@governs(
    ev.ConversationTurn,
    roles=(Role.USER, Role.AGENT, Role.OPERATOR, Role.PIPELINE),
    refused="a {role} does not add conversation turns",
)
def _turn(actor: Actor, state: GraphState, p: ev.ConversationTurn) -> str | None:
    """Turns are said by users (an agent for its user), imported by operators and pipelines. Whose
    conversation it is (its owner: the acting user of its first turn) is the conversation store's
    to decide (``projections.conversations``): the graph does not hold conversations."""
    return None


@governs(
    ev.TurnsExtracted,
    roles=(Role.AGENT, Role.PIPELINE, Role.OPERATOR),
    refused="{type} is the extraction workflow's progress, not a {role}'s",
)
def _extracted(actor: Actor, state: GraphState, p: ev.TurnsExtracted) -> str | None:
    """The workflow's own record (source extraction or system: checked by the conversation store)."""
    return None


@governs(
    ev.ConversationErased,
    roles=(Role.USER, Role.AGENT, Role.OPERATOR),
    refused="a conversation is erased by its owner or an operator, not a {role}",
)
def _conversation_erased(actor: Actor, state: GraphState, p: ev.ConversationErased) -> str | None:
    """Its owner (or an agent for them) or an operator: the owner is checked by the conversation store."""
    return None


def _emitted_by(role: Role) -> list[str]:
    return [name for name, cls in ev.PAYLOADS.items() if role in DECISIONS[cls].roles]


def _listed(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


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


def undecided(decisions: Mapping[type[ev.Payload], Decision]) -> list[str]:
    """The event types with no decision: fail closed, at import, not open on the first such event."""
    return [name for name, cls in ev.PAYLOADS.items() if cls not in decisions]


if _undecided := undecided(DECISIONS):
    raise ImportError(
        f"no governance decision (@governs) for {', '.join(_undecided)} in projections/governance.py"
    )
