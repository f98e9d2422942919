"""Proposals: extracted memories that would replace a person's, waiting for a person's answer.

A captured memory never overwrites a human's (DESIGN §7): the command layer writes it with
``proposes`` (the memory it would replace; with ``also_proposes``, every one a person entered), the
rules keep it out of every active set while it is pending or rejected, and a ``ProposalDecided``
settles it. These are the reads: the pending ones a principal may see (with the memories each
would replace), and what ``justify`` says of either end.
"""

from __future__ import annotations

from typing import Any

from engram.projections.read import _value, get_memory
from engram.projections.tenant_graph import TenantGraph
from engram.projections.terms import ASSERTED, e, memory_iri, time_order
from engram.projections.visibility import MemoryFilter, Principal, may_see_memory
from engram.schemas import vocabulary as v
from pyoxigraph import Literal, NamedNode

PENDING = Literal(v.ProposalStatus.PENDING.value)


def _id(node: object) -> str:
    return str(getattr(node, "value", "")).rsplit(":", 1)[-1]


def pending_against(graph: TenantGraph, memory_id: str, sees: MemoryFilter) -> list[str]:
    """The pending proposals to replace ``memory_id`` that ``sees`` lets through, by id."""
    against = graph.store.quads_for_pattern(None, e("proposes"), memory_iri(memory_id), ASSERTED)
    found = (_id(q.subject) for q in against)
    return sorted(p for p in found if sees(p) and _status(graph, memory_iri(p)) == v.ProposalStatus.PENDING)


def pending(graph: TenantGraph, who: Principal, sees: MemoryFilter) -> list[dict[str, Any]]:
    """Every pending proposal ``who`` may see, with the memories it would replace (one ``who`` may
    not see hides the proposal too: it could not answer it), newest first."""
    out = []
    for q in graph.store.quads_for_pattern(None, e("proposalStatus"), PENDING, ASSERTED):
        proposal = get_memory(graph, _id(q.subject), sees)
        if proposal is None or not may_see_memory(who, proposal):
            continue
        olds = [get_memory(graph, _id(o), sees) for o in graph.objects(q.subject, e("proposes"))]  # type: ignore[arg-type]
        replaced = sorted(
            (o for o in olds if o is not None and may_see_memory(who, o)), key=lambda o: o["id"]
        )
        if not olds or len(replaced) < len(olds):
            continue
        out.append(
            {
                "id": proposal["id"],
                "proposal": proposal,
                "replaces": replaced[0],
                "replaces_all": replaced,
                "reason": _one(graph, q.subject, "purpose"),  # why it was extracted, if the writer said
                "proposed_at": proposal["recorded_at"],
            }
        )
    out.sort(key=lambda x: (time_order(x["proposed_at"]), x["id"]), reverse=True)
    return out


def is_pending(graph: TenantGraph, memory_id: str) -> bool:
    return _status(graph, memory_iri(memory_id)) == v.ProposalStatus.PENDING


def proposal_facts(graph: TenantGraph, memory_id: str, sees: MemoryFilter) -> dict[str, Any]:
    """What ``justify`` shows of proposals: for a proposal, what it would replace and how it was
    decided (who, for whom, when, why); for any memory, the pending proposals against it."""
    m = memory_iri(memory_id)
    status = _status(graph, m)
    out: dict[str, Any] = {"pending_proposals": pending_against(graph, memory_id, sees)}
    if status is None:
        out["proposal"] = None
        return out
    olds = sorted(old for o in graph.objects(m, e("proposes")) if sees(old := _id(o)))
    out["proposal"] = {
        "proposes": olds[0] if olds else None,
        "proposes_all": olds,
        "status": status,
        "decided_by": _one(graph, m, "decidedBy"),
        "decided_by_role": _one(graph, m, "decidedByRole"),
        "decided_for": _one(graph, m, "decidedFor"),
        "decided_at": _one(graph, m, "decidedAt"),
        "reason": _one(graph, m, "decisionReason"),
    }
    return out


def _status(graph: TenantGraph, m: NamedNode) -> str | None:
    return _one(graph, m, "proposalStatus")


def _one(graph: TenantGraph, m: object, name: str) -> Any:
    found = graph.objects(m, e(name))  # type: ignore[arg-type]
    return _value(found[0]) if found else None
