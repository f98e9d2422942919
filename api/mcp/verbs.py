"""The tools: one entry per verb, naming the route it calls. Adding a verb is one entry here.

A tool's input schema is not written here: it is the route's own (path and query parameters and
the body model, read from the API's OpenAPI document, ``engram.api.mcp.schemas``), or, with
``schema_from``, the ``input_schema`` a route answers (``remember``: the ontology's memory tool).
A verb whose route the server does not serve is left out of ``tools/list``, so an entry may be
added before its route lands.
"""

from __future__ import annotations

from dataclasses import dataclass

# Attribution is the MCP layer's and the token's, not the model's to choose: ``source`` is
# ``agent``, the actor is the bearer token's, the event id is minted.
HIDDEN = frozenset({"tenant", "source", "actor", "event_id", "wait"})
SOURCE = "agent"


@dataclass(frozen=True)
class Verb:
    name: str
    description: str
    method: str  # GET, POST, PATCH, DELETE
    path: str  # under /v1/tenants/{tenant}; {name} segments are arguments
    schema_from: str | None = None  # a GET route (same prefix) answering {"input_schema": …}


VERBS: tuple[Verb, ...] = (
    Verb(
        "remember",
        "Remember a belief worth keeping beyond this conversation, as a typed memory under the "
        "ontology: choose the most specific memory_class and give the properties it requires. "
        "Answers where the log recorded it once the graph has applied it; a write the caller may "
        "not make is refused with the rule.",
        "POST",
        "/memories",
        schema_from="/memory-tool",
    ),
    Verb(
        "recall",
        "Search the memories the caller may see (BM25 and vector similarity fused, with recency "
        "and forgetting), best first, each with its statuses and score.",
        "POST",
        "/recall",
    ),
    Verb(
        "get_context",
        "What to pre-load each turn: every top-tier memory the caller may see, grouped in blocks "
        "with statuses and conflicts, the live KPIs and spend, and a markdown rendering (text).",
        "GET",
        "/context",
    ),
    Verb(
        "get_memory",
        "One memory by id: its fields, validity, supersession links, lineage, derived statuses "
        "and every inferred fact with the rule that derived it.",
        "GET",
        "/memories/{memory_id}",
    ),
    Verb(
        "list_memories",
        "The memories the caller may see, filtered by kind, scope, class, active or valid time; "
        "a page (limit, offset) and the count.",
        "GET",
        "/memories",
    ),
    Verb(
        "lineage",
        "Where a belief came from: source, actor, purpose, valid and system time, the "
        "supersession chains and every event that touched it.",
        "GET",
        "/memories/{memory_id}/lineage",
    ),
    Verb(
        "supersede",
        "Replace a memory by another (existing) one: memory_id is superseded by superseded_by.",
        "POST",
        "/memories/{memory_id}/supersede",
    ),
    Verb(
        "forget",
        "Forget a memory (operators and auditors): its content is erased, its node and lineage "
        "stay with who forgot it and why.",
        "POST",
        "/memories/{memory_id}/forget",
    ),
)

# ---------------------------------------------------------------------------------------------
# PENDING: the verbs of issue 24 item 1-3 whose routes are being built in parallel. Each is served
# as soon as the server has its route (its schema is the route's), so these entries need checking,
# not writing, when the routes land: the paths are the ones on branches s24-verbs and s24-agent (each
# builds a tool from its route there); the descriptions are the brief's, to be checked against the code.
# ---------------------------------------------------------------------------------------------
PENDING: tuple[Verb, ...] = (
    Verb(
        "recognize",
        "Is this entity or label already known? Exact, structural-key and similar matches with "
        "the reason each matched; call it before writing.",
        "POST",
        "/recognize",
    ),
    Verb(
        "justify",
        "One memory's provenance: source, actor, purpose, every event that touched it, the "
        "supersession chain and the rule derivation of its statuses.",
        "GET",
        "/memories/{memory_id}/justify",
    ),
    Verb("associate", "A typed, directed link between two memories.", "POST", "/associations"),
    Verb(
        "resolve",
        "Resolve conflicting memories by a declared policy (a dry run unless apply is true).",
        "POST",
        "/conflicts/resolve",
    ),
    Verb("summarise", "A deterministic, extractive summary of a session or a topic.", "GET", "/summary"),
    Verb(
        "episodes_in",
        "A session's narrative: its episodes, tool calls and decisions in order.",
        "GET",
        "/sessions/{session_id}/episodes",
    ),
    Verb(
        "check_plan",
        "Check a proposed action against the active constraints: every one it would breach or "
        "bring near its limit, with the rule's explanation.",
        "POST",
        "/plans/check",
    ),
    Verb(
        "record_decision",
        "Record a decision, citing the memories and live data it relied on.",
        "POST",
        "/decisions",
    ),
)

TOOLS: tuple[Verb, ...] = VERBS + PENDING
