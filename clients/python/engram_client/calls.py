"""Every verb as a :class:`Call`: the request it makes and how its answer is read, for one
tenant's routes (:class:`Calls`, the memory calls and the agent verbs together). The sync and async
clients and the framework adapters build their requests here, so they cannot drift apart.
"""

from __future__ import annotations

from engram_client.agent_calls import VerbCalls, digest
from engram_client.call import (
    RETRY_ERRORS,
    RETRY_STATUSES,
    Call,
    Fusion,
    Kind,
    OnConflict,
    Outcome,
    Policy,
    Relation,
    Retry,
    Scope,
    Source,
    retry_after,
    tenant_of,
)
from engram_client.memory_calls import MemoryCalls

__all__ = [
    "RETRY_ERRORS", "RETRY_STATUSES", "Call", "Calls", "Fusion", "Kind", "OnConflict", "Outcome",
    "Policy", "Relation", "Retry", "Scope", "Source", "digest", "retry_after", "tenant_of",
]  # fmt: skip


class Calls(MemoryCalls, VerbCalls):
    """The calls of one tenant's routes. Writes are attributed with ``source`` (the token decides
    the actor) and mint an idempotency key unless given one."""
