"""The tools: one entry per verb, naming the route it calls. Adding a verb is one entry here.

A tool's input schema is not written here: it is the route's own (path and query parameters and
the body model, read from the API's OpenAPI document, ``engram.api.mcp.schemas``), or, with
``schema_from``, the ``input_schema`` a route answers (``remember``: the ontology's memory tool).
A verb whose route the server does not serve is left out of ``tools/list`` (an older server), so an
entry may be added before its route lands.
"""

from __future__ import annotations

from dataclasses import dataclass

# Attribution is the MCP layer's and the token's, not the model's to choose: ``source`` is
# ``agent``, the actor is the bearer token's, the event id is minted. ``wait`` stays an argument
# of every write tool (default false: answered once the log has the write, the session's next
# get_context reading after it); ``after`` one of get_context (default: the session's last write).
HIDDEN = frozenset({"tenant", "source", "actor", "event_id"})
WAIT = (
    "Answer only once the graph has applied the write (slower). By default the write is answered "
    "once the log has recorded it (applied: false, with its partition and offset), and this "
    "session's next get_context reads after it."
)
AFTER = (
    "A write's partition:offset: answer once the graph has it. By default, the last write this "
    "MCP session made."
)
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
        "Answers where the log recorded it (its id, partition and offset; wait: true answers once "
        "the graph has applied it); a write the caller may not make is refused with the rule.",
        "POST",
        "/memories",
        schema_from="/memory-tool",
    ),
    Verb(
        "remember_many",
        "Remember several beliefs at once (up to 1,000), each item what remember takes (label, "
        "content, kind, importance, memory_class and its properties). Each item is answered in "
        "order with its own outcome (accepted with its id, or refused with the reason), so one "
        "bad item does not stop the others.",
        "POST",
        "/memories:batch",
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
    Verb(
        "recognize",
        "Is this already known? Call it before remembering something new. Give the label (and the "
        "memory_class, scope and properties it would be written with): answers known and the "
        "matches strongest first, each with its reason: exact (the same label), structural (the "
        "rules' conflict key: class and label, metric or platform, same scope), similar (cosine).",
        "POST",
        "/recognize",
    ),
    Verb(
        "justify",
        "Why a memory is believed, in one answer: source, actor, purpose, valid and system time, "
        "every event that touched it, the supersession chain, its statuses and every derived fact "
        "with its rule derivation tree. status keeps one derived fact (e.g. budgetStatus); as_of "
        "answers as the system knew it then.",
        "GET",
        "/memories/{memory_id}/justify",
    ),
    Verb(
        "list_proposals",
        "The pending proposals the caller may see: memories extracted from conversations that would "
        "replace or contradict one a person entered, so they wait, inactive, for a person's answer. "
        "Each with the memory it would replace and why. Ask the user; do not decide for them.",
        "GET",
        "/proposals",
    ),
    Verb(
        "decide_proposal",
        "Relay the user's answer to a pending proposal (memory_id): accept (it becomes active and "
        "supersedes the memory it would replace) or reject (it stays inactive), with the user's "
        "reason. Only on the user's explicit word: the decision is recorded as yours, for them.",
        "POST",
        "/proposals/{memory_id}/{decision}",
    ),
    Verb(
        "associate",
        "Link two things with a typed, directed relation (relates_to, supports, contradicts, "
        "refines, depends_on, caused_by, part_of). from and to are each a memory id, "
        "episode:{id} or decision:{id}; a memory that supports a decision counts as one it relied on.",
        "POST",
        "/associations",
    ),
    Verb(
        "remove_association",
        "Undo an association you made (association_id, the id associate answered): the link and what "
        "it implied (a memory that supported a decision no longer counts as one it relied on) go.",
        "POST",
        "/associations/{association_id}/remove",
    ),
    Verb(
        "resolve",
        "Settle the memories the rules flag as conflicting by a policy (prefer_newer, "
        "prefer_higher_confidence, prefer_more_specific_scope, prefer_human): one of each set stays, "
        "the others are superseded by it. A dry run (nothing written) unless apply is true; "
        "memory_ids keeps the sets holding one of them.",
        "POST",
        "/conflicts/resolve",
    ),
    Verb(
        "summarise",
        "A deterministic, extractive summary (no model) of the active memories about a topic, or of "
        "all of them, or of a session's (those its decisions relied on and those associated with its "
        "work): counts by kind, class, scope and importance, statuses, conflicts, the most important "
        "in their own words, and the same as markdown (text); as_of: as the system knew them then.",
        "GET",
        "/summary",
    ),
    Verb(
        "check_plan",
        "Before acting: check a proposed action against the stored constraints. Give exactly one of "
        "spend {platform, amount, currency, period} or target_change {metric, value}; answers ok "
        "(no breach) and every active constraint it would breach or bring near its limit, with the "
        "rule's explanation. Nothing is written.",
        "POST",
        "/plans/check",
    ),
    Verb(
        "record_decision",
        "Record a decision: what was decided, the memories (relied_on) and live data (live_data: "
        "spend:{platform}:{currency}:{period}, kpi:{metric}:{period}) it relied on, and the action "
        "(spend or target_change), which the rules check: one that breaches an active constraint is "
        "flagged breached_constraint.",
        "POST",
        "/decisions",
    ),
    Verb(
        "justify_decision",
        "Why a decision was taken, in one answer: who recorded it and for whom, its session and "
        "episode, the memories (cited or supporting) and live data it relied on, every event that "
        "touched it, and its statuses (breached_constraint, …) each with its rule derivation tree. "
        "as_of answers as the system knew it then.",
        "GET",
        "/decisions/{decision_id}/justify",
    ),
    Verb(
        "decisions_relying_on",
        "Which decisions relied on this memory (cited in relied_on, or associated as supports), "
        "in log order; without relied_on, every decision the caller may see (limit, offset).",
        "GET",
        "/decisions",
    ),
    Verb(
        "start_session",
        "Start an agent session (its goal, optional): answers its id, to name in the session's "
        "episodes, tool calls and decisions.",
        "POST",
        "/sessions",
    ),
    Verb(
        "end_session",
        "End a session, with its outcome; it takes nothing more afterwards.",
        "POST",
        "/sessions/{session_id}/end",
    ),
    Verb(
        "record_episode",
        "Record one step of a session's narrative: a summary of what happened.",
        "POST",
        "/sessions/{session_id}/episodes",
    ),
    Verb(
        "record_tool_call",
        "Record a tool call in a session: the tool, a digest of its arguments (sha256: and 64 hex "
        "digits; never the arguments) and its outcome (ok, error, refused, timeout).",
        "POST",
        "/sessions/{session_id}/tool-calls",
    ),
    Verb(
        "episodes_in",
        "A session's narrative: the session (goal, end, outcome) and its episodes, tool calls and "
        "decisions in log order.",
        "GET",
        "/sessions/{session_id}/episodes",
    ),
)

TOOLS: tuple[Verb, ...] = VERBS
