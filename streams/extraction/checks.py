"""A candidate checked as the write it would become, before anyone sees it.

Whatever proposed it (a pattern, a model), a candidate is turned into the ``MemoryRemembered`` event
the workflow would write (``source: extraction``, company scope, an operator-like writer so that
governance, which is the workflow's business, is not what decides) and put through the same checks
as every write: ``event_from_json`` (Avro-level fields and limits, hostile text), the reserved
property names, and ``checked_plan`` against a tenant with no facts (derived classes, the plan, the
SHACL shapes of the class). A candidate a model made up that the shapes refuse is dropped here,
with the reason, rather than dead-lettered later.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engram.projections.knowledge import Knowledge
from engram.projections.plan import no_facts
from engram.projections.validation import PLAN_ERRORS, checked_plan, rejection_reason
from engram.schemas.checks import InvalidEvent
from engram.schemas.events import Position, event_from_json

# What a candidate's memory may hold: MemoryRemembered's body fields an extractor chooses.
MEMORY_FIELDS = (
    "label",
    "content",
    "kind",
    "importance",
    "confidence",
    "memory_class",
    "properties",
    "expires_at",
)
NOWHERE = Position(0, 0)


def candidate_event(memory: Mapping[str, Any], tenant: str = "extraction-check") -> dict[str, Any]:
    """The JSON form of the event ``memory`` would be written as (scope and writer are placeholders)."""
    payload = {k: memory[k] for k in MEMORY_FIELDS if k in memory and memory[k] is not None}
    payload["scope"] = "company"
    return {
        "type": "MemoryRemembered",
        "tenant": tenant,
        "source": "extraction",
        "actor": {"id": "extractor", "role": "operator"},
        "payload": payload,
    }


def refusal(knowledge: Knowledge, memory: Mapping[str, Any]) -> str | None:
    """Why the write ``memory`` would become is refused, or None when every check passes."""
    unknown = sorted(set(memory) - set(MEMORY_FIELDS))
    if unknown:
        return f"fields an extractor does not set: {', '.join(map(str, unknown))}"
    try:
        event = event_from_json(candidate_event(memory))
        checked_plan(knowledge, event, NOWHERE, no_facts())
    except PLAN_ERRORS as exc:
        return rejection_reason(exc)
    except RecursionError:
        return rejection_reason(InvalidEvent("the memory is nested too deeply"))
    return None
