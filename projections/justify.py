"""Justify: why engram holds a memory, or why it derived a fact about it, in one answer.

An auditor or an agent asking "why do you believe this?" needs the provenance (source, actor,
purpose, valid and system time), every event that touched the memory with its log position, the
supersession chain both ways, and for each derived fact the rule derivation tree down to asserted
facts. Those exist already as separate reads (``read.memory_lineage``, ``explain.inferred_about``);
this assembles them through one ``sees`` filter, so a justification never names a memory its
reader may not see (the chains stop there, and a derivation through one is left out).
"""

from __future__ import annotations

from typing import Any

from engram.projections.explain import InferredView, inferred_about
from engram.projections.read import get_memory, memory_lineage, memory_statuses
from engram.projections.tenant_graph import TenantGraph
from engram.projections.terms import memory_iri
from engram.projections.visibility import MemoryFilter

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
        "statuses": memory_statuses(graph, memory_id),
        "derived": derived,
    }
