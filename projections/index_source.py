"""What a tenant's search indexes read of its graph: a memory's text for BM25, its vector of one
model, its words to embed, and which memories changed after an index's checkpoint.

Pure reads of the store, kept apart from ``TenantIndexes`` (which owns the indexes and their
caches) so what BM25 and the vectors see of a memory is defined in one place.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable

import numpy as np
from engram.projections.terms import ASSERTED, MEMORY_PREFIX, META, VECTORS, e, memory_iri
from engram.schemas import vocabulary as v
from engram.schemas.events import Position
from pyoxigraph import Literal, NamedNode, Store

EVENT_PREFIX = "urn:engram:event:"
TEXT_PREDICATES = ("label", "content")


def memory_id_of(node: NamedNode) -> str:
    return node.value[len(MEMORY_PREFIX) :]


def _words(name: str) -> str:
    """``BudgetConstraintMemory`` → ``Budget Constraint Memory``: class names are searchable words."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", name)


def decode_vector(term: Literal) -> np.ndarray:
    return np.frombuffer(base64.b64decode(term.value), dtype="<f4")


def memory_text(store: Store, memory_id: str) -> str | None:
    """What BM25 sees of a memory; None for one that is unknown or forgotten (erased)."""
    values: dict[str, list[str]] = {}
    for q in store.quads_for_pattern(memory_iri(memory_id), None, None, ASSERTED):
        if q.predicate.value.startswith(v.ENGRAM):
            values.setdefault(q.predicate.value[len(v.ENGRAM) :], []).append(q.object.value)
    if "memoryId" not in values or values.get("forgotten") == ["true"]:
        return None
    cls = values.get("memoryClass", [v.ENGRAM + "Memory"])[0].rsplit("#", 1)[-1]
    props = [
        f"{name} {value}"
        for name, vals in sorted(values.items())
        if name not in v.MEMORY_PREDICATES
        for value in vals
    ]
    return "\n".join([*(x for p in TEXT_PREDICATES for x in values.get(p, [])), _words(cls), *props])


def models(store: Store, memory_id: str) -> list[str]:
    """The model ids the graph records for a memory's vector (one, or none)."""
    found = store.quads_for_pattern(memory_iri(memory_id), e("embeddingModel"), None, ASSERTED)
    return [q.object.value for q in found]


def memory_vector(store: Store, memory_id: str, model: str, dim: int) -> np.ndarray | None:
    """The memory's vector by ``model``, if the graph holds a sound one (finite, not zero)."""
    if models(store, memory_id) != [model]:
        return None
    for q in store.quads_for_pattern(memory_iri(memory_id), e("embedding"), None, VECTORS):
        vec = decode_vector(q.object)  # type: ignore[arg-type]
        if vec.shape == (dim,) and np.all(np.isfinite(vec)) and np.any(vec):
            return vec
    return None


def stale(store: Store, memory_id: str, model: str) -> bool:
    """Embedded by ``model``, but its vector dropped (a revision changed its words)."""
    m = memory_iri(memory_id)
    return (
        models(store, memory_id) == [model]
        and next(store.quads_for_pattern(m, e("embedding"), None, VECTORS), None) is None
    )


def words(store: Store, memory_ids: Iterable[str]) -> dict[str, tuple[str, str]]:
    """(label, content) of these memories, leaving out the unknown and the forgotten."""
    found = {}
    for memory_id in memory_ids:
        if memory_text(store, memory_id) is not None:
            m = memory_iri(memory_id)
            label, content = (
                next((q.object.value for q in store.quads_for_pattern(m, e(p), None, ASSERTED)), "")
                for p in ("label", "content")
            )
            found[memory_id] = (label, content)
    return found


def stored_vectors(store: Store) -> Iterable[tuple[str, Literal]]:
    for q in store.quads_for_pattern(None, e("embedding"), None, VECTORS):
        yield memory_id_of(q.subject), q.object  # type: ignore[arg-type,misc]


def memory_ids(store: Store) -> list[str]:
    return [q.object.value for q in store.quads_for_pattern(None, e("memoryId"), None, ASSERTED)]


def changed_since(store: Store, position: Position) -> set[str]:
    """Memories changed by an event the log holds after ``position`` (the graph records each)."""
    changed: set[str] = set()
    for q in store.quads_for_pattern(None, e("position"), None, META):
        partition, _, offset = q.object.value.partition(":")
        if int(partition) == position.partition and int(offset) > position.offset:
            event_id = Literal(q.subject.value[len(EVENT_PREFIX) :])
            for hit in store.quads_for_pattern(None, e("changedBy"), event_id, ASSERTED):
                changed.add(memory_id_of(hit.subject))  # type: ignore[arg-type]
    return changed
