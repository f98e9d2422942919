"""Justify: why engram holds a memory, or why it derived a fact about it, in one answer; and why
a decision was taken (``justify_decision``): who, for whom, on what, and how the rules judged it.

An auditor or an agent asking "why do you believe this?" needs the provenance (source, actor,
purpose, valid and system time), every event that touched the memory with its log position, the
supersession chain both ways, what an extracted memory was extracted from (the conversation and
its turns), a proposal's standing (what it would replace, who decided it) and the pending
proposals against a memory, and for each derived fact the rule derivation tree down to asserted
facts. Those exist already as separate reads (``read.memory_lineage``, ``explain.inferred_about``);
this assembles them through one ``sees`` filter, so a justification never names a memory its
reader may not see (the chains stop there, and a derivation through one is left out).
"""

from __future__ import annotations

from typing import Any

from engram.projections.agents import _ids, _one, _term_seen, decision, may_see_node
from engram.projections.explain import InferredView, inferred_about
from engram.projections.proposals import proposal_facts
from engram.projections.read import get_memory, memory_evidence, memory_lineage, memory_statuses
from engram.projections.tenant_graph import TenantGraph
from engram.projections.terms import ASSERTED, agent_iri, e, memory_iri
from engram.projections.visibility import MemoryFilter, Principal

DEPTH = 4  # derivation trees as deep as the derivations route answers them


class NoSuchFact(LookupError):
    """The memory has no (visible) derived fact of the asked predicate."""


def justify(
    graph: TenantGraph, memory_id: str, sees: MemoryFilter, fact: str | None = None
) -> dict[str, Any] | None:
    """The memory's justification as ``sees`` may be shown it, or None if there is no such memory.

    ``fact``: only the derived facts of that predicate (``targetStatus``, ``conflictsWith``, …);
    :class:`NoSuchFact` if the memory has none."""
    memory = get_memory(graph, memory_id, sees)
    lineage = memory_lineage(graph, memory_id, sees)
    if memory is None or lineage is None:
        return None
    derived: list[InferredView] = inferred_about(graph, memory_iri(memory_id), depth=DEPTH, sees=sees)
    if fact is not None:
        derived = [d for d in derived if d["predicate"] == fact]
        if not derived:
            raise NoSuchFact(f"memory {memory_id} has no derived {fact}")
    return {
        "memory_id": memory_id,
        "label": memory["label"],
        "memory_class": memory["memory_class"],
        "active": memory["active"],
        "forgotten": memory["forgotten"],
        "source": lineage["source"],
        "actor": lineage["actor"],
        "purpose": lineage["purpose"],
        "valid_from": lineage["valid_from"],
        "valid_to": lineage["valid_to"],
        "recorded_at": lineage["recorded_at"],
        "updated_at": lineage["updated_at"],
        "forgotten_at": lineage["forgotten_at"],
        "forgotten_reason": lineage["forgotten_reason"],
        "events": lineage["events"],
        "supersession": {"superseded_by": lineage["superseded_by"], "supersedes": lineage["supersedes"]},
        "evidence": memory_evidence(graph, memory_id),
        **proposal_facts(graph, memory_id, sees),  # what it proposes and its decision; proposals against it
        "statuses": memory_statuses(graph, memory_id),
        "derived": derived,
    }


def justify_decision(
    graph: TenantGraph, decision_id: str, who: Principal, sees: MemoryFilter
) -> dict[str, Any] | None:
    """A decision's justification as ``who`` (whose memory filter is ``sees``) may be shown it, or
    None if there is no such decision or ``who`` may not see it (answered alike).

    Who recorded it and for whom, its session and episode, the memories it relied on (cited in
    ``relied_on``, or associated as supporting it) and the live data, every event that touched it
    (its DecisionRecorded and each association naming it) with its log position, and its derived
    facts (``decisionStatus``, ``basedOn``, ``breaches``) each with the rule derivation tree. A
    memory ``sees`` hides is left out everywhere: of what it relied on, of the events (an
    association with it) and of the derivations (one through it)."""
    if not may_see_node(graph, who, "decision", decision_id):
        return None
    d = agent_iri("decision", decision_id)
    item = decision(graph, decision_id, sees)
    cited = {
        m for m in _ids(q.object for q in graph.store.quads_for_pattern(d, e("reliesOn"), None, ASSERTED))
    }
    relied_on = []
    for memory_id in item["relied_on"]:
        found = get_memory(graph, memory_id, sees)
        relied_on.append(
            {
                "memory_id": memory_id,
                "label": found["label"] if found else None,
                "how": "cited" if memory_id in cited else "supports",
                "active": found["active"] if found else None,
            }
        )
    events = [_event(graph, str(_one(graph, d, "changedBy")), "DecisionRecorded")]
    for end in ("associationFrom", "associationTo"):
        for q in graph.store.quads_for_pattern(None, e(end), d, ASSERTED):
            a = q.subject
            other = _one_term(graph, a, "associationTo" if end == "associationFrom" else "associationFrom")
            if other is not None and not _term_seen(other, sees):
                continue  # an association with a memory the reader may not see
            association_id = _one(graph, a, "nodeId")
            if association_id is None or not may_see_node(graph, who, "association", association_id):
                continue
            events.append(
                {
                    **_event(graph, str(_one(graph, a, "changedBy")), "MemoriesAssociated"),
                    "association_id": association_id,
                    "relation": _one(graph, a, "relation"),
                }
            )
    events.sort(key=lambda x: (x["partition"] is None, x["partition"] or 0, x["offset"] or 0))
    return {
        "decision_id": decision_id,
        "decision": item["decision"],
        "source": _one(graph, d, "source"),
        "actor": item["actor"],
        "acting_for": item["acting_for"],
        "purpose": _one(graph, d, "purpose"),
        "session_id": item["session_id"],
        "episode_id": item["episode_id"],
        "valid_from": item["valid_from"],
        "recorded_at": item["recorded_at"],
        "relied_on": relied_on,
        "live_data": item["live_data"],
        "spend": item["spend"],
        "target_change": item["target_change"],
        "breaches": item["breaches"],
        "events": events,
        "statuses": item["statuses"],
        "derived": inferred_about(graph, d, depth=DEPTH, sees=sees),
    }


def _one_term(graph: TenantGraph, node: object, name: str) -> object | None:
    found = list(graph.store.quads_for_pattern(node, e(name), None, ASSERTED))  # type: ignore[arg-type]
    return found[0].object if found else None


def _event(graph: TenantGraph, event_id: str, event_type: str) -> dict[str, Any]:
    pos = graph.applied_position(event_id)
    return {
        "event_id": event_id,
        "type": event_type,
        "partition": pos.partition if pos else None,
        "offset": pos.offset if pos else None,
    }
