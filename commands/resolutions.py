"""Resolve, applied: the supersessions a policy chose (``projections.resolve``), appended as
``MemorySuperseded`` events through the same path as every other write (``commands.writes``).

All of them are decided before any is appended, so a resolution the actor may not make in part
(a user resolving a set that holds a company memory) is refused whole, with the reason of the
first refusal, and changes nothing. Each event id is derived from the request's (its
Idempotency-Key) and the memory it supersedes, so a retried resolve is answered as it was, not
appended again.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Sequence

from engram.commands.answers import Accepted, Attribution, refused
from engram.commands.writes import Commands
from engram.projections.resolve import Loser
from engram.projections.tenant_graph import AlreadyApplied
from engram.projections.validation import PLAN_ERRORS
from engram.schemas.events import Event


def _event_id(by: Attribution, loser: Loser) -> str:
    if by.event_id is None:
        return str(uuid.uuid4())
    return str(uuid.uuid5(uuid.UUID(str(by.event_id)), f"supersede {loser.memory_id}"))


async def supersede_losers(
    commands: Commands, tenant: str, losers: Sequence[Loser], by: Attribution, *, wait: bool = False
) -> list[Accepted]:
    """Append one MemorySuperseded per loser (by its winner), once every one of them is allowed."""
    drafts: list[Event] = []
    for loser in losers:
        each = dataclasses.replace(by, event_id=_event_id(by, loser))
        payload = {"memory_id": loser.memory_id, "superseded_by": loser.superseded_by}
        drafts.append(commands.drafted(each.envelope("MemorySuperseded", tenant, payload)))
    for item in drafts:
        try:
            await commands.decide(item, by.teams)
        except AlreadyApplied:
            continue  # a retry: append answers it as it was
        except PLAN_ERRORS as exc:
            raise refused(exc) from exc
    return [await commands.append(item, wait=wait, teams=by.teams) for item in drafts]
