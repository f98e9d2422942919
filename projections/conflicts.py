"""Which active memories a new one would structurally conflict with, by the rules' own key.

``rules/conflicts.dlog`` derives a memory's ``conflictKey`` (class and metric, platform or label)
and ``stakeholderKey``; two active memories with both equal conflict. A memory not yet written
has neither, so its key is derived by the same rules over a scratch store holding the ontology and
its own facts (a few ms), and looked up among the tenant's inferred facts: no key logic in code.
"""

from __future__ import annotations

from dataclasses import dataclass

from engram.projections.knowledge import Knowledge
from engram.projections.plan import no_facts, plan
from engram.projections.tenant_graph import TenantGraph
from engram.projections.terms import ASSERTED, GRAPHS, INFERRED, ONTOLOGY, RDF_TYPE, e, memory_iri
from engram.schemas import payloads as ev
from engram.schemas.events import Event, Position
from pyoxigraph import Literal, NamedNode, Quad, Store


@dataclass(frozen=True)
class Rival:
    """An active memory the new one conflicts with."""

    id: str
    label: str
    source: str


def keys_of(knowledge: Knowledge, event: Event) -> tuple[set[str], set[str]]:
    """The conflict keys and stakeholder keys the rules would derive for the event's new memory."""
    assert isinstance(event.payload, ev.MemoryRemembered)
    scratch = Store()
    scratch.extend(knowledge.ontology.quads(ONTOLOGY))
    scratch.extend(q for q in plan(event, Position(0, 0), no_facts()).adds if q.graph_name == ASSERTED)
    knowledge.engine.materialize(scratch, GRAPHS)
    m = memory_iri(event.payload.memory_id)

    def values(name: str) -> set[str]:
        return {q.object.value for q in scratch.quads_for_pattern(m, e(name), None, INFERRED)}

    return values("conflictKey"), values("stakeholderKey")


def rivals(knowledge: Knowledge, graph: TenantGraph, event: Event) -> list[Rival]:
    """Active memories of the tenant with the new memory's conflict key, scope and stakeholders."""
    p = event.payload
    assert isinstance(p, ev.MemoryRemembered)
    keys, holders = keys_of(knowledge, event)
    return _active_with(graph, keys, p.scope.value, holders, memory_iri(p.memory_id))


def rivals_of_stored(graph: TenantGraph, memory_id: str) -> list[Rival]:
    """Active memories that a stored (say, superseded) memory would conflict with if it were active
    again: its own conflict and stakeholder keys, already derived, looked up the same way."""
    m = memory_iri(memory_id)
    keys = {o.value for o in _inferred(graph, m, "conflictKey")}
    holders = {o.value for o in _inferred(graph, m, "stakeholderKey")}
    return _active_with(graph, keys, _one(graph, m, "scope"), holders, m)


def _active_with(
    graph: TenantGraph, keys: set[str], scope: str | None, holders: set[str], itself: NamedNode
) -> list[Rival]:
    """Active memories other than ``itself`` with one of ``keys``, ``scope`` and a stakeholder key
    among ``holders``: what ``conflictsWith`` would pair it with."""
    out: dict[str, Rival] = {}
    for key in keys:
        for q in graph.store.quads_for_pattern(None, e("conflictKey"), Literal(key), INFERRED):
            m = q.subject
            if not isinstance(m, NamedNode) or m == itself:
                continue
            if Quad(m, RDF_TYPE, e("ActiveMemory"), INFERRED) not in graph.store:
                continue
            theirs = {o.value for o in _inferred(graph, m, "stakeholderKey")}
            if _one(graph, m, "scope") == scope and theirs & holders:
                mid = _one(graph, m, "memoryId") or ""
                out[mid] = Rival(mid, _one(graph, m, "label") or "", _one(graph, m, "source") or "")
    return sorted(out.values(), key=lambda r: r.id)


def _one(graph: TenantGraph, m: NamedNode, name: str) -> str | None:
    found = graph.objects(m, e(name))
    return found[0].value if found else None


def _inferred(graph: TenantGraph, m: NamedNode, name: str) -> list[Literal]:
    return [q.object for q in graph.store.quads_for_pattern(m, e(name), None, INFERRED)]  # type: ignore[misc]
