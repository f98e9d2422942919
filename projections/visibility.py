"""Who may see a memory, and the facts recall and context decide on, read from the graph.

The principal comes from the request's bearer token (``api/auth.py``), through one dependency.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from engram.projections.conflict_sets import partners
from engram.projections.tenant_graph import TenantGraph
from engram.projections.terms import ASSERTED, INFERRED, MEMORY_PREFIX, RDF_TYPE, e, memory_iri
from engram.schemas import vocabulary as v
from engram.schemas.checks import parse_time
from pyoxigraph import Literal, NamedNode, Triple


@dataclass(frozen=True)
class Principal:
    """Who is asking: a user of the tenant and their teams (none: company memories only), with
    the role of the token; ``subject`` is the caller itself (an agent's own id; else the user)."""

    user: str | None = None
    teams: frozenset[str] = frozenset()
    role: str = "user"
    subject: str | None = None

    @property
    def sees_everything(self) -> bool:
        """Operators and auditors govern the tenant: they read every memory, as the export does."""
        return self.role in (v.Role.OPERATOR, v.Role.AUDITOR)


def may_see(who: Principal, scope: str | None, user: str | None, teams: frozenset[str]) -> bool:
    """Company memories: everyone in the tenant; team ones: the teams' members; user ones: that
    user (and an agent acting for them); operators and auditors: all."""
    if scope == v.Scope.COMPANY or who.sees_everything:
        return True
    if scope == v.Scope.TEAM:
        return bool(teams & who.teams)
    return user is not None and user == who.user


def may_see_memory(who: Principal, memory: dict[str, Any]) -> bool:
    """``may_see`` for a memory as ``projections.read.get_memory`` gives it."""
    holders = memory["stakeholders"]
    return may_see(who, memory["scope"], holders["user_id"], frozenset(holders["team_ids"]))


MemoryFilter = Callable[[str], bool]
"""Whether a memory an answer would name (by id) may be named to whoever is asking."""


def everything(memory_id: str) -> bool:
    """The filter of one who sees every memory (an operator, an auditor, the projection itself)."""
    return True


class Sight:
    """The memories one principal may see in one graph: the filter every link a read answer
    makes to another memory passes (``supersedes``, ``superseded_by``, the lineage chains,
    ``conflicts_with``, and every inferred fact, derivation and input of ``derived`` and of the
    derivation trees). A memory the principal may not see is left out of them as if it did not
    exist, so a visible memory never names an invisible one (#22 item 3). Each id is decided once
    per answer, with the one rule of :func:`may_see`."""

    def __init__(self, graph: TenantGraph, who: Principal) -> None:
        self.graph = graph
        self.who = who
        self._decided: dict[str, bool] = {}

    def __call__(self, memory_id: str) -> bool:
        found = self._decided.get(memory_id)
        if found is None:
            facts = memory_facts(self.graph, memory_id, lean=True)
            found = self._decided[memory_id] = facts is not None and facts.visible_to(self.who)
        return found


def sight(graph: TenantGraph, who: Principal) -> MemoryFilter:
    """The filter of ``who``'s answers over ``graph`` (the graph the answer is read from: the
    present one, or the past one of an ``as_of`` read)."""
    return everything if who.sees_everything else Sight(graph, who)


def shown(term: object, sees: MemoryFilter) -> bool:
    """Whether an answer may carry ``term``: anything but a memory the filter hides."""
    if isinstance(term, NamedNode) and term.value.startswith(MEMORY_PREFIX):
        return sees(term.value[len(MEMORY_PREFIX) :])
    return True


def fact_shown(fact: Triple, sees: MemoryFilter) -> bool:
    """Whether a fact names no memory the filter hides (as its subject or its object)."""
    return shown(fact.subject, sees) and shown(fact.object, sees)


@dataclass(frozen=True)
class MemoryFacts:
    """One memory as eligibility, ranking and rendering need it."""

    id: str
    label: str
    content: str
    kind: str
    scope: str
    user: str | None
    teams: frozenset[str]
    importance: int
    confidence: float
    memory_class: str  # local name (or IRI outside engram's namespace)
    classes: frozenset[str] = field(default_factory=frozenset)  # IRIs, asserted and inferred
    active: bool = False
    expired: bool = False
    source: str | None = None
    actor: str | None = None
    actor_role: str | None = None
    valid_from: str | None = None
    recorded_at: str | None = None

    def visible_to(self, who: Principal) -> bool:
        return may_see(who, self.scope, self.user, self.teams)

    @property
    def owner(self) -> str:
        if self.scope == "user":
            return f"user:{self.user}"
        if self.scope == "team":
            return "team:" + ",".join(sorted(self.teams))
        return "company"


def local_name(iri: str) -> str:
    return iri[len(v.ENGRAM) :] if iri.startswith(v.ENGRAM) else iri


LEAN = (
    "memoryId", "kind", "scope", "stakeholderUser", "importance", "confidence", "memoryClass", "validFrom"
)  # fmt: skip


def memory_facts(graph: TenantGraph, memory_id: str, *, lean: bool = False) -> MemoryFacts | None:
    """A memory's facts; ``lean`` reads only what eligibility and ranking need (no label, content
    or attribution), with point lookups: a tenth of the cost, for the many candidates of a recall."""
    if lean:
        return _lean_facts(graph, memory_id)
    m = memory_iri(memory_id)
    one: dict[str, str] = {}
    teams: set[str] = set()
    classes: set[str] = set()
    for q in graph.store.quads_for_pattern(m, None, None, ASSERTED):
        pred = q.predicate.value
        if q.predicate == RDF_TYPE:
            classes.add(q.object.value)
        elif pred == v.ENGRAM + "stakeholderTeam":
            teams.add(q.object.value)
        elif pred.startswith(v.ENGRAM):
            one.setdefault(pred[len(v.ENGRAM) :], q.object.value)
    if "memoryId" not in one:
        return None
    for q in graph.store.quads_for_pattern(m, RDF_TYPE, None, INFERRED):
        classes.add(q.object.value)
    return MemoryFacts(
        id=memory_id,
        label=one.get("label", ""),
        content=one.get("content", ""),
        kind=one.get("kind", ""),
        scope=one.get("scope", ""),
        user=one.get("stakeholderUser"),
        teams=frozenset(teams),
        importance=int(one.get("importance", 0)),
        confidence=float(one.get("confidence", 1.0)),
        memory_class=local_name(one.get("memoryClass", v.ENGRAM + "Memory")),
        classes=frozenset(classes),
        active=v.ENGRAM + "ActiveMemory" in classes,
        expired=v.ENGRAM + "Expired" in classes,
        source=one.get("source"),
        actor=one.get("actor"),
        actor_role=one.get("actorRole"),
        valid_from=one.get("validFrom"),
        recorded_at=one.get("recordedAt"),
    )


def held_at(graph: TenantGraph, memory_id: str, when: datetime) -> bool:
    """Whether a memory held in the world at ``when`` (valid time): ``when`` is inside
    [validFrom, validTo), before its expiry, and the memory is not forgotten (erased for good)."""
    m = memory_iri(memory_id)

    def one(name: str) -> str | None:
        return next((q.object.value for q in graph.store.quads_for_pattern(m, e(name), None, ASSERTED)), None)

    start, end, expires = one("validFrom"), one("validTo"), one("expiresAt")
    return (
        start is not None
        and one("forgotten") is None
        and parse_time(start, "validFrom") <= when
        and (end is None or when < parse_time(end, "validTo"))
        and (expires is None or when < parse_time(expires, "expiresAt"))
    )


def inferred_values(graph: TenantGraph, memory_id: str, predicate: str) -> list[NamedNode | Literal]:
    return [
        q.object  # type: ignore[misc]
        for q in graph.store.quads_for_pattern(memory_iri(memory_id), e(predicate), None, INFERRED)
    ]


def _lean_facts(graph: TenantGraph, memory_id: str) -> MemoryFacts | None:
    m = memory_iri(memory_id)
    store = graph.store
    one: dict[str, str] = {}
    for name in LEAN:
        for q in store.quads_for_pattern(m, e(name), None, ASSERTED):
            one[name] = q.object.value
            break
    if "memoryId" not in one:
        return None
    classes = frozenset(q.object.value for q in store.quads_for_pattern(m, RDF_TYPE, None, None))
    teams: frozenset[str] = frozenset()
    if one.get("scope") == "team":
        found = store.quads_for_pattern(m, e("stakeholderTeam"), None, ASSERTED)
        teams = frozenset(q.object.value for q in found)
    return lean_from(memory_id, one, classes, teams)


def inferred_by_name(graph: TenantGraph, memory_id: str) -> dict[str, list[Any]]:
    """The rules' facts about a memory, by predicate name (its statuses, keys, conflicts: the
    ``conflictsWith`` pairs read from its conflict sets, which stand for them and are not listed)."""
    out: dict[str, list[Any]] = {}
    m = memory_iri(memory_id)
    for q in graph.store.quads_for_pattern(m, None, None, INFERRED):
        if q.predicate.value.startswith(v.ENGRAM):
            out.setdefault(q.predicate.value[len(v.ENGRAM) :], []).append(q.object)
    if out.pop("inConflictSet", None) and (others := partners(graph.store, m)):
        out["conflictsWith"] = list(others)
    return out


def lean_from(
    memory_id: str, one: dict[str, str], classes: frozenset[str], teams: frozenset[str]
) -> MemoryFacts:
    """Lean facts from the values of ``LEAN`` predicates, however they were read."""
    return MemoryFacts(
        id=memory_id,
        label="",
        content="",
        kind=one.get("kind", ""),
        scope=one.get("scope", ""),
        user=one.get("stakeholderUser"),
        teams=teams if one.get("scope") == "team" else frozenset(),
        importance=int(one.get("importance", 0)),
        confidence=float(one.get("confidence", 1.0)),
        memory_class=local_name(one.get("memoryClass", v.ENGRAM + "Memory")),
        classes=classes,
        active=v.ENGRAM + "ActiveMemory" in classes,
        expired=v.ENGRAM + "Expired" in classes,
        valid_from=one.get("validFrom"),
    )


DISPLAY = ("label", "content", "source", "actor", "actorRole", "recordedAt")


def with_display(graph: TenantGraph, facts: MemoryFacts, names: tuple[str, ...] = DISPLAY) -> MemoryFacts:
    """Lean facts completed with what an answer shows (label, content, and who set it when)."""
    m = memory_iri(facts.id)  # a lookup per name: measured faster than one scan of the memory's facts
    got = {
        name: next((q.object.value for q in graph.store.quads_for_pattern(m, e(name), None, ASSERTED)), None)
        for name in names
    }
    return dataclasses.replace(
        facts,
        label=got.get("label") or "",
        content=got.get("content") or "",
        source=got.get("source"),
        actor=got.get("actor"),
        actor_role=got.get("actorRole"),
        recorded_at=got.get("recordedAt"),
    )
