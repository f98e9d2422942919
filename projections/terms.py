"""The RDF terms of a tenant's graph: its named graphs, its IRIs, and every literal's one form.

Every literal the projection writes is built here, so "the same value" is always the same term
and re-asserting an equal value is a no-op, never a removal.
"""

from __future__ import annotations

import base64
import math
from array import array
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from engram.projections.rules.engine import Graphs
from engram.schemas import vocabulary as v
from engram.schemas.checks import InvalidEvent
from pyoxigraph import Literal, NamedNode

ASSERTED = NamedNode(v.GRAPH_ASSERTED)
INFERRED = NamedNode(v.GRAPH_INFERRED)
ONTOLOGY = NamedNode(v.GRAPH_ONTOLOGY)
REMOVED = NamedNode("urn:engram:graph:removed")  # scratch, only during a rule update
META = NamedNode(v.GRAPH_META)
VECTORS = NamedNode(v.GRAPH_VECTORS)  # a memory's embedding; invisible to the rules
GRAPHS = Graphs(base=(ASSERTED, ONTOLOGY), inferred=INFERRED, removed=REMOVED)
RDF_TYPE = NamedNode(v.RDF_TYPE)
XSD_DATETIME = NamedNode(v.XSD + "dateTime")
COMPANY = NamedNode("urn:engram:company")
CLOCK = NamedNode("urn:engram:clock")
PROJECTION = NamedNode("urn:engram:projection")
REDACTED = "[redacted]"

Term = NamedNode | Literal


def e(local: str) -> NamedNode:
    """A term of engram's own vocabulary."""
    return NamedNode(v.ENGRAM + local)


MEMORY_PREFIX = "urn:engram:memory:"


def memory_iri(memory_id: str) -> NamedNode:
    return NamedNode(MEMORY_PREFIX + memory_id)


def kpi_iri(metric: str, period: str) -> NamedNode:
    """One node per metric and period: a correction of the period replaces its value, another
    period is another node (the rules decide which one is current)."""
    return NamedNode(f"urn:engram:kpi:{metric}:{period}")


def spend_iri(platform: str, currency: str, period: str) -> NamedNode:
    return NamedNode(f"urn:engram:spend:{platform}:{currency}:{period}")


def agent_iri(kind: str, node_id: str) -> NamedNode:
    """An agent-work node: ``session``, ``episode``, ``toolcall``, ``decision`` or ``association``."""
    return NamedNode(f"urn:engram:{kind}:{node_id}")


def ref_iri(kind: str, node_id: str) -> NamedNode:
    """An association's end (``payloads.parse_ref``): a memory, an episode or a decision."""
    return memory_iri(node_id) if kind == "memory" else agent_iri(kind, node_id)


def user_iri(user_id: str) -> NamedNode:
    return NamedNode(f"urn:engram:user:{user_id}")


def event_iri(event_id: str) -> NamedNode:
    return NamedNode(f"urn:engram:event:{event_id}")


def time_literal(value: datetime) -> Literal:
    """An xsd:dateTime in the store's canonical form: UTC, ``Z``, no trailing zeros in the fraction.

    Oxigraph compares times by value but writes them back canonically; building the same form
    here keeps "replace with an equal time" a no-op instead of a removal.
    """
    text = value.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "")
    whole, _, fraction = text.partition(".")
    fraction = fraction.rstrip("0")
    return Literal(f"{whole}.{fraction}Z" if fraction else f"{whole}Z", datatype=XSD_DATETIME)


def time_order(text: str | None) -> str:
    """A stored time (``time_literal``'s form) as text that sorts as the time does. The canonical
    form drops a fraction's trailing zeros, so as plain text "…:12Z" sorts after "…:12.5Z" and
    "…:12.1Z" after "…:12.15Z"; padding the fraction puts them in time order. "" for no time."""
    if not text:
        return ""
    whole, _, fraction = text.removesuffix("Z").partition(".")
    return f"{whole}.{fraction.ljust(9, '0')}"


def vector_literal(vector: Sequence[float]) -> Literal:
    """An embedding as one literal: base64 of little-endian float32, the form the index reads."""
    return Literal(base64.b64encode(array("f", vector).tobytes()).decode("ascii"))


def value_literal(value: Any) -> Literal:
    """A typed literal for a property value: boolean, integer, double or string, canonical."""
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidEvent(f"numbers must be finite, got {value!r}")
        return Literal(value + 0.0)  # -0.0 + 0.0 is 0.0: one zero
    if isinstance(value, bool | int | str):
        return Literal(value)
    raise InvalidEvent(f"unsupported property value {value!r}")
