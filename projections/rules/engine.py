"""Materialise rules over a tenant store and keep the result current as facts change.

Inferred facts live in their own named graph and never repeat a base fact (asserted or
ontology). ``update`` takes the base facts an event added and removed (already committed) and
walks the strata in order:

* **overdelete** (DRed): every inferred fact that *might* have used a removed fact (or a fact
  newly added under a NOT, or a changed aggregate group) is removed; candidates are found by
  evaluating the rule without the triggering literal over old and new facts together, so nothing that
  lost support is missed;
* **rederive**: an overdeleted fact that still has a derivation from what remains comes back;
* **insert** (semi-naive): rules are evaluated seeded by each added fact (or a fact removed
  under a NOT, or a changed aggregate group); new heads are added and seed further rounds.

A RANK stratum is kept by ``_rerank`` instead: the new top against the old, the difference
written. The cost follows the facts touched, not the size of the store. ``materialize`` computes the
same result from scratch and is what the tests compare against after every step.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from pyoxigraph import BlankNode, Literal, NamedNode, Quad, QueryBoolean, QuerySolution, Store, Triple

from projections.rules import compile as sparql
from projections.rules.compile import Binding, Value
from projections.rules.stratify import body_atoms, stratify, unifiable
from projections.rules.syntax import (
    RDF_TYPE,
    Aggregate,
    Atom,
    BodyLiteral,
    Negation,
    Program,
    Rank,
    Rule,
    RuleSyntaxError,
    Var,
)

log = logging.getLogger(__name__)
RDF_TYPE_NODE = NamedNode(RDF_TYPE)

# Seeds per query. Past about a thousand VALUES rows oxigraph joins each pattern whole (on a
# 100k-memory tenant 2,000 seeds took 1.9 s, the same seeds in chunks of 200 9 ms), so a query
# never gets more: a tenant's long run of a batch is asked in chunks.
SEED_CHUNK = 256

Fact = Triple


@dataclass(frozen=True)
class Graphs:
    """Which named graphs hold base facts, inferred facts and (during an update) removed ones."""

    base: tuple[NamedNode, ...]
    inferred: NamedNode
    removed: NamedNode

    @property
    def current(self) -> list[NamedNode]:
        """The facts as they stand, base and inferred."""
        return [*self.base, self.inferred]

    @property
    def old_and_new(self) -> list[NamedNode]:
        """Before and after the update together: a derivation that used a removed fact still matches."""
        return [*self.base, self.inferred, self.removed]


class TriggerKind(enum.Enum):
    """How a rule reads the atom a changed fact matches, and so which changes fire the rule."""

    POSITIVE = enum.auto()
    """A plain body atom: fired by a fact added (may derive) or removed (may lose support)."""
    NEGATED = enum.auto()
    """An atom under NOT: fired by a fact removed (may derive) or added (may lose support)."""
    AGGREGATE = enum.auto()
    """An atom inside AGGREGATE or RANK: fired by any change, which alters the group it falls in
    (a RANK is one group)."""


# The triggers a change fires where a rule reads the fact as it is, and where it reads it under
# NOT; an aggregate's group changes either way. Tuples: `in` compares by identity, no hashing.
READ_AS_IS = (TriggerKind.POSITIVE, TriggerKind.AGGREGATE)
READ_UNDER_NOT = (TriggerKind.NEGATED, TriggerKind.AGGREGATE)


@dataclass(frozen=True)
class _Trigger:
    """A body atom a changed fact can match, with the literal it belongs to."""

    rule: Rule
    literal: Atom | Negation | Aggregate
    atom: Atom
    kind: TriggerKind
    local_vars: frozenset[str] = frozenset()  # of a negation: existential, so never seeded


@dataclass
class UpdateStats:
    """What one update did, for the logs and the benchmarks."""

    added: int = 0
    removed: int = 0
    rederived: int = 0
    queries: int = 0
    seconds: float = 0.0


@dataclass(frozen=True)
class DerivationInput:
    """A fact a derivation read; an inferred one is explained in turn, down to a depth."""

    fact: Fact
    asserted: bool  # a base fact (asserted or ontology), not an inferred one
    because: tuple[Derivation, ...] = ()


@dataclass(frozen=True)
class Derivation:
    """One way a rule derives a fact from the facts as they stand."""

    rule: Rule
    bindings: Mapping[str, Value]
    inputs: tuple[DerivationInput, ...]  # the facts its positive atoms matched


# What a fact's predicate finds in a stratum's trigger index: the triggers, or them by object.
_Fired = tuple[_Trigger, ...] | dict[str | None, tuple[_Trigger, ...]]


@dataclass
class _Stratum:
    """Rules that depend on one another, indexed by what their bodies read and heads produce."""

    rules: list[Rule]
    # by the predicate IRI of the atom; None for an atom whose predicate is a variable
    triggers: dict[str | None, list[_Trigger]] = field(default_factory=dict)
    heads: list[tuple[Rule, Atom]] = field(default_factory=list)
    _by_kinds: dict[tuple[TriggerKind, ...], dict[str | None, _Fired]] = field(
        default_factory=dict, repr=False
    )

    @property
    def aggregate_only(self) -> bool:
        """Every rule here is an AGGREGATE rule: insertion recomputes each group it over-deleted."""
        return all(any(isinstance(literal, Aggregate | Rank) for literal in rule.body) for rule in self.rules)

    @property
    def rank(self) -> tuple[Rule, Rank] | None:
        """The RANK rule this stratum is (it reads its atoms as finished, so it is one alone)."""
        body = self.rules[0].body
        return (self.rules[0], body[0]) if isinstance(body[0], Rank) else None

    @property
    def recursive(self) -> bool:
        """Whether a rule here reads what a rule here produces (else one pass reaches the fixpoint)."""
        atoms = [atom for rule in self.rules for atom, _ in body_atoms(rule)]
        return any(unifiable(head, atom) for _, head in self.heads for atom in atoms)

    def by_predicate(self, kinds: tuple[TriggerKind, ...]) -> dict[str | None, _Fired]:
        """The triggers of these kinds a fact may fire, by its predicate IRI, made once per stratum:
        a tuple, or (for a predicate some atom names an object of, rdf:type above all) a dict by the
        object's lexical value with the tuple for any other object under None. Each also holds
        the triggers whose predicate is a variable (under None alone). A type fact so meets the
        atoms of its class only; equal lexical values of different terms cost a ``unify``."""
        found = self._by_kinds.get(kinds)
        if found is None:
            anywhere = tuple(t for t in self.triggers.get(None, ()) if t.kind in kinds)
            found = {None: anywhere}
            for predicate, triggers in self.triggers.items():
                if predicate is None:
                    continue
                chosen = [t for t in triggers if t.kind in kinds]
                open_object = tuple(t for t in chosen if isinstance(t.atom.o, Var))
                named = [t for t in chosen if not isinstance(t.atom.o, Var)]
                if not named:
                    found[predicate] = (*open_object, *anywhere)
                    continue
                by_object: dict[str | None, tuple[_Trigger, ...]] = {None: (*open_object, *anywhere)}
                for value in {t.atom.o.value for t in named}:  # type: ignore[union-attr]
                    same = tuple(t for t in named if t.atom.o.value == value)  # type: ignore[union-attr]
                    by_object[value] = (*same, *open_object, *anywhere)
                found[predicate] = by_object
            self._by_kinds[kinds] = found
        return found

    def matches(self, fact: Fact, kinds: tuple[TriggerKind, ...]) -> list[tuple[_Trigger, Binding]]:
        return self.matches_all([fact], kinds)

    def matches_all(
        self, facts: Iterable[Fact], kinds: tuple[TriggerKind, ...]
    ) -> list[tuple[_Trigger, Binding]]:
        """Every (trigger, seed) the facts fire; a fact no atom of this stratum reads costs a lookup."""
        index = self.by_predicate(kinds)
        anywhere = index[None]
        out = []
        for fact in facts:
            triggers = index.get(fact.predicate.value, anywhere)
            if isinstance(triggers, dict):
                triggers = triggers.get(fact.object.value) or triggers[None]
            for trigger in triggers:
                if (seed := unify(trigger.atom, fact)) is not None:
                    out.append((trigger, seed))
        return out

    def triggered(self, *, positive: list[Fact], negative: list[Fact]) -> list[tuple[_Trigger, Binding]]:
        """Triggers fired by facts read positively, and by facts read under NOT; both fire aggregates."""
        return self.matches_all(positive, READ_AS_IS) + self.matches_all(negative, READ_UNDER_NOT)

    def produces(self, fact: Fact) -> bool:
        return any(unify(head, fact) is not None for _, head in self.heads)


def _seedable(seed: Binding) -> bool:
    """VALUES cannot hold a blank node: such a binding cannot seed a query."""
    return not any(isinstance(value, BlankNode) for value in seed.values())


def unify(atom: Atom, fact: Fact) -> Binding | None:
    binding: dict[str, Value] = {}
    for term, value in zip(atom.terms, (fact.subject, fact.predicate, fact.object), strict=True):
        if isinstance(term, Var):
            if binding.setdefault(term.name, value) != value:
                return None
        elif term != value:
            return None
    return binding


def instantiate(atom: Atom, row: Binding | QuerySolution) -> Fact | None:
    terms = []
    for term in atom.terms:
        if isinstance(term, Var):
            value = row.get(term.name) if isinstance(row, dict) else row[term.name]
            if value is None:
                return None
            terms.append(value)
        else:
            terms.append(term)
    s, p, o = terms
    if isinstance(s, Literal) or not isinstance(p, NamedNode):
        return None  # a BIND produced something that cannot stand there
    return Triple(s, p, o)


class RuleEngine:
    def __init__(self, program: Program) -> None:
        _check_ranks(program.rules)
        self.program = program
        self.prefixes = dict(program.prefixes)
        self.strata = [self._index(rules) for rules in stratify(program.rules)]
        self._readers = _readers(self.strata)
        self._bodies: sparql.BodyCache = {}
        # (rule id, skipped literal id, seeded variables) -> the atoms a seed makes ground
        self._ground_atoms: dict[tuple[int, int, frozenset[str]], list[Atom]] = {}
        # (rule id, skipped literal id) -> the atoms that name a class
        self._class_atoms: dict[tuple[int, int], list[Atom]] = {}

    @staticmethod
    def _index(rules: list[Rule]) -> _Stratum:
        stratum = _Stratum(rules)
        for rule in rules:
            stratum.heads += [(rule, head) for head in rule.heads]
            for literal in rule.body:
                match literal:
                    case Atom():
                        triggers = [_Trigger(rule, literal, literal, TriggerKind.POSITIVE)]
                    case Negation():
                        local_vars = sparql.negation_locals(rule, literal)
                        triggers = [
                            _Trigger(rule, literal, atom, TriggerKind.NEGATED, local_vars)
                            for atom in literal.atoms
                        ]
                    case Aggregate() | Rank():
                        triggers = [
                            _Trigger(rule, literal, atom, TriggerKind.AGGREGATE) for atom in literal.atoms
                        ]
                    case _:
                        triggers = []
                for trigger in triggers:
                    predicate = trigger.atom.p.value if isinstance(trigger.atom.p, NamedNode) else None
                    stratum.triggers.setdefault(predicate, []).append(trigger)
        return stratum

    # -- store access ---------------------------------------------------------------------
    def _rows(self, store: Store, query: str, graphs: list[NamedNode], stats: UpdateStats | None) -> Any:
        if stats is not None:
            stats.queries += 1
        try:
            return store.query(query, prefixes=self.prefixes, default_graph=graphs)
        except SyntaxError as exc:  # a compiler bug, not bad data: show the query
            raise SyntaxError(f"{exc} in compiled query:\n{query}") from exc

    @staticmethod
    def _in(store: Store, fact: Fact, graphs: Iterable[NamedNode]) -> bool:
        """Whether ``fact`` holds in one of ``graphs``: one scan of the fact's quads, whatever graph."""
        wanted = frozenset(graphs)
        return any(
            q.graph_name in wanted for q in store.quads_for_pattern(fact.subject, fact.predicate, fact.object)
        )

    def _heads(
        self,
        store: Store,
        rule: Rule,
        seeds: list[Binding],
        graphs: list[NamedNode],
        stats: UpdateStats | None,
        *,
        skip: BodyLiteral | None = None,
        drop_negations: bool = False,
    ) -> Iterator[Fact]:
        if isinstance(rule.body[0], Rank):  # one group: seeds never narrow it
            yield from self._top(store, rule, rule.body[0], graphs, stats)
            return
        if self._no_instance(store, rule, skip, graphs):
            return
        if seeds:  # seeded: drop the seeds a ground atom already rules out
            seeds = self._prefilter(store, rule, seeds, graphs, skip)
            if not seeds:
                return
        variables = sorted(set().union(*(head.vars for head in rule.heads)))
        for chunk in _chunks(seeds):
            query = sparql.select(
                rule, chunk, variables, skip=skip, drop_negations=drop_negations, cache=self._bodies
            )
            for row in self._rows(store, query, graphs, stats):
                for head in rule.heads:
                    if (fact := instantiate(head, row)) is not None:
                        yield fact

    def _top(
        self,
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

    def _first(
        self,
        store: Store,
        rank: Rank,
        graphs: list[NamedNode],
        stats: UpdateStats | None,
        items: Iterable[Value] | None,
    ) -> list[dict[str, Value]]:
        """The first LIMIT items' best solutions, in key order. Many items are asked in chunks, and
        the chunks' firsts again: the first of a union are among the firsts of its parts."""
        seeds = [{rank.item: item} for item in dict.fromkeys(items)] if items is not None else []
        if items is not None and not seeds:
            return []
        if len(seeds) > SEED_CHUNK:
            firsts = [
                first[rank.item]
                for chunk in _chunks(seeds)
                for first in self._first(store, rank, graphs, stats, [seed[rank.item] for seed in chunk])
            ]
            if len(firsts) < len(seeds):  # else (a limit past the chunk) the chunks gain nothing
                return self._first(store, rank, graphs, stats, firsts)
            seeds = [{rank.item: item} for item in firsts]
        out: list[dict[str, Value]] = []
        ranked: set[Value] = set()
        for row in self._rows(store, sparql.ranked(rank, seeds), graphs, stats):
            item = row[rank.item]
            if item in ranked:
                continue
            if len(ranked) >= _count(row[rank.limit]):
                break
            ranked.add(item)
            out.append({var: row[var] for var in rank.vars})
        return out

    def _no_instance(
        self, store: Store, rule: Rule, skip: BodyLiteral | None, graphs: list[NamedNode]
    ) -> bool:
        """Whether a class the body asks for (an atom ``[?x, a, :Class]``) has no instance in
        ``graphs`` at all: then the body has no solution and no query is needed. A tenant with no
        performance target never asks the target rules, whatever its KPIs do."""
        key = (id(rule), id(skip))
        atoms = self._class_atoms.get(key)
        if atoms is None:
            atoms = self._class_atoms[key] = [
                literal
                for literal in rule.body
                if isinstance(literal, Atom)
                and literal is not skip
                and literal.p == RDF_TYPE_NODE
                and isinstance(literal.o, NamedNode)
            ]
        return any(
            all(next(store.quads_for_pattern(None, atom.p, atom.o, graph), None) is None for graph in graphs)
            for atom in atoms
        )

    def _prefilter(
        self,
        store: Store,
        rule: Rule,
        seeds: list[Binding],
        graphs: list[NamedNode],
        skip: BodyLiteral | None,
    ) -> list[Binding]:
        """Drop the seeds for which an atom made ground by the seed is not a fact: no query needed.

        A new memory fires many rules (targets, budgets, conflicts) that its class or scope rules
        out at once; checking those atoms in the store costs microseconds, a query far more.
        """
        if not seeds[0]:
            return seeds
        seeded = frozenset(seeds[0])
        key = (id(rule), id(skip), seeded)
        atoms = self._ground_atoms.get(key)
        if atoms is None:
            atoms = self._ground_atoms[key] = [
                literal
                for literal in rule.body
                if isinstance(literal, Atom) and literal is not skip and literal.vars <= seeded
            ]
        if not atoms:
            return seeds
        kept = []
        for seed in seeds:
            facts = [instantiate(atom, seed) for atom in atoms]
            if all(fact is not None and self._in(store, fact, graphs) for fact in facts):
                kept.append(seed)
        return kept

    def _group_keys(
        self,
        store: Store,
        aggregate: Aggregate,
        seeds: list[Binding],
        graphs: list[NamedNode],
        stats: UpdateStats | None,
    ) -> list[Binding]:
        if not aggregate.group:
            return [{}]
        if seeds and all(all(var in seed for var in aggregate.group) for seed in seeds):
            return sparql.project(seeds, aggregate.group)
        keys = [
            {var: row[var] for var in aggregate.group}
            for chunk in _chunks(seeds)
            for row in self._rows(store, sparql.group_keys(aggregate, chunk), graphs, stats)
        ]
        return sparql.project(keys, aggregate.group) if len(seeds) > SEED_CHUNK else keys

    # -- from scratch ---------------------------------------------------------------------
    def materialize(self, store: Store, graphs: Graphs) -> int:
        """Recompute every inferred fact into ``graphs.inferred`` from the base facts alone."""
        started = time.monotonic()
        store.remove_graph(graphs.inferred)  # a no-op when absent; named_graphs() would scan the store
        total = 0
        for stratum in self.strata:
            while True:
                new: set[Fact] = set()
                for rule in stratum.rules:
                    for fact in self._heads(store, rule, [], graphs.current, None):
                        if fact not in new and not self._in(store, fact, graphs.current):
                            new.add(fact)
                if not new:
                    break
                store.extend(Quad(fact.subject, fact.predicate, fact.object, graphs.inferred) for fact in new)
                total += len(new)
                if not stratum.recursive:
                    break
        log.debug("materialised %d facts in %.3fs", total, time.monotonic() - started)
        return total

    # -- incremental ----------------------------------------------------------------------
    def update(
        self, store: Store, graphs: Graphs, added: Iterable[Fact], removed: Iterable[Fact]
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
        self,
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
        self, store: Store, graphs: Graphs, trigger: _Trigger, seeds: list[Binding], stats: UpdateStats
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

    def _rerank(
        self,
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

    def _rederive(
        self, store: Store, graphs: Graphs, strata: list[_Stratum], candidates: list[Fact], stats: UpdateStats
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
        self, store: Store, graphs: Graphs, stratum: _Stratum, fact: Fact, stats: UpdateStats
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
        self,
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
        self, store: Store, graphs: Graphs, trigger: _Trigger, seeds: list[Binding], stats: UpdateStats
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

    # -- explanations ---------------------------------------------------------------------
    def explain(self, store: Store, graphs: Graphs, fact: Fact, *, depth: int = 4) -> list[Derivation]:
        """Which rules derive ``fact`` now, from which facts (inferred inputs explained in turn)."""
        derivations = []
        for stratum in self.strata:
            for rule, head in stratum.heads:
                seed = unify(head, fact)
                if seed is None:
                    continue
                query = f"SELECT * WHERE {{\n{sparql.where_clause(rule, [seed])}\n}} LIMIT 1"
                result = self._rows(store, query, graphs.current, None)
                variables = [var.value for var in result.variables]
                for row in result:
                    bindings = {**seed, **{var: row[var] for var in variables if row[var] is not None}}
                    inputs = []
                    for atom, negative in body_atoms(rule):
                        if negative:
                            continue
                        read = instantiate(atom, bindings)
                        if read is None:
                            continue
                        asserted = self._in(store, read, graphs.base)
                        because = (
                            tuple(self.explain(store, graphs, read, depth=depth - 1))
                            if not asserted and depth > 0
                            else ()
                        )
                        inputs.append(DerivationInput(read, asserted, because))
                    derivations.append(Derivation(rule, bindings, tuple(inputs)))
        return derivations


def _readers(strata: list[_Stratum]) -> dict[str | None, tuple[int, ...]]:
    """By predicate IRI, the strata (levels) with an atom that can match a fact of it (and a RANK
    stratum, facts like its heads: an asserted one changes its top); under None, those with an
    atom whose predicate is a variable (they read every fact)."""
    anywhere = [level for level, stratum in enumerate(strata) if None in stratum.triggers]
    readers: dict[str | None, list[int]] = {None: anywhere}
    for level, stratum in enumerate(strata):
        heads = [head.p.value for _, head in stratum.heads if isinstance(head.p, NamedNode)]
        for predicate in [*stratum.triggers, *(heads if stratum.rank is not None else ())]:
            if predicate is not None:
                readers.setdefault(predicate, list(anywhere)).append(level)
    return {predicate: tuple(sorted(set(levels))) for predicate, levels in readers.items()}


class _Routes:
    """An update's changed facts sorted by the strata that read them, each fact once, so a stratum
    scans the changes it can fire on, not every change so far (a batch's run of a tenant changes
    hundreds of facts, and there are dozens of strata)."""

    def __init__(self, readers: Mapping[str | None, tuple[int, ...]]) -> None:
        self.readers = readers
        self.routed: dict[tuple[int, int], list[Fact]] = {}  # (id of the list, level) -> facts
        self.seen: dict[int, int] = {}  # id of the list -> how many of it are routed

    def at(self, facts: list[Fact], level: int) -> list[Fact]:
        """The facts of ``facts`` (only ever appended to) that stratum ``level`` reads, in order."""
        key, anywhere = id(facts), self.readers[None]
        for fact in facts[self.seen.get(key, 0) :]:
            for reader in self.readers.get(fact.predicate.value, anywhere):
                if reader >= level:
                    self.routed.setdefault((key, reader), []).append(fact)
        self.seen[key] = len(facts)
        return self.routed.get((key, level), [])

    def still(self, ever: list[Fact], now: list[Fact], level: int) -> list[Fact]:
        """Those of ``ever`` that stratum ``level`` reads and that are in ``now``, once each."""
        current = set(now)
        return [fact for fact in dict.fromkeys(self.at(ever, level)) if fact in current]


def _chunks(seeds: list[Binding]) -> Iterator[list[Binding]]:
    """The seeds SEED_CHUNK at a time; no seed at all is one unseeded query."""
    if not seeds:
        yield seeds
    for start in range(0, len(seeds), SEED_CHUNK):
        yield seeds[start : start + SEED_CHUNK]


def _count(value: Value | None) -> int:
    """A RANK's limit as a number of positions: none when it is not a number."""
    try:
        return max(0, int(float(value.value))) if isinstance(value, Literal) else 0
    except (ValueError, OverflowError):  # not a number, or an infinite one
        return 0


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
