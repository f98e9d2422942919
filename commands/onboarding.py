"""Onboarding: a new tenant's spine of context on day one (its first objective, one durable fact,
one preference), written as ordinary memories through ``Commands.remember``, never around it.

Each slot given is one remember with source ``onboarding``, company scope and confidence 1, its
importance Critical for the objective and High for the others unless the operator says otherwise.
Its event id (and its memory id, unless one is given) is derived from the tenant, the slot and what
it says, so a retried request names the same events and is answered as the original: no duplicate.
A changed request is a new memory that ``remember``'s conflict rules judge like any other (a
same-labelled target on the same metric is a restatement; a rival of a person's, a 409).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any, Final

from engram.commands.answers import Accepted, Attribution, Invalid
from engram.commands.writes import Commands
from engram.projections.agents import known_metrics
from engram.projections.terms import e
from engram.schemas import vocabulary as v

SLOTS: Final = ("objective", "fact", "preference")  # each slot is also the memory's kind
DEFAULT_IMPORTANCE: Final = {
    "objective": int(v.Importance.CRITICAL),
    "fact": int(v.Importance.HIGH),
    "preference": int(v.Importance.HIGH),
}
NAMESPACE: Final = uuid.uuid5(uuid.NAMESPACE_URL, "urn:engram:onboarding")


def event_id(
    tenant: str, slot: str, memory: Mapping[str, Any], occurred_at: datetime | str | None
) -> uuid.UUID:
    """The event id of one slot: the same request always names the same event."""
    said = json.dumps(dict(memory), sort_keys=True, ensure_ascii=True, default=str)
    when = occurred_at.isoformat() if isinstance(occurred_at, datetime) else (occurred_at or "")
    return uuid.uuid5(NAMESPACE, f"{tenant}\n{slot}\n{said}\n{when}")


def memory_payload(
    tenant: str, slot: str, memory: Mapping[str, Any], occurred_at: datetime | str | None
) -> dict[str, Any]:
    """MemoryRemembered's fields for a slot: the operator's words, onboarding's defaults."""
    if slot not in SLOTS:
        raise ValueError(f"onboarding has no slot {slot!r}")
    eid = event_id(tenant, slot, memory, occurred_at)
    return {
        "memory_id": f"onboarding-{slot}-{eid.hex[:12]}",
        "importance": DEFAULT_IMPORTANCE[slot],
        **{k: value for k, value in memory.items() if value is not None},
        "kind": slot,
        "scope": v.Scope.COMPANY.value,
        "confidence": 1.0,
    }


def metrics(commands: Commands, tenant: str) -> set[str]:
    """The metrics a target may name: those the ontology defines, and any the tenant already uses."""
    defined = {
        t.object.value for t in commands.stores.knowledge.ontology.triples if t.predicate == e("metricName")
    }
    graph = commands.stores.get(tenant)
    return defined | (known_metrics(graph) if graph is not None else set())


async def onboard(
    commands: Commands,
    tenant: str,
    memories: Mapping[str, Mapping[str, Any]],
    by: Attribution,
    *,
    wait: bool = False,
) -> dict[str, Accepted]:
    """Remember each slot given (``memories``: slot → label, content and optional importance,
    memory_id, memory_class, properties), objective first. Every slot is checked before any is
    appended, so an invalid request writes nothing."""
    objective = memories.get("objective")
    metric = (objective or {}).get("properties", {}).get("metric")
    if metric is not None and metric not in (known := metrics(commands, tenant)):
        raise Invalid(
            f"unknown metric {metric!r}: one of {', '.join(sorted(known))}",
            ("body", "objective", "target", "metric"),
        )
    planned = writes(tenant, memories, by)
    for slot, payload, slot_by in planned:
        try:
            commands.drafted(slot_by.envelope("MemoryRemembered", tenant, payload))
        except Invalid as exc:
            raise Invalid(f"{slot}: {exc.reason}", ("body", slot)) from exc
    return {slot: await commands.remember(tenant, payload, b, wait=wait) for slot, payload, b in planned}


def writes(
    tenant: str, memories: Mapping[str, Mapping[str, Any]], by: Attribution
) -> list[tuple[str, dict[str, Any], Attribution]]:
    """Each slot given, objective first, as the remember it becomes: (slot, MemoryRemembered's
    fields, who writes it with its derived event id and source ``onboarding``)."""
    by = replace(by, source=v.Source.ONBOARDING.value)
    out = []
    for slot in (s for s in SLOTS if s in memories):
        payload = memory_payload(tenant, slot, memories[slot], by.occurred_at)
        derived = event_id(tenant, slot, memories[slot], by.occurred_at)
        out.append((slot, payload, replace(by, event_id=derived)))
    return out
