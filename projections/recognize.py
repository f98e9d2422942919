"""Recognize: is this label (entity, belief) already known? Asked by an agent before it writes.

Three tiers, strongest first, each a different kind of evidence, so an agent can decide what to do
with each (revise an exact match, resolve a structural one, merely cite a similar one):

* ``exact``: a stored label equal to the asked one once case and white space are normalised;
* ``structural``: an active memory with the rules' own conflict key (``rules/conflicts.dlog``:
  class and label, or class and metric/platform for targets and budgets) in the same scope and for
  the same stakeholders, derived for the asked memory over a scratch store
  (``projections.conflicts.rivals``): the memories a write of it would conflict with;
* ``similar``: the nearest memories by cosine similarity of the text (the recall vector index,
  with exact cosines for the BM25 candidates it missed), above a floor.

A memory appears once, under its strongest reason. Only memories the principal may see are ever
considered, so a label only a hidden memory carries is answered exactly as an unknown one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from engram.projections.conflicts import rivals
from engram.projections.indexes import TenantIndexes
from engram.projections.knowledge import Knowledge
from engram.projections.recall import RecallQuery, eligible
from engram.projections.tenant_graph import TenantGraph
from engram.projections.terms import ASSERTED, INFERRED, e, memory_iri
from engram.projections.vector_index import QueryVector, resolve
from engram.projections.visibility import Principal, memory_facts
from engram.schemas import vocabulary as v
from engram.schemas.events import Event, event_from_json
from pyoxigraph import Literal, Quad

EXACT, STRUCTURAL, SIMILAR = "exact", "structural", "similar"
SIMILAR_FLOOR = 0.5  # cosine: MiniLM paraphrases sit above it, unrelated sentences well below
POOL = 50  # nearest neighbours looked at (at least 5 x the limit)
_TRUE = Literal(True)  # how a forget marks a memory (rules/active.dlog)


@dataclass(frozen=True)
class Recognition:
    """What is asked about: a memory as it would be written (its label, and what decides its key)."""

    label: str
    content: str | None = None
    memory_class: str | None = None  # a class name or IRI; needed for the structural tier
    scope: str | None = None  # None: every scope the principal has (company, its user, its teams)
    properties: Mapping[str, Any] = field(default_factory=dict)  # a target's metric, a budget's platform
    limit: int = 10
    include_inactive: bool = False  # exact matches among superseded memories too
    min_score: float = SIMILAR_FLOOR


@dataclass(frozen=True)
class Match:
    id: str
    reason: str  # exact | structural | similar
    label: str
    memory_class: str
    kind: str
    scope: str
    active: bool
    score: float | None = None  # the cosine similarity, for ``similar``
    key: str | None = None  # the conflict key shared, for ``structural``


def normalised(label: str) -> str:
    """A label as the exact tier compares it: case folded, runs of white space made one space."""
    return " ".join(label.split()).casefold()


def recognize(
    graph: TenantGraph,
    indexes: TenantIndexes | None,
    knowledge: Knowledge,
    asked: Recognition,
    who: Principal,
    query_vector: QueryVector,
    tenant: str,
) -> list[Match]:
    """The known memories ``asked`` names, strongest reason first, at most ``asked.limit``.

    Raises ``InvalidEvent`` (schemas.checks) if the asked memory could not be written at all (its
    structural key is derived from the event a write of it would append)."""
    found: dict[str, Match] = {}
    for match in exact(graph, asked, who):
        found.setdefault(match.id, match)
    if asked.memory_class is not None:
        for match in structural(graph, knowledge, asked, who, tenant):
            found.setdefault(match.id, match)
    if indexes is not None:
        for match in similar(indexes, asked, who, query_vector):
            found.setdefault(match.id, match)
    return list(found.values())[: asked.limit]


def _match(graph: TenantGraph, memory_id: str, reason: str, **extra: Any) -> Match | None:
    facts = memory_facts(graph, memory_id)
    if facts is None:
        return None
    return Match(
        memory_id, reason, facts.label, facts.memory_class, facts.kind, facts.scope, facts.active, **extra
    )


def exact(graph: TenantGraph, asked: Recognition, who: Principal) -> list[Match]:
    """Memories whose label equals the asked one, normalised; active ones first, then by id.

    A scan of the tenant's labels (the graph indexes literals exactly, not case-folded): ~1 µs a
    memory, so ~0.1 s at 100,000; a case-folded label index would make it a lookup."""
    want = normalised(asked.label)
    out = []
    for q in graph.store.quads_for_pattern(None, e("label"), None, ASSERTED):
        if normalised(q.object.value) != want:
            continue
        memory_id = q.subject.value.rsplit(":", 1)[-1]
        facts = memory_facts(graph, memory_id, lean=True)
        if facts is None or not facts.visible_to(who):
            continue
        if Quad(q.subject, e("forgotten"), _TRUE, ASSERTED) in graph.store:
            continue  # an erased memory's label is a placeholder, not something known
        if facts.active or asked.include_inactive:
            found = _match(graph, memory_id, EXACT)
            if found is not None:
                out.append(found)
    return sorted(out, key=lambda m: (not m.active, m.id))


def _scopes(asked: Recognition, who: Principal) -> list[tuple[str, dict[str, Any]]]:
    """The scopes (with stakeholders) a write of the asked memory could have for ``who``."""
    out: list[tuple[str, dict[str, Any]]] = []
    if asked.scope in (None, v.Scope.COMPANY):
        out.append((v.Scope.COMPANY.value, {}))
    if asked.scope in (None, v.Scope.TEAM) and who.teams:
        out.append((v.Scope.TEAM.value, {"team_ids": sorted(who.teams)}))
    if asked.scope in (None, v.Scope.USER) and who.user:
        out.append((v.Scope.USER.value, {"user_id": who.user}))
    return out


def as_written(asked: Recognition, tenant: str, scope: str, holders: Mapping[str, Any]) -> Event:
    """The MemoryRemembered a write of the asked memory would append (never appended): what the
    rules derive its conflict key from."""
    return event_from_json(
        {
            "type": "MemoryRemembered",
            "tenant": tenant,
            "source": v.Source.AGENT.value,
            "actor": {"id": "recognize", "role": v.Role.OPERATOR.value},
            "event_id": "00000000-0000-4000-8000-000000000000",
            "payload": {
                "memory_id": "recognize-probe",
                "label": asked.label,
                "content": asked.content or asked.label,
                "kind": v.Kind.FACT.value,
                "scope": scope,
                "stakeholders": dict(holders),
                "importance": 3,
                "memory_class": asked.memory_class,
                "properties": dict(asked.properties),
            },
        }
    )


def structural(
    graph: TenantGraph, knowledge: Knowledge, asked: Recognition, who: Principal, tenant: str
) -> list[Match]:
    """Active memories a write of the asked one would structurally conflict with, by scope."""
    out: list[Match] = []
    for scope, holders in _scopes(asked, who):
        event = as_written(asked, tenant, scope, holders)
        for rival in rivals(knowledge, graph, event):
            facts = memory_facts(graph, rival.id, lean=True)
            if facts is None or not facts.visible_to(who):
                continue
            keys = sorted(
                q.object.value
                for q in graph.store.quads_for_pattern(memory_iri(rival.id), e("conflictKey"), None, INFERRED)
            )
            found = _match(graph, rival.id, STRUCTURAL, key=keys[0] if keys else None)
            if found is not None:
                out.append(found)
    return sorted(out, key=lambda m: m.id)


def similar(
    indexes: TenantIndexes, asked: Recognition, who: Principal, query_vector: QueryVector
) -> list[Match]:
    """Active, visible memories whose text is at least ``min_score`` similar (cosine), best first."""
    text = asked.label if not asked.content else f"{asked.label}\n{asked.content}"
    pool = max(POOL, 5 * asked.limit)
    bm25 = [mid for mid, _ in indexes.text.search(text, pool)]
    vector = resolve(query_vector)
    if vector is None:
        return []  # no embedder: similarity is the vector index's, and there is none
    cosines = dict(indexes.vectors.search(vector, pool))
    cosines.update(indexes.vectors.similarities(vector, [m for m in bm25 if m not in cosines]))
    query = RecallQuery(q=text, min_importance=1)
    scored = [
        (round(cosines[m.id], 4), m)
        for m in indexes.candidates(sorted(cosines))
        if cosines[m.id] >= asked.min_score and eligible(m, query, who)
    ]
    scored.sort(key=lambda pair: (-pair[0], pair[1].id))
    out = []
    for score, lean in scored[: asked.limit]:
        found = _match(indexes.graph, lean.id, SIMILAR, score=score)
        if found is not None:
            out.append(found)
    return out
