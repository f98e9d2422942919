"""Summarise: a deterministic, extractive summary of a set of memories — no model.

What an agent (or a person) needs to orient in a topic or a session: how many memories, of which
kinds, classes and scopes, how the rules judge them (statuses, conflicts), and the most important
ones in their own words. The summary is a pure function of the graph and a set of memory ids, so
whatever chooses the set (a topic here; a session's memories, ``agents.session_memories``) plugs in, and
the same graph and set always give the same answer, byte for byte: every count is sorted by name,
every list by a total order, and nothing depends on the clock or on the order the ids came in.

A topic chooses the active memories it is about: those sharing a word with it (BM25, the recall
text index) or whose text is at least ``TOPIC_FLOOR`` similar to it (cosine, the vector index).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from engram.projections.indexes import TenantIndexes
from engram.projections.read import list_memory_ids, memory_statuses
from engram.projections.recall import RecallQuery, eligible
from engram.projections.resolve import conflict_sets
from engram.projections.tenant_graph import TenantGraph
from engram.projections.terms import time_order
from engram.projections.vector_index import QueryVector, resolve
from engram.projections.visibility import MemoryFacts, Principal, memory_facts, sight

TOPIC_FLOOR = 0.5  # the cosine recognize's ``similar`` tier uses too
TOPIC_POOL = 500  # memories a topic can select at most
EXCERPT = 280  # characters of a memory's content an item shows


def about(indexes: TenantIndexes, topic: str, who: Principal, query_vector: QueryVector) -> list[str]:
    """The active memories ``who`` may see that ``topic`` is about, sorted by id."""
    chosen = {mid for mid, _ in indexes.text.search(topic, TOPIC_POOL)}
    vector = resolve(query_vector)
    if vector is not None:
        chosen |= {mid for mid, cos in indexes.vectors.search(vector, TOPIC_POOL) if cos >= TOPIC_FLOOR}
    query = RecallQuery(q=topic, min_importance=1)
    return sorted(m.id for m in indexes.candidates(sorted(chosen)) if eligible(m, query, who))


def all_active(graph: TenantGraph) -> list[str]:
    """Every active memory of the tenant (``summarise`` keeps those its reader may see)."""
    return sorted(list_memory_ids(graph, active=True))


def ranked(facts: Iterable[MemoryFacts]) -> list[MemoryFacts]:
    """Most important first: active, importance, confidence, newest valid time, then id (a total
    order, by stable sorts from the last key to the first)."""
    out = sorted(facts, key=lambda m: m.id)
    out.sort(key=lambda m: time_order(m.valid_from), reverse=True)
    out.sort(key=lambda m: (not m.active, -m.importance, -m.confidence))
    return out


def _excerpt(text: str) -> str:
    return text if len(text) <= EXCERPT else text[: EXCERPT - 1].rstrip() + "…"


def summarise(
    graph: TenantGraph, memory_ids: Iterable[str], who: Principal, *, top: int = 10, title: str | None = None
) -> dict[str, Any]:
    """The summary of the memories among ``memory_ids`` that ``who`` may see (others are left out
    as if they did not exist, counts included)."""
    facts = []
    for memory_id in sorted(set(memory_ids)):
        found = memory_facts(graph, memory_id)
        if found is not None and found.visible_to(who):
            facts.append(found)
    ids = {m.id for m in facts}
    statuses = {m.id: memory_statuses(graph, m.id) for m in facts}
    judged: dict[str, Counter[str]] = {}
    for found in statuses.values():
        for name, value in found.items():
            if isinstance(value, str):
                judged.setdefault(name, Counter())[value] += 1
    sets = [s for s in conflict_sets(graph, sight(graph, who)) if set(s) & ids]
    items = [
        {
            "id": m.id,
            "label": m.label,
            "content": _excerpt(m.content),
            "kind": m.kind,
            "memory_class": m.memory_class,
            "scope": m.scope,
            "importance": m.importance,
            "confidence": m.confidence,
            "active": m.active,
            "valid_from": m.valid_from,
            "statuses": statuses[m.id],
        }
        for m in ranked(facts)[:top]
    ]
    answer: dict[str, Any] = {
        "count": len(facts),
        "active": sum(m.active for m in facts),
        "by_kind": _counts(m.kind for m in facts),
        "by_class": _counts(m.memory_class for m in facts),
        "by_scope": _counts(m.scope for m in facts),
        "by_importance": _counts(str(m.importance) for m in facts),
        "statuses": {name: dict(sorted(c.items())) for name, c in sorted(judged.items())},
        "conflicts": [[i for i in s if i in ids] for s in sets],
        "top": items,
    }
    answer["text"] = render(answer, title)
    return answer


def empty(title: str | None) -> dict[str, Any]:
    """The summary of no memories (a tenant with no events yet)."""
    answer: dict[str, Any] = {
        "count": 0,
        "active": 0,
        "by_kind": {},
        "by_class": {},
        "by_scope": {},
        "by_importance": {},
        "statuses": {},
        "conflicts": [],
        "top": [],
    }
    answer["text"] = render(answer, title)
    return answer


def _counts(values: Iterable[str]) -> dict[str, int]:
    return dict(sorted(Counter(values).items()))


def render(summary: dict[str, Any], title: str | None) -> str:
    """The summary as markdown, for a prompt: the counts in one line each, then the top items."""

    def listed(counts: dict[str, Any]) -> str:
        return ", ".join(f"{n} {name}" for name, n in counts.items()) or "none"

    lines = [
        f"# Summary{': ' + title if title else ''}",
        f"{summary['count']} memories ({summary['active']} active): {listed(summary['by_kind'])}",
        f"Classes: {listed(summary['by_class'])}",
    ]
    for name, counts in summary["statuses"].items():
        lines.append(f"{name}: {listed(counts)}")
    if summary["conflicts"]:
        lines.append(f"Conflicts: {'; '.join(' vs '.join(s) for s in summary['conflicts'])}")
    if summary["top"]:
        lines.append("## Most important")
    for item in summary["top"]:
        shown = ", ".join(f"{k} {v}" for k, v in sorted(item["statuses"].items()))
        status = f" [{shown}]" if shown else ""
        lines.append(f"- [{item['id']}] {item['label']}: {item['content']}{status}")
    return "\n".join(lines) + "\n"
