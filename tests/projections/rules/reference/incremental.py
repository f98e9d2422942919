"""Keeping the materialisation current: DRed for what was removed, semi-naive for what was added.

``update`` walks the strata in order with the base facts an event added and removed; each stratum
overdeletes what might have lost support, rederives what still holds, and inserts what the
changes newly derive. The cost follows the facts touched, not the size of the store.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from engram.projections.rules import compile as sparql
from engram.projections.rules.compile import Binding
from engram.projections.rules.program import Aggregate, Rank, Var
from pyoxigraph import Quad, QueryBoolean, Store, Triple

from tests.projections.rules.reference.strata import (
    READ_AS_IS,
    Fact,
    Graphs,
    TriggerKind,
    UpdateStats,
    _Routes,
    _seedable,
    _Stratum,
    _Trigger,
    unify,
)

if TYPE_CHECKING:
    from tests.projections.rules.reference.engine import RuleEngine

log = logging.getLogger(__name__)


class Incremental:
    """The incremental half of :class:`~projections.rules.engine.RuleEngine` (whose query
    primitives it uses)."""

    # -- incremental ----------------------------------------------------------------------
    def update(
        self: RuleEngine, store: Store, graphs: Graphs, added: Iterable[Fact], removed: Iterable[Fact]
    ) -> UpdateStats:
        """Bring ``graphs.inferred`` up to date after base facts were added and removed."""
        stats, started = UpdateStats(), time.monotonic()
        inferred, scratch = graphs.inferred, graphs.removed
        removed = [fact for fact in dict.fromkeys(removed) if not self._in(store, fact, graphs.base)]
        # Facts gained and lost so far, base and inferred: each stratum reads what those below changed.
        gained: list[Fact] = []
        for fact in dict.fromkeys(added):
            quad = Quad(fact.subject, fact.predicate, fact.object, inferred)
            if quad in store:
                store.remove(quad)  # now asserted: it held already, so nothing changes
            else:
                gained.append(fact)
        store.extend(Quad(fact.subject, fact.predicate, fact.object, scratch) for fact in removed)
        lost = list(removed)
        lost_ever = list(removed)  # `lost` are those of these not back by now
        routes = _Routes(self._readers)
        try:
            for level, stratum in enumerate(self.strata):
                if stratum.rank is not None:
                    here = routes.at(gained, level) + routes.still(lost_ever, lost, level)
                    derived, dropped = self._rerank(store, graphs, stratum, here, stats)
                    gained += derived
                    lost += dropped
                    lost_ever += dropped
                    continue
                here_gained, here_lost = routes.at(gained, level), routes.still(lost_ever, lost, level)
                overdeleted = self._overdelete(store, graphs, stratum, here_gained, here_lost, stats)
                # A pattern may be produced by rules in several strata: whatever was deleted and
                # this stratum can produce is a candidate, and rederivation may use any rule of
                # this or a lower stratum (those are final by now).
                # Aggregate heads of over-deleted groups are recomputed by the insertion below,
                # so asking each one again (a whole aggregate apiece) would be wasted.
                recheck = [] if stratum.aggregate_only else overdeleted
                candidates = recheck + [fact for fact in lost if stratum.produces(fact)]
                self._rederive(store, graphs, self.strata[: level + 1], candidates, stats)
                lost = [
                    fact
                    for fact in dict.fromkeys(lost + overdeleted)
                    if not self._in(store, fact, graphs.current)
                ]
                lost_ever += overdeleted
                here_gained, here_lost = routes.at(gained, level), routes.still(lost_ever, lost, level)
                gained += self._insert(store, graphs, stratum, here_gained, here_lost, stats)
        finally:
            store.remove_graph(scratch)
        stats.seconds = time.monotonic() - started
        return stats

    @staticmethod
    def _by_trigger(
        matches: Iterable[tuple[_Trigger, Binding]],
    ) -> dict[int, tuple[_Trigger, list[Binding]]]:
        """Seeds grouped per trigger, so one query serves every fact that fired it."""
        grouped: dict[int, tuple[_Trigger, list[Binding]]] = {}
        for trigger, seed in matches:
            if trigger.kind is TriggerKind.NEGATED:
                seed = {var: value for var, value in seed.items() if var not in trigger.local_vars}
            grouped.setdefault(id(trigger), (trigger, []))[1].append(seed)
        return grouped

    @staticmethod
    def _by_rule(
        matches: Iterable[tuple[_Trigger, Binding]],
    ) -> dict[tuple[int, str | None], tuple[_Trigger, list[Binding]]]:
        """For insertion: a rule's seeds cut to the subject of the atom each fired, one query per
        rule and subject variable (an aggregate's seeds stay per trigger).

        An insertion query evaluates the whole body from its seeds, so a seed cut down to one of its
        variables finds every derivation the whole seed finds (and maybe more, each of them valid),
        and the atoms of a rule that share a subject (a memory's key, scope, holder and state, say)
        are asked once instead of once each. Over-deletion cannot do this: its queries leave the
        firing atom out, so the seed is what binds that atom's variables in the head.
        """
        grouped: dict[tuple[int, str | None], tuple[_Trigger, list[Binding]]] = {}
        for trigger, seed in matches:
            if trigger.kind is TriggerKind.NEGATED:
                seed = {var: value for var, value in seed.items() if var not in trigger.local_vars}
            subject = trigger.atom.s
            if (
                trigger.kind is not TriggerKind.AGGREGATE
                and isinstance(subject, Var)
                and subject.name in seed
            ):
                key: tuple[int, str | None] = (id(trigger.rule), subject.name)
                seed = {subject.name: seed[subject.name]}
            else:
                key = (id(trigger), None)
            grouped.setdefault(key, (trigger, []))[1].append(seed)
        return grouped

    def _overdelete(
        self: RuleEngine,
        store: Store,
        graphs: Graphs,
        stratum: _Stratum,
        gained: list[Fact],
        lost: list[Fact],
        stats: UpdateStats,
    ) -> list[Fact]:
        # what lost a fact it read positively, or gained one it reads under NOT, may lose support
        pending = stratum.triggered(positive=lost, negative=gained)
        overdeleted: list[Fact] = []
        seen: set[Fact] = set()
        while pending:
            batches, pending = self._by_trigger(pending), []
            for trigger, seeds in batches.values():
                for fact in list(self._candidates(store, graphs, trigger, seeds, stats)):
                    quad = Quad(fact.subject, fact.predicate, fact.object, graphs.inferred)
                    if fact in seen or quad not in store:
                        continue
                    seen.add(fact)
                    store.remove(quad)
                    store.add(Quad(fact.subject, fact.predicate, fact.object, graphs.removed))
                    overdeleted.append(fact)
                    stats.removed += 1
                    pending += stratum.matches(fact, READ_AS_IS)
        return overdeleted

    def _candidates(
        self: RuleEngine,
        store: Store,
        graphs: Graphs,
        trigger: _Trigger,
        seeds: list[Binding],
        stats: UpdateStats,
    ) -> Iterator[Fact]:
        """Inferred facts whose derivation may have used the triggering facts (an over-estimate)."""
        rule = trigger.rule
        if not all(map(_seedable, seeds)):  # blank nodes cannot go in VALUES: every derivation
            if trigger.kind is TriggerKind.AGGREGATE:
                seeds = []
            else:
                yield from self._heads(store, rule, [], graphs.old_and_new, stats, drop_negations=True)
                return
        if trigger.kind is TriggerKind.AGGREGATE:
            assert isinstance(trigger.literal, Aggregate)
            for group in self._group_keys(store, trigger.literal, seeds, graphs.old_and_new, stats):
                for head in rule.heads:
                    pattern = [group.get(term.name) if isinstance(term, Var) else term for term in head.terms]
                    for quad in store.quads_for_pattern(*pattern, graphs.inferred):
                        yield Triple(quad.subject, quad.predicate, quad.object)
            return
        yield from self._heads(
            store, rule, seeds, graphs.old_and_new, stats, skip=trigger.literal, drop_negations=True
        )

    def _rederive(
        self: RuleEngine,
        store: Store,
        graphs: Graphs,
        strata: list[_Stratum],
        candidates: list[Fact],
        stats: UpdateStats,
    ) -> None:
        pending = list(dict.fromkeys(candidates))
        progress = True
        while pending and progress:
            progress = False
            for fact in list(pending):
                if self._in(store, fact, graphs.current):
                    pending.remove(fact)
                elif any(self._derivable(store, graphs, stratum, fact, stats) for stratum in strata):
                    store.add(Quad(fact.subject, fact.predicate, fact.object, graphs.inferred))
                    stats.rederived += 1
                    pending.remove(fact)
                    progress = True

    def _derivable(
        self: RuleEngine, store: Store, graphs: Graphs, stratum: _Stratum, fact: Fact, stats: UpdateStats
    ) -> bool:
        for rule, head in stratum.heads:
            seed = unify(head, fact)
            if seed is None:
                continue
            if isinstance(rule.body[0], Rank):  # no other rule derives its facts: not reached today
                if fact in self._top(store, rule, rule.body[0], graphs.current, stats):
                    return True
                continue
            if not _seedable(seed):
                if fact in set(self._heads(store, rule, [], graphs.current, stats)):
                    return True
                continue
            result = self._rows(store, sparql.ask(rule, [seed], self._bodies), graphs.current, stats)
            if isinstance(result, QueryBoolean) and bool(result):
                return True
        return False

    def _insert(
        self: RuleEngine,
        store: Store,
        graphs: Graphs,
        stratum: _Stratum,
        gained: list[Fact],
        lost: list[Fact],
        stats: UpdateStats,
    ) -> list[Fact]:
        """The heads the changes this stratum reads derive, written; returns them."""
        # what gained a fact it reads positively, or lost one it reads under NOT, may gain a head
        pending = stratum.triggered(positive=gained, negative=lost)
        derived: list[Fact] = []
        while pending:  # semi-naive rounds: what one round derives seeds the next, written at once
            batches, new = self._by_rule(pending), {}
            for trigger, seeds in batches.values():
                for fact in self._derived(store, graphs, trigger, seeds, stats):
                    if fact not in new and not self._in(store, fact, graphs.current):
                        new[fact] = None
            store.extend(Quad(fact.subject, fact.predicate, fact.object, graphs.inferred) for fact in new)
            derived += new
            stats.added += len(new)
            pending = stratum.matches_all(new, READ_AS_IS)
        return derived

    def _derived(
        self: RuleEngine,
        store: Store,
        graphs: Graphs,
        trigger: _Trigger,
        seeds: list[Binding],
        stats: UpdateStats,
    ) -> Iterator[Fact]:
        rule = trigger.rule
        if not all(map(_seedable, seeds)):  # blank nodes cannot go in VALUES: evaluate unseeded
            seeds = []
        if trigger.kind is TriggerKind.AGGREGATE:
            assert isinstance(trigger.literal, Aggregate)
            groups = self._group_keys(store, trigger.literal, seeds, graphs.old_and_new, stats)
            if groups and not all(map(_seedable, groups)):
                groups = [{}]
            if groups:
                yield from self._heads(store, rule, groups, graphs.current, stats)
            return
        yield from self._heads(store, rule, seeds, graphs.current, stats)
