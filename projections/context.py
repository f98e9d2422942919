"""The context an agent pre-loads each turn: every top-tier memory it may see, whatever it asks.

Company memories come from the rule-derived live-context bundle (so the cap and the expiry rules
decide), the principal's user and team memories from the graph. They are grouped in blocks (the
kinds, then one block per memory subclass), ordered inside a block by similarity to the turn's
query, with more specific scopes winning conflicts (user > team > company), and rendered as
markdown ready to paste into a prompt. Nothing here is cached: it is read fresh on every call.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from engram.projections.index_source import memory_id_of
from engram.projections.indexes import TenantIndexes
from engram.projections.ontology import Ontology, StatusField, StatusGroup
from engram.projections.tenant_graph import TenantGraph
from engram.projections.terms import ASSERTED, CLOCK, COMPANY, INFERRED, RDF_TYPE, e, memory_iri
from engram.projections.vector_index import QueryVector, resolve
from engram.projections.visibility import (
    MemoryFacts,
    Principal,
    held_at,
    inferred_by_name,
    local_name,
    memory_facts,
    with_display,
)
from engram.schemas import vocabulary as v
from pyoxigraph import Literal, NamedNode

TOP_TIER = v.Importance.HIGH
KIND_BLOCKS = {"objective": "Objectives", "preference": "Preferences", "fact": "Facts", "context": "Context"}
SCOPE_ORDER = {"user": 0, "team": 1, "company": 2}  # more specific first
ACCIDENTAL_WINDOW_S = 600.0  # two people contradicting each other within ten minutes
RDFS_LABEL = "http://www.w3.org/2000/01/rdf-schema#label"


@dataclass(frozen=True)
class ContextOptions:
    confidence_floor: float
    count_tokens: Callable[[str], int]
    valid_at: datetime | None = None  # valid time: the memories that held then, not the live bundle


_LABELS: dict[str, dict[str, str]] = {}


def _labels(ontology: Ontology) -> dict[str, str]:
    """Every ``rdfs:label`` of the ontology, read once per ontology rather than once per item."""
    found = _LABELS.get(ontology.digest)
    if found is None:
        found = _LABELS[ontology.digest] = {
            t.subject.value: t.object.value for t in ontology.triples if t.predicate.value == RDFS_LABEL
        }
    return found


def block_title(memory_class: str, ontology: Ontology) -> str:
    """A subclass's block: its ``rdfs:label``, else its name in words (``BudgetConstraintMemory`` →
    ``Budget constraints``)."""
    label = _labels(ontology).get(v.class_iri(memory_class))
    if label is not None:
        return label
    words = re.sub(
        r"(?<=[a-z0-9])(?=[A-Z])", " ", memory_class.rsplit("#", 1)[-1].removesuffix("Memory")
    ).split()
    if not words:
        return memory_class
    return " ".join([words[0], *(w.lower() for w in words[1:])]) + "s"


def _number(term: Any) -> int | float | str:
    if isinstance(term, Literal):
        try:
            f = float(term.value)
        except ValueError:
            return term.value
        return int(f) if f.is_integer() else f
    return str(term.value)


def _asserted(graph: TenantGraph, memory_id: str, iri: str) -> list[Any]:
    return [
        q.object for q in graph.store.quads_for_pattern(memory_iri(memory_id), NamedNode(iri), None, ASSERTED)
    ]


def statuses(graph: TenantGraph, m: MemoryFacts, derived: dict[str, list[Any]]) -> dict[str, Any]:
    """The memory's status blocks as the ontology groups them (``:statusGroup``): each derived
    status beside the asserted properties that explain it, e.g. target: status, metric, goal."""
    out: dict[str, Any] = {}
    for group in graph.knowledge.ontology.status_groups:
        if _value(graph, m, derived, group.status) is None:  # a group is shown when its status is known
            continue
        out[group.name] = {f.field: _value(graph, m, derived, f) for f in group.fields}
    return out


def _value(graph: TenantGraph, m: MemoryFacts, derived: dict[str, list[Any]], f: StatusField) -> Any:
    found = derived.get(f.name, []) if f.derived else _asserted(graph, m.id, f.iri)
    if not found:
        return None
    return found[0].value if f.as_text else _number(found[0])


def _top_tier_ids(graph: TenantGraph, indexes: TenantIndexes | None, who: Principal) -> list[str]:
    """Company ones from the live-context bundle; the principal's own and their teams' from the graph
    (through the indexes' list of top-tier holders when the tenant has indexes)."""
    ids = [
        memory_id_of(q.subject)
        for q in graph.store.quads_for_pattern(None, RDF_TYPE, e("LiveContext"), INFERRED)
    ]  # type: ignore[arg-type]
    if indexes is not None:
        return list(dict.fromkeys([*ids, *indexes.top_tier_held(who.user, who.teams)]))
    if who.user is not None:
        ids += [
            memory_id_of(q.subject)  # type: ignore[arg-type]
            for q in graph.store.quads_for_pattern(None, e("stakeholderUser"), Literal(who.user), ASSERTED)
        ]
    for team in sorted(who.teams):
        ids += [
            memory_id_of(q.subject)  # type: ignore[arg-type]
            for q in graph.store.quads_for_pattern(None, e("stakeholderTeam"), Literal(team), ASSERTED)
        ]
    return list(dict.fromkeys(ids))


def _held_top_tier_ids(graph: TenantGraph, when: datetime) -> list[str]:
    """Every top-tier memory that held in the world at ``when`` (valid time). The live-context cap
    is a guardrail on the present bundle (a rule against the clock); at another time the bundle
    holds every top-tier memory that held then."""
    ids = [
        memory_id_of(q.subject)  # type: ignore[arg-type]
        for level in range(TOP_TIER, max(v.Importance) + 1)
        for q in graph.store.quads_for_pattern(None, e("importance"), Literal(level), ASSERTED)
    ]
    return [i for i in ids if held_at(graph, i, when)]


def _seconds_apart(a: str | None, b: str | None) -> float | None:
    if not a or not b:
        return None
    ta = datetime.fromisoformat(a.replace("Z", "+00:00"))
    tb = datetime.fromisoformat(b.replace("Z", "+00:00"))
    return abs((ta - tb).total_seconds())


def _conflicts(
    items: list[dict[str, Any]], keys: dict[str, set[str]], pairs: set[tuple[str, str]]
) -> list[dict[str, Any]]:
    """Pairs of visible memories that conflict: the rules' ``conflictsWith`` (same scope) or the
    same class and key across scopes. The more specific scope wins, then the newer memory."""
    by_id = {it["id"]: it for it in items}
    found: set[tuple[str, str]] = {p for p in pairs if p[0] in by_id and p[1] in by_id}
    holders: dict[str, list[str]] = {}  # key -> the memories that have it: pairs without n² tests
    for memory_id in sorted(by_id):
        for key in keys.get(memory_id, ()):
            holders.setdefault(key, []).append(memory_id)
    for same in holders.values():
        found.update((a, b) for i, a in enumerate(same) for b in same[i + 1 :])
    flags = []
    for a, b in sorted({tuple(sorted(p)) for p in found}):
        ia, ib = by_id[a], by_id[b]
        winner, loser = sorted(
            (ia, ib), key=lambda it: (SCOPE_ORDER.get(it["scope"], 9), _neg_time(it["set_at"]), it["id"])
        )
        apart = _seconds_apart(ia["set_at"], ib["set_at"])
        accidental = (
            apart is not None
            and apart <= ACCIDENTAL_WINDOW_S
            and ia["set_by"]["actor"] != ib["set_by"]["actor"]
        )
        reason = (
            f"{winner['scope']} scope is more specific than {loser['scope']}"
            if winner["scope"] != loser["scope"]
            else "same scope: the newer one wins"
        )
        flags.append(
            {
                "winner": winner["id"],
                "overridden": loser["id"],
                "key": sorted(keys.get(a, set()) & keys.get(b, set())) or None,
                "reason": reason,
                "looks_accidental": accidental,
                "note": (
                    f"looks accidental: written {apart:.0f}s apart by {ia['set_by']['actor']} and "
                    f"{ib['set_by']['actor']}"
                )
                if accidental
                else None,
            }
        )
        loser.setdefault("overridden_by", []).append(winner["id"])
        winner.setdefault("wins_over", []).append(loser["id"])
    return flags


def _neg_time(when: str | None) -> float:
    if not when:
        return 0.0
    return -datetime.fromisoformat(when.replace("Z", "+00:00")).timestamp()


def snapshot(graph: TenantGraph) -> dict[str, Any]:
    """The live business data beside the memories: KPIs, spend and the clock."""

    def node_values(node: Any) -> dict[str, Any]:
        return {
            local_name(q.predicate.value): _number(q.object)
            if local_name(q.predicate.value) in ("value", "amount")
            else q.object.value
            for q in graph.store.quads_for_pattern(node, None, None, ASSERTED)
            if q.predicate != RDF_TYPE
        }

    def current(has: str) -> list[dict[str, Any]]:
        """The current observation of each series (rules/observations.dlog), not the backfills."""
        nodes = (q.object for q in graph.store.quads_for_pattern(COMPANY, e(has), None, ASSERTED))
        return [
            node_values(n)
            for n in nodes
            if next(graph.store.quads_for_pattern(n, RDF_TYPE, e("CurrentObservation"), INFERRED), None)
        ]

    kpis, spend = current("hasKpi"), current("hasSpend")
    now = [q.object.value for q in graph.store.quads_for_pattern(CLOCK, e("now"), None, ASSERTED)]
    return {
        "kpis": sorted(kpis, key=lambda k: str(k.get("metric"))),
        "spend": sorted(spend, key=lambda s: (str(s.get("platform")), str(s.get("series")))),
        "clock": now[0] if now else None,
    }


def build_context(
    graph: TenantGraph,
    indexes: TenantIndexes | None,
    who: Principal,
    query_vector: QueryVector,
    ontology: Ontology,
    options: ContextOptions,
) -> dict[str, Any]:
    items: list[dict[str, Any]] = []
    keys: dict[str, set[str]] = {}
    pairs: set[tuple[str, str]] = set()
    at = options.valid_at
    ids = _top_tier_ids(graph, indexes, who) if at is None else _held_top_tier_ids(graph, at)
    for memory_id in ids:
        lean = (
            indexes.candidate(memory_id) if indexes is not None else memory_facts(graph, memory_id, lean=True)
        )
        if lean is None or (at is None and (not lean.active or lean.expired)) or not lean.visible_to(who):
            continue
        if lean.importance < TOP_TIER or lean.confidence < options.confidence_floor:
            continue
        m = indexes.display(lean) if indexes is not None else with_display(graph, lean)
        derived = indexes.derived(m.id) if indexes is not None else inferred_by_name(graph, m.id)
        if at is None and m.scope == "company" and v.ENGRAM + "LiveContext" not in m.classes:
            continue
        keys[m.id] = {t.value for t in derived.get("conflictKey", [])}
        pairs |= {(m.id, memory_id_of(t)) for t in derived.get("conflictsWith", [])}
        items.append(
            {
                "id": m.id,
                "label": m.label,
                "content": m.content,
                "kind": m.kind,
                "memory_class": m.memory_class,
                "scope": m.scope,
                "owner": m.owner,
                "importance": m.importance,
                "importance_name": v.Importance(m.importance).name.title(),
                "confidence": m.confidence,
                "statuses": statuses(graph, m, derived),
                "set_by": {"source": m.source, "actor": m.actor, "role": m.actor_role},
                "set_at": m.recorded_at,
                "valid_from": m.valid_from,
                "similarity": None,
            }
        )
    conflicts = _conflicts(items, keys, pairs)
    snap = snapshot(graph)
    groups = graph.knowledge.ontology.status_groups
    lines = {it["id"]: _item_line(it, groups) for it in items}  # final: conflicts are marked
    for line in lines.values():  # each line's tokens counted now, while the query is still being embedded
        _line_tokens(options.count_tokens, line)
    vector = resolve(query_vector)  # only the order inside blocks depends on it
    if vector is not None and indexes is not None:  # one batch: a lookup per item costs 50 µs
        found = indexes.vectors.similarities(vector, [it["id"] for it in items])
        for it in items:
            if (similarity := found.get(it["id"])) is not None:
                it["similarity"] = round(similarity, 6)
    blocks = _blocks(items, ontology)
    result = {"blocks": blocks, "conflicts": conflicts, "snapshot": snap, "count": len(items)}
    result["text"] = render(result, groups, lines)
    # WordPiece never joins across white space, so the lines' counts add up to the text's
    result["tokens"] = sum(_line_tokens(options.count_tokens, line) for line in result["text"].splitlines())
    return result


def _blocks(items: Iterable[dict[str, Any]], ontology: Ontology) -> list[dict[str, Any]]:
    grouped: dict[tuple[int, str], list[dict[str, Any]]] = {}
    kinds = list(KIND_BLOCKS)
    for it in items:
        if it["memory_class"] != "Memory":
            key = (len(kinds), block_title(it["memory_class"], ontology))
        else:
            key = (
                kinds.index(it["kind"]) if it["kind"] in kinds else len(kinds),
                KIND_BLOCKS.get(it["kind"], "Other"),
            )
        grouped.setdefault(key, []).append(it)
    out = []
    for (_, title), members in sorted(grouped.items()):
        members.sort(
            key=lambda it: (
                -(it["similarity"] if it["similarity"] is not None else -2.0),
                -it["importance"],
                _neg_time(it["set_at"]),
                it["id"],
            )
        )
        out.append({"title": title, "items": members})
    return out


@functools.lru_cache(maxsize=100_000)
def _line_tokens(count: Callable[[str], int], line: str) -> int:
    """Most lines (one per memory) come back unchanged turn after turn: count each once."""
    return count(line)


def _item_line(it: dict[str, Any], groups: Sequence[StatusGroup]) -> str:
    status = _status_text(it["statuses"], groups)
    owner = "" if it["scope"] == "company" else f" ({it['owner']})"
    flag = f" [overridden by {', '.join(it['overridden_by'])}]" if it.get("overridden_by") else ""
    return (
        f"- **{it['label']}**{owner} [{it['importance_name']}, id {it['id']}]{status}{flag}: "
        f"{it['content']} — set by {it['set_by']['actor']} ({it['set_by']['source']}) at {it['set_at']}"
    )


def render(
    ctx: dict[str, Any], groups: Sequence[StatusGroup], item_lines: dict[str, str] | None = None
) -> str:
    """The bundle as markdown: what goes into the prompt (with the items' lines when made already)."""
    made = item_lines or {}
    lines = ["# Memory context", ""]
    for block in ctx["blocks"]:
        lines.append(f"## {block['title']}")
        lines += [made.get(it["id"]) or _item_line(it, groups) for it in block["items"]]
        lines.append("")
    if ctx["conflicts"]:
        lines.append("## Conflicts")
        for c in ctx["conflicts"]:
            note = f"; {c['note']}" if c["note"] else ""
            lines.append(f"- {c['winner']} wins over {c['overridden']}: {c['reason']}{note}")
        lines.append("")
    snap = ctx["snapshot"]
    if snap["kpis"] or snap["spend"] or snap["clock"]:
        lines.append("## Live data")
        for k in snap["kpis"]:
            lines.append(f"- KPI {k.get('metric')}: {k.get('value')} ({k.get('period')})")
        for s in snap["spend"]:
            lines.append(
                f"- Spend {s.get('platform')}: {s.get('amount')} {s.get('currency')} ({s.get('period')})"
            )
        if snap["clock"]:
            lines.append(f"- Now: {snap['clock']}")
    return "\n".join(lines).rstrip() + "\n"


def _status_text(st: dict[str, Any], groups: Sequence[StatusGroup]) -> str:
    """Each status block in words, by its group's ``:statusText`` (an absent value is left blank)."""
    parts = []
    for group in groups:
        if group.name in st:
            values = {k: "" if value is None else value for k, value in st[group.name].items()}
            parts.append((group.sentence or f"{group.name} {{status}}").format(**values))
    return f" ({'; '.join(parts)})" if parts else ""
