"""The shared vocabulary, defined once: namespaces, kinds, scopes, importance tiers, id shapes,
and the size limits every edge (HTTP, ``engram produce``, the projector) enforces.

The enums mirror the Avro enums in ``avro/`` (a test keeps the two equal); the event types are the
branches of the Envelope's ``payload`` union (``schemas.payloads.EVENT_TYPES``).
"""

from __future__ import annotations

import re
from enum import IntEnum, StrEnum
from functools import cache
from typing import Final

ENGRAM: Final = "https://engram.dev/ns#"
XSD: Final = "http://www.w3.org/2001/XMLSchema#"
RDF_TYPE: Final = "http://www.w3.org/1999/02/22-rdf-syntax-ns#type"

GRAPH_ASSERTED: Final = "urn:engram:graph:asserted"
GRAPH_INFERRED: Final = "urn:engram:graph:inferred"
GRAPH_META: Final = "urn:engram:graph:meta"
GRAPH_ONTOLOGY: Final = "urn:engram:graph:ontology"
GRAPH_VECTORS: Final = "urn:engram:graph:vectors"


class Kind(StrEnum):
    PREFERENCE = "preference"
    FACT = "fact"
    OBJECTIVE = "objective"
    CONTEXT = "context"


class Scope(StrEnum):
    USER = "user"
    TEAM = "team"
    COMPANY = "company"


class Source(StrEnum):
    """Where a change came from; every memory is attributable."""

    AGENT = "agent"
    EXTRACTION = "extraction"
    OPERATOR = "operator"
    ONBOARDING = "onboarding"
    PIPELINE = "pipeline"
    SYSTEM = "system"


class Role(StrEnum):
    """What a bearer token's holder is (DESIGN §6); an event's actor has one too."""

    USER = "user"
    OPERATOR = "operator"
    PIPELINE = "pipeline"
    AGENT = "agent"
    AUDITOR = "auditor"


class TurnRole(StrEnum):
    """Who said a conversation turn, by part (``ConversationTurn.role``)."""

    USER = "user"
    ASSISTANT = "assistant"
    SYSTEM = "system"
    OTHER = "other"


class OnConflict(StrEnum):
    ASK = "ask"
    REPLACE = "replace"
    KEEP_BOTH = "keep_both"


class ProposalDecision(StrEnum):
    """A person's answer to a proposal (``ProposalDecided``)."""

    ACCEPTED = "accepted"
    REJECTED = "rejected"


class ProposalStatus(StrEnum):
    """Where a proposal stands: pending until decided; only an accepted one is ever active."""

    PENDING = "pending"
    ACCEPTED = "accepted"
    REJECTED = "rejected"


class Relation(StrEnum):
    """The types of an association (``MemoriesAssociated``), each a predicate of the ontology
    (``RELATION_PREDICATES``) that the projection asserts from one end to the other, so rules join on it."""

    RELATES_TO = "relates_to"
    SUPPORTS = "supports"
    CONTRADICTS = "contradicts"
    REFINES = "refines"
    DEPENDS_ON = "depends_on"
    CAUSED_BY = "caused_by"
    PART_OF = "part_of"


RELATION_PREDICATES: Final = {
    Relation.RELATES_TO: "relatesTo",
    Relation.SUPPORTS: "supports",
    Relation.CONTRADICTS: "contradicts",
    Relation.REFINES: "refines",
    Relation.DEPENDS_ON: "dependsOn",
    Relation.CAUSED_BY: "causedBy",
    Relation.PART_OF: "partOf",
}


class ToolOutcome(StrEnum):
    OK = "ok"
    ERROR = "error"
    REFUSED = "refused"
    TIMEOUT = "timeout"


# What an association's end or a decision's live data names: a memory id, or a typed reference.
REF_KINDS: Final = ("episode", "decision")
DIGEST_RE: Final = re.compile(r"^sha256:[0-9a-f]{64}$")
DECISION_MAX: Final = 4096
SUMMARY_MAX: Final = 4096
CITED_MAX: Final = 64
PROPOSED_MAX: Final = 64  # the memories one proposal would replace (proposes and also_proposes)
EVIDENCE_TURNS_MAX: Final = 64  # the turns one extracted memory cites: a tail, not a history


@cache
def values(enum: type[StrEnum]) -> frozenset[str]:
    """The values of ``enum``, for a membership test on untrusted input (an enum's members are fixed,
    so once per enum)."""
    return frozenset(member.value for member in enum)


class Importance(IntEnum):
    """Importance tiers 1-5; the names are what the API and ontology show."""

    DISABLED = 1
    LOW = 2
    MEDIUM = 3
    HIGH = 4
    CRITICAL = 5


EVENT_NAMESPACE: Final = "engram.events"

# What Avro's long holds: an integer beyond it would become a double in a union (and lose digits).
LONG_MIN: Final = -(2**63)
LONG_MAX: Final = 2**63 - 1

# Sizes, in characters (the API's request models and the domain checks read these).
LABEL_MAX: Final = 512
REASON_MAX: Final = 1024  # why a proposal was decided
CONTENT_MAX: Final = 32_768
PROPERTY_TEXT_MAX: Final = 32_768
EMBEDDING_MAX_DIM: Final = 4096
TURN_TEXT_MAX: Final = 32_768  # one turn's words: a long message, not a pasted document
SPEAKER_MAX: Final = 256

# Tenant ids name directories and Kafka keys; memory ids, metrics and platforms become IRIs.
# Always test with full_match: ``$`` alone also matches before a trailing newline.
TENANT_RE: Final = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
ID_RE: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
NAME_RE: Final = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")
CLASS_RE: Final = re.compile(r"^(:?[A-Z][A-Za-z0-9_]{0,127}|https?://[^\s<>\"{}|^`\\]+)$")
CURRENCY_RE: Final = re.compile(r"^[A-Z]{3}$")


# Predicates the projection writes for every memory; any other engram predicate is a property, and
# no property may take one of these names (nor one a rule concludes: ``Knowledge.reserved``).
MEMORY_PREDICATES: Final = frozenset(
    {
        "memoryId", "rememberedBy", "label", "content", "kind", "scope", "stakeholderUser",
        "stakeholderTeam", "importance", "confidence", "expiresAt", "embeddingModel", "source", "actor",
        "actorRole", "validFrom", "validTo", "recordedAt", "updatedAt", "changedBy", "supersededBy",
        "forgotten", "forgottenAt", "forgottenReason", "memoryClass", "embedding", "purpose", "legalHold",
        "evidenceConversation", "evidenceTurn",
        "proposes", "proposalStatus", "decidedBy", "decidedByRole", "decidedFor", "decidedAt",
        "decisionReason",
    }
)  # fmt: skip


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
