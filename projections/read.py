"""Read models over a tenant's graph: memories as plain dicts for the API.

Queries are fixed text; caller values only reach them as pyoxigraph terms (``substitutions``).
A memory's links to others (``superseded_by``, ``supersedes``, the lineage chains) name only the
memories the ``sees`` filter lets through (``projections.visibility.sight``): the API passes the
principal's, so a visible memory never names one its reader may not see.
"""

from __future__ import annotations

import math
from typing import Any

from engram.projections.explain import show
from engram.projections.listing import listed_id
from engram.projections.plan import GraphState
from engram.projections.tenant_graph import TenantGraph
from engram.projections.terms import ASSERTED, INFERRED, META, RDF_TYPE, e, memory_iri
from engram.projections.visibility import MemoryFilter, Principal, everything, may_see
from engram.schemas import sealing
from engram.schemas import vocabulary as v
from pyoxigraph import Literal, NamedNode, Variable

PREFIXES = {"e": v.ENGRAM}


def list_memory_ids(
    graph: TenantGraph,
    *,
    kind: str | None = None,
    scope: str | None = None,
    memory_class: str | None = None,
    active: bool | None = None,
    min_importance: int | None = None,
    seen_by: Principal | None = None,
) -> list[str]:
    """Ids of the memories matching every given filter, newest first; with ``seen_by``, only those
    it may see (``may_see``). Read from the graph's listing (``projections.listing``), which holds
    the order and the asserted facts filtered on; classes and activity, which the rules decide too,
    are read as the sets of memories that have them."""
    sight = seen_by is not None and not seen_by.sees_everything
    columns = [*(["kind"] if kind is not None else []), *(["scope"] if scope is not None or sight else [])]
    columns += ["importance"] if min_importance is not None else []
    columns += ["stakeholderUser", "stakeholderTeam"] if sight else []
    listing = graph.listing(columns)
    typed = (
        None if memory_class is None else listing.of_class(graph.store, NamedNode(v.class_iri(memory_class)))
    )
    actives = None if active is None else listing.of_class(graph.store, e("ActiveMemory"))
    kinds = listing.column("kind") if kind is not None else {}
    levels = listing.column("importance") if min_importance is not None else {}
    users = listing.column("stakeholderUser") if sight else {}
    out = []
    for iri in listing.rows():
        if kind is not None and kinds.get(iri) != kind:
            continue
        if scope is not None and listing.scope(iri) != scope:
            continue
        if min_importance is not None and int(levels.get(iri, 0)) < min_importance:
            continue
        if typed is not None and iri not in typed:
            continue
        if actives is not None and (iri in actives) != active:
            continue
        if sight:
            assert seen_by is not None
            if not may_see(seen_by, listing.scope(iri), users.get(iri), listing.team_scoped(iri)):
                continue
        out.append(listed_id(iri))
    return out


def onboarded(graph: TenantGraph) -> dict[str, list[str]]:
    """The active company memories onboarding wrote, by kind, newest first: a tenant's spine."""
    # oxigraph substitutes only projected variables, so the fixed values are projected too
    query = (
        "SELECT ?id ?kind ?source ?scope WHERE { ?m e:memoryId ?id ; e:recordedAt ?at ; e:kind ?kind ; "
        "e:source ?source ; e:scope ?scope ; a e:ActiveMemory } ORDER BY DESC(?at) ?id"
    )
    subs = {
        Variable("source"): Literal(v.Source.ONBOARDING.value),
        Variable("scope"): Literal(v.Scope.COMPANY.value),
    }
    rows = graph.store.query(query, prefixes=PREFIXES, substitutions=subs, default_graph=[ASSERTED, INFERRED])
    out: dict[str, list[str]] = {}
    for row in rows:
        out.setdefault(row["kind"].value, []).append(row["id"].value)  # type: ignore[union-attr]
    return out


def _value(term: Any) -> Any:
    """A literal's Python value: numbers and booleans typed, times and strings as text."""
    if not isinstance(term, Literal):
        return term.value
    dt = term.datatype.value
    if dt == v.XSD + "integer":
        return int(term.value)
    if dt in (v.XSD + "double", v.XSD + "decimal", v.XSD + "float"):
        return float(term.value)
    if dt == v.XSD + "boolean":
        return term.value == "true"
    return term.value


def get_memory(graph: TenantGraph, memory_id: str, sees: MemoryFilter = everything) -> dict[str, Any] | None:
    """One memory as the API answers it; ``superseded_by`` and ``supersedes`` name only memories
    ``sees`` lets through (a hidden superseder leaves ``superseded_by`` null: the memory is still
    not active, as its ``valid_to`` says); so do a proposal's ``proposes_all`` (every memory it
    would replace, by id) and ``proposes`` (the first of them)."""
    if not v.full_match(v.ID_RE, memory_id):
        return None
    m = memory_iri(memory_id)
    facts: dict[str, list[Any]] = {}
    classes: list[str] = []
    for q in graph.store.quads_for_pattern(m, None, None, ASSERTED):
        if q.predicate == RDF_TYPE:
            classes.append(q.object.value)
        elif q.predicate.value.startswith(v.ENGRAM):
            facts.setdefault(q.predicate.value[len(v.ENGRAM) :], []).append(q.object)
    if "memoryId" not in facts:
        return None

    def one(name: str) -> Any:
        found = facts.get(name)
        return _value(found[0]) if found else None

    superseded_by = one("supersededBy")
    newer = superseded_by.rsplit(":", 1)[-1] if superseded_by else None
    supersedes = sorted(
        older
        for q in graph.store.quads_for_pattern(None, e("supersededBy"), m, ASSERTED)
        if sees(older := q.subject.value.rsplit(":", 1)[-1])
    )
    importance = one("importance")
    forgotten = bool(one("forgotten"))
    proposed = sorted(
        old for o in facts.get("proposes", []) if sees(old := _value(o).rsplit(":", 1)[-1])
    )  # every memory a proposal would replace that ``sees`` lets through, by id
    proposal_status = one("proposalStatus")
    return {
        "id": memory_id,
        "memory_class": _class_name(classes[0]) if classes else "Memory",
        "label": one("label"),
        "content": one("content"),
        "kind": one("kind"),
        "scope": one("scope"),
        "stakeholders": {
            "user_id": one("stakeholderUser"),
            "team_ids": sorted(_value(t) for t in facts.get("stakeholderTeam", [])),
        },
        "importance": importance,
        "importance_name": v.Importance(importance).name.title() if importance else None,
        "confidence": one("confidence"),
        "expires_at": one("expiresAt"),
        "properties": {
            name: _value(vals[0]) for name, vals in sorted(facts.items()) if name not in v.MEMORY_PREDICATES
        },
        "source": one("source"),
        "actor": {"id": one("actor"), "role": one("actorRole")},
        "valid_from": one("validFrom"),
        "valid_to": one("validTo"),
        "recorded_at": one("recordedAt"),
        "updated_at": one("updatedAt"),
        "superseded_by": newer if newer is not None and sees(newer) else None,
        "supersedes": supersedes,
        "forgotten": forgotten,
        "active": superseded_by is None and not forgotten and proposal_status in (None, "accepted"),
        "proposes": proposed[0] if proposed else None,
        "proposes_all": proposed,
        "proposal_status": proposal_status,
        "legal_hold": one("legalHold"),
        "lineage": sorted(_value(x) for x in facts.get("changedBy", [])),
    }


def memory_evidence(graph: TenantGraph, memory_id: str) -> dict[str, Any] | None:
    """What an extracted memory rests on (the conversation and its turns, with a sentence saying
    so), or None for a memory that was not extracted from a conversation."""
    m = memory_iri(memory_id)
    conversations = graph.objects(m, e("evidenceConversation"))
    if not conversations:
        return None
    conversation = conversations[0].value
    turns = sorted(t.value for t in graph.objects(m, e("evidenceTurn")))
    return {
        "conversation_id": conversation,
        "turn_ids": turns,
        "text": f"extracted from conversation {conversation}, turns {', '.join(turns)}",
    }


def evidence_turn_keys(state: GraphState, memory_id: str) -> list[str]:
    """The data key ids of the turns a memory was extracted from (none for one that was not):
    what forgetting the memory destroys besides its own key, so the words it rests on go with it."""
    m = memory_iri(memory_id)
    conversations = state.objects(m, e("evidenceConversation"))
    if not conversations:
        return []
    conversation = conversations[0].value
    turns = sorted(t.value for t in state.objects(m, e("evidenceTurn")))
    return [sealing.turn_key_id(conversation, turn) for turn in turns]


def _class_name(iri: str) -> str:
    return iri[len(v.ENGRAM) :] if iri.startswith(v.ENGRAM) else iri


def export_nquads(graph: TenantGraph) -> str:
    """Asserted facts and the checkpoint as sorted N-Quads: a stable form to diff against a replay."""
    quads = [*graph.quads(ASSERTED), *graph.quads(INFERRED), *graph.quads(META)]
    return "".join(sorted(f"{q} .\n" for q in quads))


INTEGERS = {v.XSD + t for t in ("integer", "int", "long", "short", "nonNegativeInteger", "positiveInteger")}
DECIMALS = {v.XSD + t for t in ("decimal", "double", "float")}


def typed(term: object) -> int | float | str:
    """A status literal as JSON: numbers as numbers (a finite one), everything else as text."""
    if isinstance(term, Literal):
        try:
            if term.datatype.value in INTEGERS:
                return int(term.value)
            if term.datatype.value in DECIMALS:
                number = float(term.value)
                if math.isfinite(number):
                    return int(number) if number.is_integer() and "." not in term.value else number
        except ValueError:
            pass
        return term.value
    return show(term)


def memory_statuses(graph: TenantGraph, memory_id: str) -> dict[str, int | float | str]:
    """Every derived status the rules concluded about a memory (the ontology's :DerivedStatus)."""
    m = memory_iri(memory_id)
    out: dict[str, int | float | str] = {}
    for status in graph.knowledge.ontology.derived_statuses:
        for q in graph.store.quads_for_pattern(m, NamedNode(status.iri), None, INFERRED):
            out[status.name] = typed(q.object)
    return out


def memory_lineage(
    graph: TenantGraph, memory_id: str, sees: MemoryFilter = everything
) -> dict[str, Any] | None:
    """Where a belief came from: who wrote it, from where and why, when (valid and system time),
    what it superseded and what superseded it (both chains, nearest first), and every event that
    touched it, in log order. A chain stops at a memory ``sees`` hides, as if it were not there:
    what lies beyond it is linked only through it."""
    memory = get_memory(graph, memory_id, sees)
    if memory is None:
        return None
    m = memory_iri(memory_id)

    def one(name: str) -> Any:
        found = graph.objects(m, e(name))
        return _value(found[0]) if found else None

    later, seen = [], {memory_id}
    nxt = memory["superseded_by"]
    while nxt is not None and nxt not in seen and sees(nxt):  # a chain, never a loop (a restore can make one)
        later.append(nxt)
        seen.add(nxt)
        found = graph.objects(memory_iri(nxt), e("supersededBy"))
        nxt = found[0].value.rsplit(":", 1)[-1] if found else None
    earlier, frontier = [], list(memory["supersedes"])
    while frontier:
        mid = frontier.pop(0)
        if mid in seen or not sees(mid):
            continue
        seen.add(mid)
        earlier.append(mid)
        older = graph.store.quads_for_pattern(None, e("supersededBy"), memory_iri(mid), ASSERTED)
        frontier += sorted(q.subject.value.rsplit(":", 1)[-1] for q in older)
    events = []
    for event_id in memory["lineage"]:
        pos = graph.applied_position(event_id)
        events.append({"event_id": event_id, "partition": pos.partition if pos else None,
                       "offset": pos.offset if pos else None})  # fmt: skip
    events.sort(key=lambda x: (x["partition"] is None, x["partition"] or 0, x["offset"] or 0))
    return {
        "id": memory_id,
        "source": memory["source"],
        "actor": memory["actor"],
        "purpose": one("purpose"),
        "valid_from": memory["valid_from"],
        "valid_to": memory["valid_to"],
        "recorded_at": memory["recorded_at"],
        "updated_at": memory["updated_at"],
        "forgotten_at": one("forgottenAt"),
        "forgotten_reason": one("forgottenReason"),
        "superseded_by": later,
        "supersedes": earlier,
        "events": events,
    }
