"""The planners of agent work (DESIGN §7): sessions, episodes, tool calls, decisions and
associations, registered with ``projections.plan``'s ``@planner`` like every other event type's;
``plan`` imports this module so they are registered before its check that every type has one."""

from __future__ import annotations

from datetime import datetime

from engram.projections.plan import Builder, planner
from engram.projections.terms import (
    ASSERTED,
    RDF_TYPE,
    Term,
    agent_iri,
    e,
    kpi_iri,
    ref_iri,
    spend_iri,
    time_literal,
    value_literal,
)
from engram.schemas import payloads as ev
from engram.schemas.checks import Conflict, InvalidEvent
from engram.schemas.periods import parse_period
from pyoxigraph import Literal, NamedNode, Quad


def _agent_node(b: Builder, kind: str, node_id: str, cls: str) -> NamedNode:
    """A new agent-work node with what every one has: its class, id, who recorded it (the agent and
    the user it acts for, whose node it is), valid time, system time and its log position (the
    narrative's order); an id already taken is a conflict, as a memory's is."""
    n = agent_iri(kind, node_id)
    if b.state.objects(n, e("nodeId")):
        raise Conflict(f"{kind} {node_id} already exists: leave its id out to have one minted")
    event = b.event
    b.add(n, RDF_TYPE, e(cls))
    b.add(n, e("nodeId"), Literal(node_id))
    b.add(n, e("actor"), Literal(event.actor.id))
    b.add(n, e("actorRole"), Literal(event.actor.role))
    b.add(n, e("actingFor"), Literal(event.actor.acting_user))
    b.add(n, e("source"), Literal(event.source))
    b.add(n, e("validFrom"), time_literal(event.occurred_at))
    b.add(n, e("recordedAt"), time_literal(b.recorded))
    b.add(n, e("logOffset"), Literal(b.position.offset))
    b.add(n, e("changedBy"), Literal(event.event_id))
    if event.purpose:
        b.add(n, e("purpose"), Literal(event.purpose))
    return n


def _open_session(b: Builder, session_id: str) -> NamedNode:
    s = agent_iri("session", session_id)
    if not b.state.objects(s, e("nodeId")):
        raise InvalidEvent(f"unknown session {session_id}")
    if b.state.objects(s, e("endedAt")):
        raise Conflict(f"session {session_id} has ended; start another")
    return s


def _episode_of(b: Builder, episode_id: str, session: NamedNode, session_id: str) -> NamedNode:
    ep = agent_iri("episode", episode_id)
    if session not in b.state.objects(ep, e("inSession")):
        raise InvalidEvent(f"episode {episode_id} is not an episode of session {session_id}")
    return ep


@planner(ev.SessionStarted)
def _session_started(b: Builder, p: ev.SessionStarted) -> None:
    s = _agent_node(b, "session", p.session_id, "AgentSession")
    if p.goal:
        b.add(s, e("goal"), Literal(p.goal))


@planner(ev.SessionEnded)
def _session_ended(b: Builder, p: ev.SessionEnded) -> None:
    s = _open_session(b, p.session_id)
    b.add(s, e("endedAt"), time_literal(b.event.occurred_at))
    b.add(s, e("validTo"), time_literal(b.event.occurred_at))
    if p.outcome:
        b.add(s, e("outcome"), Literal(p.outcome))
    b.add(s, e("changedBy"), Literal(b.event.event_id))


@planner(ev.EpisodeRecorded)
def _episode(b: Builder, p: ev.EpisodeRecorded) -> None:
    s = _open_session(b, p.session_id)
    ep = _agent_node(b, "episode", p.episode_id, "Episode")
    b.add(ep, e("inSession"), s)
    b.add(ep, e("summary"), Literal(p.summary))


@planner(ev.ToolCalled)
def _tool_called(b: Builder, p: ev.ToolCalled) -> None:
    s = _open_session(b, p.session_id)
    ep = _episode_of(b, p.episode_id, s, p.session_id) if p.episode_id else None
    call = _agent_node(b, "toolcall", p.call_id, "ToolCall")
    b.add(call, e("inSession"), s)
    if ep is not None:
        b.add(call, e("inEpisode"), ep)
    b.add(call, e("tool"), Literal(p.tool))
    b.add(call, e("argumentsDigest"), Literal(p.arguments_digest))
    b.add(call, e("outcome"), Literal(p.outcome))


def observation_iri(ref: str) -> NamedNode:
    """The node a decision's ``live_data`` reference names (``payloads.observation_ref``)."""
    parts = ev.observation_ref(ref)
    if parts is None:
        raise InvalidEvent(f"not an observation reference: {ref}")
    return spend_iri(*parts[1:]) if parts[0] == "spend" else kpi_iri(*parts[1:])


def planned_facts(
    node: NamedNode, spend: ev.PlannedSpend | None, kpi: ev.PlannedKpi | None, occurred_at: datetime
) -> list[tuple[NamedNode, NamedNode, Term]]:
    """A proposed action's facts, which ``rules/plans.dlog`` checks against the active constraints:
    on a recorded decision in the live graph, and on a plan in a scratch copy (``projections.plans``)."""
    out: list[tuple[NamedNode, NamedNode, Term]] = []
    if spend is not None:
        period = parse_period(spend.period, occurred_at)
        out += [
            (node, RDF_TYPE, e("PlannedSpend")),
            (node, e("plannedPlatform"), Literal(spend.platform)),
            (node, e("plannedAmount"), value_literal(float(spend.amount))),
            (node, e("plannedCurrency"), Literal(spend.currency)),
            (node, e("plannedPeriod"), Literal(period.label)),
            (node, e("plannedPeriodKind"), Literal(period.kind)),
            (node, e("plannedPeriodStart"), time_literal(period.start)),
        ]
    if kpi is not None:
        out += [
            (node, RDF_TYPE, e("PlannedKpiChange")),
            (node, e("plannedMetric"), Literal(kpi.metric)),
            (node, e("plannedValue"), value_literal(float(kpi.value))),
        ]
    return out


@planner(ev.DecisionRecorded)
def _decision(b: Builder, p: ev.DecisionRecorded) -> None:
    s = _open_session(b, p.session_id) if p.session_id else None
    ep = _episode_of(b, p.episode_id, s, p.session_id) if p.episode_id and s and p.session_id else None
    cited = [b.existing(memory_id) for memory_id in p.relied_on]
    data = [observation_iri(ref) for ref in p.live_data]
    for ref, node in zip(p.live_data, data, strict=True):
        if not b.state.objects(node, e("series")):
            raise InvalidEvent(f"unknown observation {ref}: no such KPI or spend was observed")
    d = _agent_node(b, "decision", p.decision_id, "DecisionRecord")
    if s is not None:
        b.add(d, e("inSession"), s)
    if ep is not None:
        b.add(d, e("inEpisode"), ep)
    b.add(d, e("decision"), Literal(p.decision))
    for m in cited:
        b.add(d, e("reliesOn"), m)
    for o in data:
        b.add(d, e("reliesOnData"), o)
    for subject, predicate, value in planned_facts(d, p.spend, p.target_change, b.event.occurred_at):
        b.add(subject, predicate, value)


@planner(ev.MemoriesAssociated)
def _associated(b: Builder, p: ev.MemoriesAssociated) -> None:
    ends = []
    for ref in (p.from_ref, p.to_ref):
        kind, node_id = ev.parse_ref(ref)
        node = ref_iri(kind, node_id)
        known = b.state.objects(node, e("memoryId" if kind == "memory" else "nodeId"))
        if not known:
            raise InvalidEvent(f"unknown {kind} {node_id}")
        ends.append(node)
    a = _agent_node(b, "association", p.association_id, "Association")
    b.add(a, e("associationFrom"), ends[0])
    b.add(a, e("associationTo"), ends[1])
    b.add(a, e("relation"), Literal(p.relation))  # rules/associations.dlog derives the typed edge


@planner(ev.AssociationRemoved)
def _association_removed(b: Builder, p: ev.AssociationRemoved) -> None:
    """The association's node goes whole (its ends, relation and record): the rules withdraw what
    they derived through it (the typed edge, a decision's ``:basedOn``); the log keeps both events."""
    a = agent_iri("association", p.association_id)
    if not b.state.objects(a, e("nodeId")):
        raise InvalidEvent(f"unknown association {p.association_id}")
    b.removes.extend(Quad(a, predicate, value, ASSERTED) for predicate, value in b.state.facts(a))
