"""Structural conflicts read from conflict sets: the pairs are computed here, never stored.

``rules/conflicts.dlog`` derives ``?m :inConflictSet ?set`` for each active memory, one fact per
(scope, stakeholder key, conflict key): facts linear in the members. Two members of one set
conflict (``conflictsWith``); storing the pairs made k memories sharing a label cost k² facts and
every write O(k) rule work (#27). Readers see ``conflictsWith`` as before: the memory's derived
facts, the context, ``resolve`` and the explanations add the pairs read from the sets, each
explained by the read-time rule below over the two memberships.
"""

from __future__ import annotations

from engram.projections.rules.engine import Derivation, DerivationInput
from engram.projections.rules.program import Rule
from engram.projections.rules.syntax import parse_rules
from engram.projections.tenant_graph import TenantGraph
from engram.projections.terms import INFERRED, e
from pyoxigraph import NamedNode, Quad, Store, Triple

IN_SET = e("inConflictSet")
CONFLICTS_WITH = e("conflictsWith")

PAIRING: Rule = parse_rules(
    """PREFIX : <https://engram.dev/ns#>
#@explain "conflicts with {b}: both active, same {key}, same {scope} scope ({holder})"
[?a, :conflictsWith, ?b] :- [?a, :inConflictSet, ?set], [?b, :inConflictSet, ?set], FILTER(?a != ?b) .
""",
    "conflicts.dlog (read time)",
).rules[0]
"""How a pair is read from the sets, as a rule: only its explanation and inputs are used."""


def sets_of(store: Store, memory: NamedNode) -> list[object]:
    """The conflict sets a memory is a member of (none unless it is active)."""
    return [q.object for q in store.quads_for_pattern(memory, IN_SET, None, INFERRED)]


def partners(store: Store, memory: NamedNode) -> list[NamedNode]:
    """The memories ``memory`` conflicts with: the other members of its sets, sorted."""
    out: set[NamedNode] = set()
    for found in sets_of(store, memory):
        for q in store.quads_for_pattern(None, IN_SET, found, INFERRED):  # type: ignore[arg-type]
            if q.subject != memory and isinstance(q.subject, NamedNode):
                out.add(q.subject)
    return sorted(out, key=lambda n: n.value)


def conflict_quads(store: Store, memory: NamedNode) -> list[Quad]:
    """``memory``'s ``conflictsWith`` facts as the inferred graph held them before they were read
    from the sets."""
    return [Quad(memory, CONFLICTS_WITH, other, INFERRED) for other in partners(store, memory)]


def all_sets(store: Store) -> list[list[NamedNode]]:
    """Every conflict set with at least two members (each sorted): the conflicting ones."""
    members: dict[object, list[NamedNode]] = {}
    for q in store.quads_for_pattern(None, IN_SET, None, INFERRED):
        if isinstance(q.subject, NamedNode):
            members.setdefault(q.object, []).append(q.subject)
    return [sorted(found, key=lambda n: n.value) for found in members.values() if len(found) >= 2]


def explain_pair(
    graph: TenantGraph, fact: Triple, *, depth: int, memo: dict[Triple, list[Derivation]] | None = None
) -> list[Derivation]:
    """Why ``a conflictsWith b`` holds: one derivation per set they share, reading both
    memberships (each explained in turn by its rule, down to ``depth``). ``memo`` keeps the
    memberships explained across the pairs of one answer (``a``'s is the same for all of them)."""
    memo = {} if memo is None else memo
    a, b = fact.subject, fact.object
    if fact.predicate != CONFLICTS_WITH or not isinstance(a, NamedNode) or not isinstance(b, NamedNode):
        return []
    store = graph.store
    out = []
    for found in sets_of(store, a):
        if Quad(b, IN_SET, found, INFERRED) not in store:  # type: ignore[arg-type]
            continue
        reads = [Triple(member, IN_SET, found) for member in (a, b)]  # type: ignore[arg-type]
        because = []
        for read in reads:
            if read not in memo:
                memo[read] = graph.explain(read, depth=max(depth - 1, 0))
            because.append(memo[read])
        words = dict(because[0][0].bindings) if because[0] else {}  # the key, scope and holder
        inputs = tuple(
            DerivationInput(read, False, tuple(why) if depth > 0 else ())
            for read, why in zip(reads, because, strict=True)
        )
        out.append(Derivation(PAIRING, {**words, "a": a, "b": b, "set": found}, inputs))  # type: ignore[dict-item]
    return out
