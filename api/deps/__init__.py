"""Dependencies shared by the routes, as ``Annotated`` aliases; routes import them from here.

One module per concern: the runtime, tenant and graph (``tenant``), who is asking (``principal``),
the Idempotency-Key (``idempotency``), valid and system time (``time_params``), what a read is
answered from (``reads``: the principal's view of the graph, now or as of a moment, and a memory it
may see), and the refusal of unknown query parameters (``unknown_query``).

A dependency is ``async def`` even when it does not await: FastAPI runs a plain ``def`` one in a worker
thread, a thread hop per dependency per request (measured: ~1 ms of a context's 9 ms).
"""

from __future__ import annotations

from engram.api.deps.idempotency import CANONICAL_UUID, IDEMPOTENCY_NAMESPACE, IdempotencyKey, event_id_for
from engram.api.deps.principal import (
    CurrentPrincipal,
    bearer,
    get_principal,
    get_verifier,
    governs,
    tenant_not_found,
    token_actor,
    unauthorized,
    write_attribution,
)
from engram.api.deps.reads import CurrentView, GraphAsOf, Moment, SearchAsOf, SeenMemory, View, VisibleMemory
from engram.api.deps.tenant import (
    Commands,
    CurrentRuntime,
    MemoryId,
    SearchStore,
    TenantId,
    TenantStore,
    get_commands,
    get_runtime,
    get_search_graph,
    get_tenant_graph,
    not_found,
)
from engram.api.deps.time_params import AsOfParam, ValidAt, get_as_of, get_valid_at, past_stores
from engram.api.deps.unknown_query import known_query_only

__all__ = [
    "CANONICAL_UUID",
    "IDEMPOTENCY_NAMESPACE",
    "AsOfParam",
    "Commands",
    "CurrentPrincipal",
    "CurrentRuntime",
    "CurrentView",
    "GraphAsOf",
    "IdempotencyKey",
    "MemoryId",
    "Moment",
    "SearchAsOf",
    "SearchStore",
    "SeenMemory",
    "TenantId",
    "TenantStore",
    "ValidAt",
    "View",
    "VisibleMemory",
    "bearer",
    "event_id_for",
    "get_as_of",
    "get_commands",
    "get_principal",
    "get_runtime",
    "get_search_graph",
    "get_tenant_graph",
    "get_valid_at",
    "get_verifier",
    "governs",
    "known_query_only",
    "not_found",
    "past_stores",
    "tenant_not_found",
    "token_actor",
    "unauthorized",
    "write_attribution",
]
