"""RANK rules: a top-N per key kept by difference, the new top against the old.

A RANK stratum is not overdeleted and rederived: its old top is read back from its own heads (so
no other rule may derive facts like them: ``_check_ranks``), the new one is computed for the
items a change touched, and only the difference is written.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from engram.projections.rules.compile import Value
from engram.projections.rules.program import Rank, Rule, RuleSyntaxError, Var
from engram.projections.rules.stratify import unifiable
from pyoxigraph import Literal, NamedNode, Quad, Store

from tests.projections.rules.reference.strata import (
    Fact,
    Graphs,
    TriggerKind,
    UpdateStats,
    _Stratum,
    instantiate,
    unify,
)

if TYPE_CHECKING:
    from tests.projections.rules.reference.engine import RuleEngine

log = logging.getLogger(__name__)


class Ranking:
    """The RANK half of :class:`~projections.rules.engine.RuleEngine`."""

    def _top(
        self: RuleEngine,
        store: Store,
        rule: Rule,
        rank: Rank,
        graphs: list[NamedNode],
        stats: UpdateStats | None,
        items: Iterable[Value] | None = None,
    ) -> list[Fact]:
        """A RANK rule's heads: the first LIMIT items in key order at positions 1, 2, …, each with
        its best solution; ``items``, when given, are the only ones looked at."""
        facts: list[Fact] = []
        for position, binding in enumerate(self._first(store, rank, graphs, stats, items), start=1):
            binding[rank.var] = Literal(position)
            facts += [fact for head in rule.heads if (fact := instantiate(head, binding)) is not None]
        return facts

    def _rerank(
        self: RuleEngine,
        store: Store,
        graphs: Graphs,
        stratum: _Stratum,
        changes: list[Fact],
        stats: UpdateStats,
    ) -> tuple[list[Fact], list[Fact]]:
        """A RANK rule after a change: its new top against the old, only the difference written.

        When no item of the old top changed, the new top is the best of the old one and the changed
        items (every other item ranked below the old top, or there were no others): a seeded query
        of a few rows. A change to an item of the top, to what no item binds (the limit), to a fact
        like its heads, or to an item that is not an IRI ranks everything again: one ordered query.
        """
        assert stratum.rank is not None
        rule, rank = stratum.rank
        fired = stratum.matches_all(changes, (TriggerKind.AGGREGATE,))
        heads_touched = any(stratum.produces(fact) for fact in changes)  # asserted or retracted
        if not fired and not heads_touched:
            return [], []
        patterns = [
            tuple(None if isinstance(term, Var) else term for term in head.terms) for head in rule.heads
        ]
        old = [
            quad.triple for pattern in patterns for quad in store.quads_for_pattern(*pattern, graphs.inferred)
        ]
        asserted = [
            quad.triple
            for graph in graphs.base
            for pattern in patterns
            for quad in store.quads_for_pattern(*pattern, graph)
        ]
        members = {
            binding[rank.item]
            for fact in old + asserted
            for head in rule.heads
            if (binding := unify(head, fact)) is not None
        }
        items = {seed.get(rank.item) for _, seed in fired}
        merge = (
            not heads_touched
            and None not in items
            and not items & members
            and all(isinstance(item, NamedNode) for item in items | members)
        )
        new = dict.fromkeys(
            self._top(store, rule, rank, graphs.current, stats, items=members | items if merge else None)
        )
        kept = set(old)
        dropped = [fact for fact in old if fact not in new]
        derived = [fact for fact in new if fact not in kept and not self._in(store, fact, graphs.base)]
        for fact in dropped:
            store.remove(Quad(fact.subject, fact.predicate, fact.object, graphs.inferred))
        store.extend(Quad(fact.subject, fact.predicate, fact.object, graphs.removed) for fact in dropped)
        store.extend(Quad(fact.subject, fact.predicate, fact.object, graphs.inferred) for fact in derived)
        stats.added += len(derived)
        stats.removed += len(dropped)
        return derived, dropped


def _check_ranks(rules: list[Rule]) -> None:
    """No other rule derives facts like a RANK rule's heads: its old top is read back from them."""
    for rule in rules:
        if not isinstance(rule.body[0], Rank):
            continue
        for head in rule.heads:
            if other := next(
                (o for o in rules if o is not rule and any(unifiable(h, head) for h in o.heads)), None
            ):
                raise RuleSyntaxError(
                    f"{rule.source}: {other.source} derives facts like this RANK rule's; "
                    "a RANK rule's heads must be its own"
                )
