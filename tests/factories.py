"""Shared test factories: events in their JSON form, and random-but-valid event streams."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from engram.schemas.events import Actor, Event, event_from_json
from engram.schemas.payloads import payload_class

ACTOR = {"id": "dana", "role": "operator"}


def envelope(
    event_type: str, payload: dict[str, Any], *, tenant: str = "acme", **extra: Any
) -> dict[str, Any]:
    """An event's JSON form, written by the operator dana; a user-scoped memory by its own user
    (as the governance rules want), unless ``actor`` says otherwise."""
    return {
        "type": event_type,
        "tenant": tenant,
        "source": "operator",
        "actor": author(event_type, payload),
        "payload": payload,
        **extra,
    }


def author(event_type: str, payload: Any) -> dict[str, str]:
    holders = payload.get("stakeholders") if isinstance(payload, dict) else None
    user = holders.get("user_id") if isinstance(holders, dict) else None
    if event_type == "MemoryRemembered" and payload.get("scope") == "user" and isinstance(user, str):
        return {"id": user, "role": "user"}
    return ACTOR


def remembered(memory_id: str = "m1", **fields: Any) -> dict[str, Any]:
    payload = {
        "memory_id": memory_id,
        "label": f"label of {memory_id}",
        "content": f"content of {memory_id}",
        "kind": "fact",
        "scope": "company",
        "importance": 3,
    }
    payload.update(fields)
    return payload


def event(event_type: str, payload: dict[str, Any], *, tenant: str = "acme", **extra: Any) -> Event:
    return event_from_json(envelope(event_type, payload, tenant=tenant, **extra))


# One valid example of every payload type, for round trips and projection tests.
EXAMPLES: dict[str, dict[str, Any]] = {
    "MemoryRemembered": remembered(
        "m1",
        kind="objective",
        importance=5,
        confidence=0.9,
        memory_class="PerformanceTargetMemory",
        properties={"metric": "roas", "goal": 3.0, "strict": True, "window": 30, "note": None},
        expires_at="2027-01-01T00:00:00Z",
        embedding=[0.1, 0.2],
        embedding_model="mini",
        stakeholders={"user_id": None, "team_ids": ["growth"]},
        evidence={"conversation_id": "c1", "turn_ids": ["c1-1", "c1-2"]},
    ),
    "MemoryRevised": {
        "memory_id": "m1",
        "changes": {"label": "new label", "expires_at": None, "importance": 4},
        "property_changes": {"goal": 3.5, "window": None},
    },
    "MemorySuperseded": {"memory_id": "m1", "superseded_by": "m2"},
    "MemoryRestored": {"memory_id": "m1"},
    "MemoryForgotten": {"memory_id": "m1", "reason": "retention policy"},
    "KpiObserved": {"metric": "roas", "value": 2.7, "period": "2026-11"},
    "SpendObserved": {"platform": "meta", "amount": 34000.0, "currency": "USD", "period": "2026-11"},
    "ClockTicked": {"now": "2026-12-01T00:00:00Z"},
    "StakeholderChanged": {"user_id": "sam", "team_ids": ["growth", "brand"], "role": "user"},
    "LegalHoldPlaced": {"memory_id": "m1", "reason": "litigation 2026-17"},
    "LegalHoldReleased": {"memory_id": "m1", "reason": "case closed"},
    "SessionStarted": {"session_id": "s1", "goal": "plan December's Meta spend"},
    "SessionEnded": {"session_id": "s1", "outcome": "done"},
    "EpisodeRecorded": {"episode_id": "e1", "session_id": "s1", "summary": "Sam asked for more Meta reach"},
    "ToolCalled": {
        "call_id": "c1",
        "session_id": "s1",
        "episode_id": "e1",
        "tool": "check_plan",
        "arguments_digest": "sha256:" + "ab" * 32,
        "outcome": "ok",
    },
    "DecisionRecorded": {
        "decision_id": "d1",
        "session_id": "s1",
        "episode_id": "e1",
        "decision": "Hold Meta spend at the cap",
        "relied_on": ["m1"],
        "live_data": ["spend:meta:USD:2026-11", "kpi:roas:2026-11"],
        "spend": {"platform": "meta", "amount": 8000.0, "currency": "USD", "period": "2026-11"},
        "target_change": {"metric": "roas", "value": 3.1},
    },
    "MemoriesAssociated": {
        "association_id": "a1",
        "from_ref": "m1",
        "to_ref": "decision:d1",
        "relation": "supports",
    },
    "AssociationRemoved": {"association_id": "a1", "reason": "linked by mistake"},
    "ProposalDecided": {"memory_id": "m2", "decision": "accepted", "reason": "the new target is right"},
    "ConversationTurn": {
        "conversation_id": "c1",
        "turn_id": "t1",
        "speaker": "Sam",
        "role": "user",
        "text": "keep ROAS above 3",
    },
    "TurnsExtracted": {
        "conversation_id": "c1",
        "through_seq": 1,
        "through_turn_id": "t1",
        "memory_ids": ["m1"],
        "extractor": "patterns",
    },
    "ConversationErased": {"conversation_id": "c1", "reason": "asked to"},
}


@dataclass
class TenantModel:
    """What a tenant's memories should be after a stream: an oracle independent of the projector."""

    memories: set[str] = field(default_factory=set)
    superseded: set[str] = field(default_factory=set)
    invalid: int = 0

    @property
    def active(self) -> int:
        return len(self.memories - self.superseded)


def random_stream(rng: random.Random, tenant: str, n: int) -> tuple[list[dict[str, Any]], TenantModel]:
    """``n`` events for one tenant, mostly valid, a few that the projection must reject."""
    model = TenantModel()
    out: list[dict[str, Any]] = []
    for i in range(n):
        ids = sorted(model.memories)
        roll = rng.random()
        if not ids or roll < 0.35:
            mid = f"{tenant}-m{i}"
            out.append(
                envelope("MemoryRemembered", remembered(mid, importance=rng.randint(1, 5)), tenant=tenant)
            )
            model.memories.add(mid)
        elif roll < 0.6:
            out.append(
                envelope(
                    "MemoryRevised",
                    {
                        "memory_id": rng.choice(ids),
                        "changes": {"label": f"rev {i}", "importance": rng.randint(1, 5)},
                    },
                    tenant=tenant,
                )
            )
        elif roll < 0.7 and len(ids) > 1:
            old, new = rng.sample(ids, 2)
            out.append(envelope("MemorySuperseded", {"memory_id": old, "superseded_by": new}, tenant=tenant))
            model.superseded.add(old)
        elif roll < 0.75 and model.superseded:
            mid = rng.choice(sorted(model.superseded))
            out.append(envelope("MemoryRestored", {"memory_id": mid}, tenant=tenant))
            model.superseded.discard(mid)
        elif roll < 0.85:
            out.append(
                envelope(
                    "KpiObserved",
                    {"metric": "roas", "value": round(rng.uniform(1, 5), 2), "period": "2026-11"},
                    tenant=tenant,
                )
            )
        elif roll < 0.92:
            spend = {
                "platform": "meta",
                "amount": float(rng.randint(0, 50_000)),
                "currency": "USD",
                "period": "2026-11",
            }
            out.append(envelope("SpendObserved", spend, tenant=tenant))
        elif roll < 0.97:
            out.append(
                envelope("ClockTicked", {"now": f"2026-12-{rng.randint(1, 28):02d}T00:00:00Z"}, tenant=tenant)
            )
        else:  # valid on the wire, invalid against the state: must be dead-lettered
            out.append(
                envelope(
                    "MemoryRevised", {"memory_id": "no-such-memory", "changes": {"label": "x"}}, tenant=tenant
                )
            )
            model.invalid += 1
        out[-1]["event_id"] = f"00000000-0000-4000-8000-{rng.getrandbits(48):012x}"
    return out, model


def unchecked_event(
    event_id: str,
    tenant: str,
    occurred_at: datetime,
    actor: Actor,
    source: str,
    event_type: str,
    payload: dict[str, Any],
) -> Event:
    """An event built past the domain checks (as a rogue producer's raw bytes on Kafka would be)."""
    return Event(event_id, tenant, occurred_at, actor, source, payload_class(event_type).from_record(payload))
