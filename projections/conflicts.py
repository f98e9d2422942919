"""Which active memories a new one would structurally conflict with, by the rules' own key.

``rules/conflicts.dlog`` derives a memory's ``conflictKey`` (class and metric, platform or label)
and ``stakeholderKey``; two active memories with both equal conflict. A memory not yet written
has neither, so its key is derived by the same rules over a scratch store holding the ontology and
its own facts (a few ms), and looked up among the tenant's inferred facts: no key logic in code.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from engram.projections.knowledge import Knowledge
from engram.projections.plan import no_facts, plan
from engram.projections.rules.core import CoreEngine, engine_for
from engram.projections.rules.engine import RuleEngine
from engram.projections.rules.program import slice_for
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


Keys = tuple[set[str], set[str]]  # a memory's conflict keys and stakeholder keys


def keys_of(knowledge: Knowledge, event: Event) -> Keys:
    """The conflict keys and stakeholder keys the rules would derive for the event's new memory."""
    (keys,) = keys_of_many(knowledge, [event])
    return keys


def keys_of_many(knowledge: Knowledge, events: Sequence[Event]) -> list[Keys]:
    """``keys_of`` for many new memories, derived together: one scratch store and one pass of the
    rules for all of them (the pass costs about the same for one memory as for dozens). A memory's
    keys are a function of its own facts (the scratch store never held the tenant's others), so
    memories side by side in it do not change each other's; two events of one memory id are
    derived in passes of their own."""
    out: list[Keys | None] = [None] * len(events)
    todo = list(enumerate(events))
    while todo:
        seen: set[str] = set()
        now, later = [], []
        for i, event in todo:
            assert isinstance(event.payload, ev.MemoryRemembered)
            (later if event.payload.memory_id in seen else now).append((i, event))
            seen.add(event.payload.memory_id)
        engine, ontology, reads = _keys_engine(knowledge)
        scratch = Store()
        scratch.extend(ontology)
        for _, event in now:
            adds = plan(event, Position(0, 0), no_facts()).adds
            scratch.extend(
                q for q in adds if q.graph_name == ASSERTED and (reads is None or q.predicate.value in reads)
            )
        engine.materialize(scratch, GRAPHS)
        for i, event in now:
            m = memory_iri(event.payload.memory_id)
            out[i] = (_derived(scratch, m, "conflictKey"), _derived(scratch, m, "stakeholderKey"))
        todo = later
    return [keys for keys in out if keys is not None]


KEYS = frozenset({e("conflictKey").value, e("stakeholderKey").value})


# by knowledge digest
_ENGINES: dict[str, tuple[RuleEngine | CoreEngine, list[Quad], frozenset[str] | None]] = {}


def _keys_engine(knowledge: Knowledge) -> tuple[RuleEngine | CoreEngine, list[Quad], frozenset[str] | None]:
    """The rules that derive the two keys (``rules.program.slice_for``: 8 of the 49 today), the
    ontology's facts they read and the predicates they read (None: any): the pass that derives a
    new memory's keys skips every other rule, and the scratch store holds nothing they do not read."""
    found = _ENGINES.get(knowledge.digest)
    if found is None:
        part = slice_for(knowledge.engine.program, KEYS)
        reads = part.reads
        ontology = [
            q for q in knowledge.ontology.quads(ONTOLOGY) if reads is None or q.predicate.value in reads
        ]
        # the engine the tenant's rules run on (the core, unless the Python engine was chosen)
        choice = "core" if isinstance(knowledge.engine, CoreEngine) else "reference"
        found = _ENGINES[knowledge.digest] = (engine_for(part.program, choice), ontology, reads)
    return found


def _derived(scratch: Store, m: NamedNode, name: str) -> set[str]:
    return {q.object.value for q in scratch.quads_for_pattern(m, e(name), None, INFERRED)}


def rivals(knowledge: Knowledge, graph: TenantGraph, event: Event, keys: Keys | None = None) -> list[Rival]:
    """Active memories of the tenant with the new memory's conflict key, scope and stakeholders
    (``keys``: its keys, if derived already)."""
    p = event.payload
    assert isinstance(p, ev.MemoryRemembered)
    conflict, holders = keys if keys is not None else keys_of(knowledge, event)
    return _active_with(graph, conflict, p.scope.value, holders, memory_iri(p.memory_id))


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
