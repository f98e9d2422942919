"""Agent work read back (DESIGN §7): a session's narrative, decisions and what they relied on, and
a proposed action checked against the active constraints by the rules.

Agent-work nodes are their acting user's: a principal sees a session, episode, tool call or
decision recorded for its own user (operators and auditors see all), and one it may not see is
answered as one that does not exist. A decision names only the memories the principal may see.

``check_plan`` runs the tenant's own rules (``rules/plans.dlog`` with everything it depends on)
over a scratch, in-memory copy of the part of the graph a plan can touch (the budget and target
memories' structure without their words, the spend observations, the clock, the ontology) with the
proposed action added as a node, so the answer is what the rules would conclude if the action were
taken, explained by the rule that concluded it. Nothing is written; the copy is dropped on return.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from engram.projections.explain import sentence, show
from engram.projections.plan_agents import planned_facts
from engram.projections.read import typed
from engram.projections.tenant_graph import TenantGraph
from engram.projections.terms import (
    ASSERTED,
    CLOCK,
    GRAPHS,
    INFERRED,
    MEMORY_PREFIX,
    ONTOLOGY,
    RDF_TYPE,
    agent_iri,
    e,
    memory_iri,
)
from engram.projections.visibility import MemoryFilter, Principal
from engram.schemas import payloads as ev
from engram.schemas import vocabulary as v
from pyoxigraph import Literal, NamedNode, Quad, Store, Triple

PLAN = NamedNode("urn:engram:plan:check")  # the proposed action's node in the scratch copy
NARRATIVE_CLASSES = {"Episode": "episode", "ToolCall": "tool_call", "DecisionRecord": "decision"}
# what a plan check copies of a constraint: its structure, never its words (label, content)
WORDS = frozenset({e("label"), e("content")})


def _one(graph: TenantGraph, node: NamedNode, name: str) -> Any:
    found = list(graph.store.quads_for_pattern(node, e(name), None, ASSERTED))
    return typed(found[0].object) if found else None


def _ids(terms: Iterable[object]) -> list[str]:
    return sorted(t.value.rsplit(":", 1)[-1] for t in terms if isinstance(t, NamedNode))


def may_see_node(graph: TenantGraph, who: Principal, kind: str, node_id: str) -> bool:
    """Whether the node exists and ``who`` may see it: its acting user, or an operator or auditor
    (``governance.sees_node``, for a read)."""
    if not v.full_match(v.ID_RE, node_id):
        return False
    n = agent_iri(kind, node_id)
    if _one(graph, n, "nodeId") is None:
        return False
    return who.sees_everything or (who.user is not None and _one(graph, n, "actingFor") == who.user)


def _statuses(graph: TenantGraph, node: NamedNode, sees: MemoryFilter) -> list[dict[str, str | None]]:
    """The node's derived decision statuses, each with the rule's sentence (first derivation);
    a status whose every derivation names a memory the principal may not see is left out."""
    out = []
    for q in graph.store.quads_for_pattern(node, e("decisionStatus"), None, INFERRED):
        for d in graph.explain(q.triple, depth=0):
            if all(_term_seen(x, sees) for x in d.bindings.values()):
                out.append({"status": q.object.value, "explanation": sentence(d.rule.explain, d.bindings)})
                break
    return sorted(out, key=lambda s: str(s["status"]))


def _term_seen(term: object, sees: MemoryFilter) -> bool:
    if isinstance(term, NamedNode) and term.value.startswith(MEMORY_PREFIX):
        return sees(term.value[len(MEMORY_PREFIX) :])
    return True


def _common(graph: TenantGraph, n: NamedNode) -> dict[str, Any]:
    return {
        "id": _one(graph, n, "nodeId"),
        "actor": {"id": _one(graph, n, "actor"), "role": _one(graph, n, "actorRole")},
        "acting_for": _one(graph, n, "actingFor"),
        "valid_from": _one(graph, n, "validFrom"),
        "recorded_at": _one(graph, n, "recordedAt"),
        "offset": _one(graph, n, "logOffset"),
    }


def decision(graph: TenantGraph, decision_id: str, sees: MemoryFilter) -> dict[str, Any]:
    """A decision as the API answers it: what, by whom, what it relied on (the cited memories the
    principal may see, those associated as supporting it, the live data), its action, statuses."""
    d = agent_iri("decision", decision_id)
    session = _one(graph, d, "inSession")
    episode = _one(graph, d, "inEpisode")
    spend = None
    if _one(graph, d, "plannedPlatform") is not None:
        spend = {
            "platform": _one(graph, d, "plannedPlatform"),
            "amount": _one(graph, d, "plannedAmount"),
            "currency": _one(graph, d, "plannedCurrency"),
            "period": _one(graph, d, "plannedPeriod"),
        }
    target = None
    if _one(graph, d, "plannedMetric") is not None:
        target = {"metric": _one(graph, d, "plannedMetric"), "value": _one(graph, d, "plannedValue")}
    based = [q.object for q in graph.store.quads_for_pattern(d, e("basedOn"), None, INFERRED)]
    breaches = [q.object for q in graph.store.quads_for_pattern(d, e("breaches"), None, INFERRED)]
    return {
        **_common(graph, d),
        "type": "decision",
        "decision": _one(graph, d, "decision"),
        "session_id": session.rsplit(":", 1)[-1] if session else None,
        "episode_id": episode.rsplit(":", 1)[-1] if episode else None,
        "relied_on": [m for m in _ids(based) if sees(m)],
        "live_data": sorted(
            q.object.value.removeprefix("urn:engram:")
            for q in graph.store.quads_for_pattern(d, e("reliesOnData"), None, ASSERTED)
        ),
        "spend": spend,
        "target_change": target,
        "breaches": [m for m in _ids(breaches) if sees(m)],
        "statuses": _statuses(graph, d, sees),
    }


def _narrative_item(graph: TenantGraph, n: NamedNode, kind: str, sees: MemoryFilter) -> dict[str, Any]:
    if kind == "decision":
        return decision(graph, n.value.rsplit(":", 1)[-1], sees)
    item = {**_common(graph, n), "type": kind}
    if kind == "episode":
        item["summary"] = _one(graph, n, "summary")
    else:
        episode = _one(graph, n, "inEpisode")
        item.update(
            tool=_one(graph, n, "tool"),
            arguments_digest=_one(graph, n, "argumentsDigest"),
            outcome=_one(graph, n, "outcome"),
            episode_id=episode.rsplit(":", 1)[-1] if episode else None,
        )
    return item


def episodes_in(graph: TenantGraph, session_id: str, sees: MemoryFilter) -> dict[str, Any]:
    """The session and its narrative: its episodes, tool calls and decisions in the order the log
    recorded them (one partition per tenant, so offsets order them totally)."""
    s = agent_iri("session", session_id)
    items = []
    for q in graph.store.quads_for_pattern(None, e("inSession"), s, ASSERTED):
        for t in graph.store.quads_for_pattern(q.subject, RDF_TYPE, None, ASSERTED):
            kind = NARRATIVE_CLASSES.get(t.object.value.removeprefix(v.ENGRAM))
            if kind is not None and isinstance(q.subject, NamedNode):
                items.append(_narrative_item(graph, q.subject, kind, sees))
    items.sort(key=lambda i: (i["offset"], i["type"]))
    return {
        **_common(graph, s),
        "goal": _one(graph, s, "goal"),
        "ended_at": _one(graph, s, "endedAt"),
        "outcome": _one(graph, s, "outcome"),
        "items": items,
    }


def session_memories(graph: TenantGraph, session_id: str) -> list[str]:
    """The memories a session's work touched, sorted by id: those its decisions relied on (cited, or
    associated as supporting them: ``:basedOn``) and those associated, by any relation, with one of
    its episodes, tool calls or decisions. Every one, active or not (``summarise`` keeps those its
    reader may see and counts the active)."""
    s = agent_iri("session", session_id)
    nodes = [q.subject for q in graph.store.quads_for_pattern(None, e("inSession"), s, ASSERTED)]
    found: set[str] = set()
    for n in nodes:
        for q in graph.store.quads_for_pattern(n, e("basedOn"), None, INFERRED):
            found.add(q.object.value)
        for here, there in (("associationTo", "associationFrom"), ("associationFrom", "associationTo")):
            for a in graph.store.quads_for_pattern(None, e(here), n, ASSERTED):
                found.update(
                    q.object.value for q in graph.store.quads_for_pattern(a.subject, e(there), None, ASSERTED)
                )
    return sorted(m.removeprefix(MEMORY_PREFIX) for m in found if m.startswith(MEMORY_PREFIX))


def decisions_relying_on(graph: TenantGraph, memory_id: str, who: Principal, sees: MemoryFilter) -> list[str]:
    """The decisions ``who`` may see that relied on the memory (``:basedOn``, rules/plans.dlog:
    cited, or associated as supporting the decision), in log order."""
    found = []
    for q in graph.store.quads_for_pattern(None, e("basedOn"), memory_iri(memory_id), INFERRED):
        decision_id = q.subject.value.rsplit(":", 1)[-1]
        if may_see_node(graph, who, "decision", decision_id):
            found.append((_one(graph, agent_iri("decision", decision_id), "logOffset") or 0, decision_id))
    return [decision_id for _, decision_id in sorted(found)]


def decisions_seen(graph: TenantGraph, who: Principal) -> list[str]:
    """Every decision ``who`` may see (its acting user's; all, for operators and auditors), in
    log order."""
    found = []
    for q in graph.store.quads_for_pattern(None, RDF_TYPE, e("DecisionRecord"), ASSERTED):
        decision_id = q.subject.value.rsplit(":", 1)[-1]
        if may_see_node(graph, who, "decision", decision_id):
            found.append((_one(graph, agent_iri("decision", decision_id), "logOffset") or 0, decision_id))
    return [decision_id for _, decision_id in sorted(found)]


# -- plans against the stored constraints ---------------------------------------------------


@dataclass(frozen=True)
class Finding:
    """One active constraint a plan would breach or bring near its limit, as the rule concluded."""

    status: str  # breach or near_limit
    memory_id: str
    rule: str
    explanation: str | None
    values: dict[str, int | float | str]


class UnknownName(ValueError):
    """A plan names a platform or metric the tenant has no data or constraint about."""


def known_platforms(graph: TenantGraph) -> set[str]:
    """Platforms with a spend observation or a budget cap (live data and structure, no words)."""
    return {q.object.value for q in graph.store.quads_for_pattern(None, e("platform"), None, ASSERTED)}


def known_metrics(graph: TenantGraph) -> set[str]:
    """Metrics with a definition in the ontology, a KPI observation or a target."""
    defined = {q.object.value for q in graph.store.quads_for_pattern(None, e("metricName"), None, None)}
    used = {q.object.value for q in graph.store.quads_for_pattern(None, e("metric"), None, ASSERTED)}
    return defined | used


def _subjects(graph: TenantGraph, cls: str) -> set[NamedNode]:
    out: set[NamedNode] = set()
    for g in (ASSERTED, INFERRED):
        out.update(q.subject for q in graph.store.quads_for_pattern(None, RDF_TYPE, e(cls), g))  # type: ignore[misc]
    return out


def _slice(graph: TenantGraph) -> Iterable[Quad]:
    """The asserted facts a plan check reads: the clock, every spend observation, and the budget
    and target memories (every class under them) without their words."""
    subjects = {CLOCK, *_subjects(graph, "Spend")}
    for cls in ("BudgetConstraintMemory", "PerformanceTargetMemory"):
        subjects |= _subjects(graph, cls)
    for s in subjects:
        for q in graph.store.quads_for_pattern(s, None, None, ASSERTED):
            if q.predicate not in WORDS:
                yield q


def check_plan(
    graph: TenantGraph | None,
    spend: ev.PlannedSpend | None,
    target_change: ev.PlannedKpi | None,
    sees: MemoryFilter,
    now: datetime | None = None,
) -> list[Finding]:
    """Every active constraint the action would breach or bring near its limit, by the rules over
    a scratch copy of the tenant's graph with the action added (see the module's docstring); only
    constraints ``sees`` lets through are answered. Raises ``UnknownName`` for a platform or metric
    the tenant knows nothing of (a typo would otherwise pass as "nothing breached")."""
    if spend is not None and (graph is None or spend.platform not in known_platforms(graph)):
        raise UnknownName(f"unknown platform {spend.platform!r}: no spend or budget cap on it is known")
    if target_change is not None and (graph is None or target_change.metric not in known_metrics(graph)):
        raise UnknownName(f"unknown metric {target_change.metric!r}: no definition, KPI or target names it")
    if graph is None:  # neither: a plan of nothing
        return []
    knowledge = graph.knowledge
    scratch = Store()  # in memory: gone when this returns
    scratch.extend(knowledge.ontology.quads(ONTOLOGY))
    scratch.extend(list(_slice(graph)))
    when = now or datetime.now(UTC)
    scratch.extend(Quad(s, p, o, ASSERTED) for s, p, o in planned_facts(PLAN, spend, target_change, when))
    knowledge.engine.materialize(scratch, GRAPHS)
    findings = []
    for status, predicate in (("breach", "breaches"), ("near_limit", "nearLimitOf")):
        for q in scratch.quads_for_pattern(PLAN, e(predicate), None, INFERRED):
            memory_id = q.object.value.removeprefix(MEMORY_PREFIX)
            if not sees(memory_id):
                continue
            for d in knowledge.engine.explain(scratch, GRAPHS, Triple(PLAN, e(predicate), q.object), depth=0):
                values = {
                    name: typed(term) if isinstance(term, Literal) else show(term)
                    for name, term in d.bindings.items()
                    if name in ("spent", "planned", "total", "cap", "currency", "pct", "threshold", "metric",
                                "value", "goal")
                }  # fmt: skip
                why = sentence(d.rule.explain, d.bindings)
                findings.append(Finding(status, memory_id, d.rule.source, why, values))
                break
    return sorted(findings, key=lambda f: (f.status != "breach", f.memory_id))
