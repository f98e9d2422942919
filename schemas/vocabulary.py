"""The shared vocabulary, defined once: namespaces, kinds, scopes, importance tiers, id shapes."""

from __future__ import annotations

import re
from enum import IntEnum
from typing import Final

ENGRAM: Final = "https://engram.dev/ns#"
XSD: Final = "http://www.w3.org/2001/XMLSchema#"
RDF_TYPE: Final = "http://www.w3.org/1999/02/22-rdf-syntax-ns#type"

GRAPH_ASSERTED: Final = "urn:engram:graph:asserted"
GRAPH_INFERRED: Final = "urn:engram:graph:inferred"
GRAPH_META: Final = "urn:engram:graph:meta"
GRAPH_ONTOLOGY: Final = "urn:engram:graph:ontology"
GRAPH_VECTORS: Final = "urn:engram:graph:vectors"

KINDS: Final = ("preference", "fact", "objective", "context")
SCOPES: Final = ("user", "team", "company")
SOURCES: Final = ("agent", "extraction", "operator", "onboarding", "pipeline", "system")
ON_CONFLICT: Final = ("ask", "replace", "keep_both")


class Importance(IntEnum):
    """Importance tiers 1-5; the names are what the API and ontology show."""

    DISABLED = 1
    LOW = 2
    MEDIUM = 3
    HIGH = 4
    CRITICAL = 5


EVENT_NAMESPACE: Final = "engram.events"
EVENT_TYPES: Final = (
    "MemoryRemembered",
    "MemoryRevised",
    "MemorySuperseded",
    "MemoryRestored",
    "MemoryForgotten",
    "KpiObserved",
    "SpendObserved",
    "ClockTicked",
    "StakeholderChanged",
)

# Tenant ids name directories and Kafka keys; memory ids, metrics and platforms become IRIs.
# Always test with full_match: ``$`` alone also matches before a trailing newline.
TENANT_RE: Final = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
ID_RE: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
NAME_RE: Final = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")
CLASS_RE: Final = re.compile(r"^(:?[A-Z][A-Za-z0-9_]{0,127}|https?://[^\s<>\"{}|^`\\]+)$")
CURRENCY_RE: Final = re.compile(r"^[A-Z]{3}$")

REVISABLE_FIELDS: Final = {
    "label": str,
    "content": str,
    "kind": str,
    "importance": int,
    "confidence": float,
    "expires_at": str,
}
CLEARABLE_FIELDS: Final = frozenset({"expires_at"})


# Predicates the projection writes for every memory; any other engram predicate is a property.
MEMORY_PREDICATES: Final = frozenset(
    {
        "memoryId", "rememberedBy", "label", "content", "kind", "scope", "stakeholderUser",
        "stakeholderTeam", "importance", "confidence", "expiresAt", "embeddingModel", "source", "actor",
        "actorRole", "validFrom", "recordedAt", "updatedAt", "changedBy", "supersededBy", "forgotten",
        "forgottenAt", "forgottenReason", "memoryClass", "embedding",
    }
)  # fmt: skip
# Predicates the rules derive about a memory.
DERIVED_PREDICATES: Final = frozenset(
    {
        "supersedes", "targetStatus", "budgetStatus", "budgetPercent", "budgetSpend", "liveRank",
        "conflictsWith", "conflictKey", "stakeholderKey",
    }
)  # fmt: skip
# A class property may not take one of these names.
RESERVED_PROPERTIES: Final = MEMORY_PREDICATES | DERIVED_PREDICATES


def full_match(pattern: re.Pattern[str], value: object) -> bool:
    """Whether ``value`` is a string that ``pattern`` matches entirely (no trailing newline)."""
    return isinstance(value, str) and pattern.fullmatch(value) is not None


def valid_iri(iri: str) -> bool:
    """Whether pyoxigraph accepts ``iri`` (stricter than the class-name pattern)."""
    from pyoxigraph import NamedNode

    try:
        NamedNode(iri)
    except ValueError:
        return False
    return True


def class_iri(memory_class: str) -> str:
    """``PerformanceTargetMemory`` or ``:PerformanceTargetMemory`` name engram's own classes."""
    if memory_class.startswith(("http://", "https://")):
        return memory_class
    return ENGRAM + memory_class.removeprefix(":")
