"""One tenant's real on-disk store, fed events as one partition of the log would feed it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engram.projections.conflict_sets import CONFLICTS_WITH, partners
from engram.projections.explain import derived_for_memory
from engram.projections.knowledge import Knowledge
from engram.projections.rules.engine import Graphs
from engram.projections.tenant_graph import Status, TenantGraph
from engram.projections.terms import ASSERTED, ONTOLOGY, REMOVED, memory_iri
from engram.schemas import vocabulary as v
from engram.schemas.events import Event, Position
from pyoxigraph import NamedNode, Triple

from tests.factories import event

CHECK = NamedNode("urn:engram:graph:check")  # scratch: a from-scratch materialisation to compare with
APPENDED_MS = 1_764_547_200_000  # 2025-12-01T00:00:00Z, the log's append time of the first event


class Tenant:
    """Events at increasing offsets of one partition, each appended at ``timestamp_ms`` (plus
    ``step_ms`` per offset); ``reason`` is the last outcome's."""

    def __init__(
        self,
        path: Path,
        knowledge: Knowledge | None = None,
        *,
        partition: int = 0,
        timestamp_ms: int = APPENDED_MS,
        step_ms: int = 0,
    ) -> None:
        self.graph = TenantGraph(path, knowledge)
        self.partition, self.timestamp_ms, self.step_ms = partition, timestamp_ms, step_ms
        self.offset = -1
        self.reason: str | None = None

    def apply(
        self,
        ev: Event | str,
        payload: dict[str, Any] | None = None,
        *,
        timestamp_ms: int | None = None,
        **envelope: Any,
    ) -> Status:
        """Apply an event, or one built from its type, JSON payload and envelope fields
        (``tests.factories.event``)."""
        if isinstance(ev, str):
            assert payload is not None
            ev = event(ev, payload, **envelope)
        self.offset += 1
        at = self.timestamp_ms + self.step_ms * self.offset if timestamp_ms is None else timestamp_ms
        outcome = self.graph.apply(ev, Position(self.partition, self.offset, at))
        self.reason = outcome.reason
        return outcome.status

    def objects(self, s: NamedNode, p: NamedNode) -> list[str]:
        return [str(o) for o in self.graph.objects(s, p)]

    def values(self, memory_id: str, predicate: str) -> set[str]:
        """Every value of an engram predicate of a memory, asserted or inferred (``conflictsWith``:
        the pairs read from its conflict sets, as every reader sees them)."""
        iri = NamedNode(v.ENGRAM + predicate)
        if iri == CONFLICTS_WITH:
            return {other.value for other in partners(self.graph.store, memory_iri(memory_id))}
        return {q.object.value for q in self.graph.store.quads_for_pattern(memory_iri(memory_id), iri, None)}

    def has(self, memory_id: str, cls: str) -> bool:
        """Whether a memory is of an engram class, asserted or inferred."""
        types = self.graph.store.quads_for_pattern(memory_iri(memory_id), NamedNode(v.RDF_TYPE), None)
        return v.ENGRAM + cls in {q.object.value for q in types}

    def explanation(self, memory_id: str, predicate: str) -> str:
        return next(
            d["explanation"] for d in derived_for_memory(self.graph, memory_id) if d["predicate"] == predicate
        )


def from_scratch(graph: TenantGraph) -> set[Triple]:
    """What the rules infer from the store's base facts, materialised anew (beside the live result)."""
    scratch = Graphs(base=(ASSERTED, ONTOLOGY), inferred=CHECK, removed=REMOVED)
    graph.knowledge.engine.materialize(graph.store, scratch)
    out = {q.triple for q in graph.store.quads_for_pattern(None, None, None, CHECK)}
    graph.store.remove_graph(CHECK)
    return out
