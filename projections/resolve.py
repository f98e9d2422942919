"""Resolve: settle the conflicts the rules flag by a declared policy — which memory of each
conflicting set stays, and which are superseded by it. A pure decision over the graph; the
supersessions are appended by the command layer (``commands.resolutions``), where governance
decides them like any other write.

The sets are the rules' own (``rules/conflicts.dlog``): active memories joined by
``conflictsWith`` (the same class and key, the same scope, a shared stakeholder: members of one
``inConflictSet``), taken as connected components. Seen through the principal's ``sees``
filter: a memory it may not see is not in any set it is shown, so it is never named, never
chosen as the winner (a visible memory would then be superseded by a hidden one) and never
superseded on its behalf.

The policies, each with a total order (ties go to the newer, then to the larger id, so the choice
is deterministic):

* ``prefer_newer``: the latest valid time (``valid_from``), then the latest recorded;
* ``prefer_higher_confidence``: the highest ``confidence``;
* ``prefer_more_specific_scope``: user over team over company, then fewer stakeholders (a memory
  for one team over one for two). Within a rules' set the scope is shared (a conflict is per
  scope: a user's preference does not contradict the company's, it overrides it where the context
  bundle is read), so in practice it is the narrower stakeholder set that wins;
* ``prefer_human``: a memory a person entered (any source but ``extraction``, ``agent``,
  ``pipeline`` or ``system``) over an automatic one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

from engram.projections.conflict_sets import all_sets, partners
from engram.projections.tenant_graph import TenantGraph
from engram.projections.terms import INFERRED, MEMORY_PREFIX, e, memory_iri, time_order
from engram.projections.visibility import MemoryFacts, MemoryFilter, memory_facts
from engram.schemas import vocabulary as v

Policy = Literal["prefer_newer", "prefer_higher_confidence", "prefer_more_specific_scope", "prefer_human"]
POLICIES: tuple[Policy, ...] = (
    "prefer_newer",
    "prefer_higher_confidence",
    "prefer_more_specific_scope",
    "prefer_human",
)
AUTOMATIC = {v.Source.EXTRACTION, v.Source.AGENT, v.Source.PIPELINE, v.Source.SYSTEM}
SPECIFICITY: dict[str, int] = {v.Scope.USER: 2, v.Scope.TEAM: 1, v.Scope.COMPANY: 0}


@dataclass(frozen=True)
class Loser:
    memory_id: str
    superseded_by: str
    reason: str


@dataclass(frozen=True)
class Resolution:
    """One conflicting set, as the policy settles it."""

    key: str
    scope: str
    members: tuple[str, ...]
    winner: str
    superseded: tuple[Loser, ...]


def conflict_sets(graph: TenantGraph, sees: MemoryFilter) -> list[list[str]]:
    """The rules' conflicting sets among the memories ``sees`` lets through, each sorted, the sets
    ordered by their first member."""
    links: dict[str, set[str]] = {}
    for members in all_sets(graph.store):  # a set's visible members, pairwise linked: as a star
        ids = [m.value[len(MEMORY_PREFIX) :] for m in members if m.value.startswith(MEMORY_PREFIX)]
        seen = [m for m in ids if sees(m)]
        for other in seen[1:]:
            links.setdefault(seen[0], set()).add(other)
            links.setdefault(other, set()).add(seen[0])
    out, done = [], set()
    for start in sorted(links):
        if start in done:
            continue
        component, frontier = set(), [start]
        while frontier:
            node = frontier.pop()
            if node in component:
                continue
            component.add(node)
            frontier.extend(links[node] - component)
        done |= component
        out.append(sorted(component))
    return out


def _newer(m: MemoryFacts) -> tuple[str, str, str]:
    return (time_order(m.valid_from), time_order(m.recorded_at), m.id)


def _order(policy: Policy) -> Callable[[MemoryFacts], tuple[Any, ...]]:
    """The policy as a sort key: the largest wins."""
    if policy == "prefer_higher_confidence":
        return lambda m: (m.confidence, *_newer(m))
    if policy == "prefer_more_specific_scope":
        return lambda m: (SPECIFICITY.get(m.scope, 0), -len(m.teams), *_newer(m))
    if policy == "prefer_human":
        return lambda m: (m.source not in AUTOMATIC, *_newer(m))
    return _newer


def _why(policy: Policy, winner: MemoryFacts, loser: MemoryFacts) -> str:
    """Why ``loser`` gives way, in words an agent can show a person."""
    if policy == "prefer_higher_confidence" and winner.confidence != loser.confidence:
        return f"confidence {winner.confidence:g} over {loser.confidence:g}"
    if policy == "prefer_more_specific_scope":
        ranks = (_order(policy)(winner)[:2], _order(policy)(loser)[:2])
        if ranks[0] != ranks[1]:
            return f"more specific: {winner.owner} over {loser.owner}"
    if policy == "prefer_human" and (winner.source in AUTOMATIC) != (loser.source in AUTOMATIC):
        return f"entered by a person ({winner.source}) over {loser.source}"
    if time_order(winner.valid_from) != time_order(loser.valid_from):
        return f"newer: valid from {winner.valid_from} over {loser.valid_from}"
    if time_order(winner.recorded_at) != time_order(loser.recorded_at):
        return f"newer: recorded {winner.recorded_at} over {loser.recorded_at}"
    return f"a tie on every ground: the larger id ({winner.id}) stays"


def resolve(
    graph: TenantGraph, policy: Policy, sees: MemoryFilter, only: Iterable[str] | None = None
) -> list[Resolution]:
    """How ``policy`` settles each conflicting set ``sees`` may be shown (only those holding one of
    ``only``, when given): one winner per set, every other member superseded by it."""
    wanted = set(only) if only is not None else None
    order = _order(policy)
    out = []
    for members in conflict_sets(graph, sees):
        if wanted is not None and not wanted & set(members):
            continue
        facts = [f for f in (memory_facts(graph, m) for m in members) if f is not None]
        if len(facts) < 2:
            continue
        ranked = sorted(facts, key=order, reverse=True)
        winner = ranked[0]
        keys = sorted(
            q.object.value
            for q in graph.store.quads_for_pattern(memory_iri(winner.id), e("conflictKey"), None, INFERRED)
        )
        losers = tuple(Loser(m.id, winner.id, _why(policy, winner, m)) for m in ranked[1:])
        out.append(Resolution(keys[0] if keys else "", winner.scope, tuple(members), winner.id, losers))
    return out


def in_conflict(graph: TenantGraph, memory_id: str, sees: MemoryFilter) -> bool:
    """Whether a memory is in a conflicting set ``sees`` may be shown."""
    others = partners(graph.store, memory_iri(memory_id))
    return any(sees(other.value.removeprefix(MEMORY_PREFIX)) for other in others)
