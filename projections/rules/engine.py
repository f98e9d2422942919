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

The cost follows the facts touched, not the size of the store. ``materialize`` computes the
same result from scratch and is what the tests compare against after every step.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from pyoxigraph import BlankNode, Literal, NamedNode, Quad, QueryBoolean, Store, Triple

from projections.rules import compile as sq
from projections.rules.stratify import body_atoms, stratify, unifiable
from projections.rules.syntax import Aggregate, Atom, Negation, Program, Rule, Var

log = logging.getLogger(__name__)

Fact = Triple
Seed = dict[str, Any]


@dataclass(frozen=True)
class Graphs:
    """Which named graphs hold base facts, inferred facts and (during an update) removed ones."""

    base: tuple[NamedNode, ...]
    inferred: NamedNode
    removed: NamedNode

    @property
    def new(self) -> list[NamedNode]:
        return [*self.base, self.inferred]

    @property
    def union(self) -> list[NamedNode]:
        return [*self.base, self.inferred, self.removed]


@dataclass(frozen=True)
class _Trigger:
    rule: Rule
    literal: object  # the body literal (Atom, Negation or Aggregate) the fact matches
    atom: Atom
    kind: str  # "pos", "neg" or "agg"
    locals: frozenset[str] = frozenset()


@dataclass
class UpdateStats:
    added: int = 0
    removed: int = 0
    rederived: int = 0
    queries: int = 0
    seconds: float = 0.0


@dataclass
class _Stratum:
    rules: list[Rule]
    triggers: dict[str | None, list[_Trigger]] = field(default_factory=dict)
    heads: list[tuple[Rule, Atom]] = field(default_factory=list)

    @property
    def aggregate_only(self) -> bool:
        """Every rule here is an AGGREGATE rule: insertion recomputes each group it over-deleted."""
        return all(any(isinstance(lit, Aggregate) for lit in rule.body) for rule in self.rules)

    @property
    def recursive(self) -> bool:
        """Whether a rule here reads what a rule here produces (else one pass reaches the fixpoint)."""
        atoms = [atom for rule in self.rules for atom, _ in body_atoms(rule)]
        return any(unifiable(head, atom) for _, head in self.heads for atom in atoms)

    def matches(self, fact: Fact, kinds: tuple[str, ...]) -> Iterator[tuple[_Trigger, Seed]]:
        for key in (fact.predicate.value, None):
            for trig in self.triggers.get(key, ()):
                if trig.kind in kinds and (seed := unify(trig.atom, fact)) is not None:
                    yield trig, seed

    def triggered(self, *, positive: list[Fact], negative: list[Fact]) -> list[tuple[_Trigger, Seed]]:
        """Triggers fired by facts read positively, and by facts read under NOT; both fire aggregates."""
        pending = [m for fact in positive for m in self.matches(fact, ("pos", "agg"))]
        return pending + [m for fact in negative for m in self.matches(fact, ("neg", "agg"))]

    def produces(self, fact: Fact) -> bool:
        return any(unify(head, fact) is not None for _, head in self.heads)


def _seedable(seed: Seed) -> bool:
    return not any(isinstance(value, BlankNode) for value in seed.values())


def unify(atom: Atom, fact: Fact) -> Seed | None:
    seed: Seed = {}
    for term, value in zip(atom.terms, (fact.subject, fact.predicate, fact.object), strict=True):
        if isinstance(term, Var):
            if seed.setdefault(term.name, value) != value:
                return None
        elif term != value:
            return None
    return seed


def instantiate(atom: Atom, row: Any) -> Fact | None:
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
        self.program = program
        self.prefixes = dict(program.prefixes)
        self.strata = [self._index(rules) for rules in stratify(program.rules)]
        self._bodies: sq.BodyCache = {}
        self._ground: dict[tuple[int, int, frozenset[str]], list[Atom]] = {}

    @staticmethod
    def _index(rules: list[Rule]) -> _Stratum:
        stratum = _Stratum(rules)
        for rule in rules:
            stratum.heads += [(rule, h) for h in rule.heads]
            for lit in rule.body:
                match lit:
                    case Atom():
                        trigs = [_Trigger(rule, lit, lit, "pos")]
                    case Negation():
                        locals_ = sq.negation_locals(rule, lit)
                        trigs = [_Trigger(rule, lit, a, "neg", locals_) for a in lit.atoms]
                    case Aggregate():
                        trigs = [_Trigger(rule, lit, a, "agg") for a in lit.atoms]
                    case _:
                        trigs = []
                for trig in trigs:
                    key = trig.atom.p.value if isinstance(trig.atom.p, NamedNode) else None
                    stratum.triggers.setdefault(key, []).append(trig)
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
        return any(Quad(fact.subject, fact.predicate, fact.object, g) in store for g in graphs)

    def _heads(
        self,
        store: Store,
        rule: Rule,
        seeds: list[Seed],
        graphs: list[NamedNode],
        stats: UpdateStats | None,
        **options: Any,
    ) -> Iterator[Fact]:
        if seeds:  # seeded: drop the seeds a ground atom already rules out
            seeds = self._prefilter(store, rule, seeds, graphs, options.get("skip"))
            if not seeds:
                return
        variables = sorted(set().union(*(h.vars for h in rule.heads)))
        query = sq.select(rule, seeds, variables, cache=self._bodies, **options)
        for row in self._rows(store, query, graphs, stats):
            for head in rule.heads:
                if (fact := instantiate(head, row)) is not None:
                    yield fact

    def _prefilter(
        self, store: Store, rule: Rule, seeds: list[Seed], graphs: list[NamedNode], skip: object
    ) -> list[Seed]:
        """Drop the seeds for which an atom made ground by the seed is not a fact: no query needed.

        A new memory fires many rules (targets, budgets, conflicts) that its class or scope rules
        out at once; checking those atoms in the store costs microseconds, a query far more.
        """
        if not seeds[0]:
            return seeds
        key = (id(rule), id(skip), frozenset(seeds[0]))
        atoms = self._ground.get(key)
        if atoms is None:
            atoms = self._ground[key] = [
                lit for lit in rule.body if isinstance(lit, Atom) and lit is not skip and lit.vars <= key[2]
            ]
        if not atoms:
            return seeds
        kept = []
        for seed in seeds:
            facts = [instantiate(atom, seed) for atom in atoms]
            if all(f is not None and self._in(store, f, graphs) for f in facts):
                kept.append(seed)
        return kept

    def _group_keys(
        self,
        store: Store,
        agg: Aggregate,
        seeds: list[Seed],
        graphs: list[NamedNode],
        stats: UpdateStats | None,
    ) -> list[Seed]:
        if not agg.group:
            return [{}]
        if seeds and all(all(g in seed for g in agg.group) for seed in seeds):
            return sq.project(seeds, agg.group)  # type: ignore[return-value]
        rows = self._rows(store, sq.group_keys(agg, seeds), graphs, stats)
        return [{g: row[g] for g in agg.group} for row in rows]

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
                    for fact in self._heads(store, rule, [], graphs.new, None):
                        if fact not in new and not self._in(store, fact, graphs.new):
                            new.add(fact)
                if not new:
                    break
                store.extend(Quad(f.subject, f.predicate, f.object, graphs.inferred) for f in new)
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
        removed = [f for f in dict.fromkeys(removed) if not self._in(store, f, graphs.base)]
        adds: list[Fact] = []
        for fact in dict.fromkeys(added):
            q = Quad(fact.subject, fact.predicate, fact.object, inferred)
            if q in store:
                store.remove(q)  # now asserted: it held already, so nothing changes
            else:
                adds.append(fact)
        store.extend(Quad(f.subject, f.predicate, f.object, scratch) for f in removed)
        dels = list(removed)
        try:
            for i, stratum in enumerate(self.strata):
                overdeleted = self._overdelete(store, graphs, stratum, adds, dels, stats)
                # A pattern may be produced by rules in several strata: whatever was deleted and
                # this stratum can produce is a candidate, and rederivation may use any rule of
                # this or a lower stratum (those are final by now).
                # Aggregate heads of over-deleted groups are recomputed by the insertion below,
                # so asking each one again (a whole aggregate apiece) would be wasted.
                mine = [] if stratum.aggregate_only else overdeleted
                candidates = mine + [f for f in dels if stratum.produces(f)]
                self._rederive(store, graphs, self.strata[: i + 1], candidates, stats)
                dels = [f for f in dict.fromkeys(dels + overdeleted) if not self._in(store, f, graphs.new)]
                self._insert(store, graphs, stratum, adds, dels, stats)
        finally:
            store.remove_graph(scratch)
        stats.seconds = time.monotonic() - started
        return stats

    @staticmethod
    def _by_trigger(pairs: Iterable[tuple[_Trigger, Seed]]) -> dict[int, tuple[_Trigger, list[Seed]]]:
        """Seeds grouped per trigger, so one query serves every fact that fired it."""
        out: dict[int, tuple[_Trigger, list[Seed]]] = {}
        for trig, seed in pairs:
            if trig.kind == "neg":
                seed = {k: v for k, v in seed.items() if k not in trig.locals}
            out.setdefault(id(trig), (trig, []))[1].append(seed)
        return out

    def _overdelete(
        self,
        store: Store,
        graphs: Graphs,
        stratum: _Stratum,
        adds: list[Fact],
        dels: list[Fact],
        stats: UpdateStats,
    ) -> list[Fact]:
        # what lost a fact it read positively, or gained one it reads under NOT, may lose support
        pending = stratum.triggered(positive=dels, negative=adds)
        gone: list[Fact] = []
        seen: set[Fact] = set()
        while pending:
            rounds, pending = self._by_trigger(pending), []
            for trig, seeds in rounds.values():
                for fact in list(self._candidates(store, graphs, trig, seeds, stats)):
                    q = Quad(fact.subject, fact.predicate, fact.object, graphs.inferred)
                    if fact in seen or q not in store:
                        continue
                    seen.add(fact)
                    store.remove(q)
                    store.add(Quad(fact.subject, fact.predicate, fact.object, graphs.removed))
                    gone.append(fact)
                    stats.removed += 1
                    pending += stratum.matches(fact, ("pos", "agg"))
        return gone

    def _candidates(
        self, store: Store, graphs: Graphs, trig: _Trigger, seeds: list[Seed], stats: UpdateStats
    ) -> Iterator[Fact]:
        """Inferred facts whose derivation may have used the triggering facts (an over-estimate)."""
        rule = trig.rule
        if not all(map(_seedable, seeds)):  # blank nodes cannot go in VALUES: every derivation
            if trig.kind == "agg":
                seeds = []
            else:
                yield from self._heads(store, rule, [], graphs.union, stats, drop_negations=True)
                return
        if trig.kind == "agg":
            assert isinstance(trig.literal, Aggregate)
            for key in self._group_keys(store, trig.literal, seeds, graphs.union, stats):
                for head in rule.heads:
                    pattern = [key.get(t.name) if isinstance(t, Var) else t for t in head.terms]
                    for q in store.quads_for_pattern(*pattern, graphs.inferred):
                        yield Triple(q.subject, q.predicate, q.object)
            return
        yield from self._heads(
            store, rule, seeds, graphs.union, stats, skip=trig.literal, drop_negations=True
        )

    def _rederive(
        self, store: Store, graphs: Graphs, strata: list[_Stratum], candidates: list[Fact], stats: UpdateStats
    ) -> None:
        pending = list(dict.fromkeys(candidates))
        progress = True
        while pending and progress:
            progress = False
            for fact in list(pending):
                if self._in(store, fact, graphs.new):
                    pending.remove(fact)
                elif any(self._derivable(store, graphs, st, fact, stats) for st in strata):
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
            if not _seedable(seed):
                if fact in set(self._heads(store, rule, [], graphs.new, stats)):
                    return True
                continue
            result = self._rows(store, sq.ask(rule, [seed], self._bodies), graphs.new, stats)
            if isinstance(result, QueryBoolean) and bool(result):
                return True
        return False

    def _insert(
        self,
        store: Store,
        graphs: Graphs,
        stratum: _Stratum,
        adds: list[Fact],
        dels: list[Fact],
        stats: UpdateStats,
    ) -> None:
        # what gained a fact it reads positively, or lost one it reads under NOT, may gain a head
        pending = stratum.triggered(positive=adds, negative=dels)
        while pending:
            rounds, pending = self._by_trigger(pending), []
            for trig, seeds in rounds.values():
                for fact in list(self._derived(store, graphs, trig, seeds, stats)):
                    if self._in(store, fact, graphs.new):
                        continue
                    store.add(Quad(fact.subject, fact.predicate, fact.object, graphs.inferred))
                    adds.append(fact)
                    stats.added += 1
                    pending += stratum.matches(fact, ("pos", "agg"))

    def _derived(
        self, store: Store, graphs: Graphs, trig: _Trigger, seeds: list[Seed], stats: UpdateStats
    ) -> Iterator[Fact]:
        rule = trig.rule
        if not all(map(_seedable, seeds)):  # blank nodes cannot go in VALUES: evaluate unseeded
            seeds = []
        if trig.kind == "agg":
            assert isinstance(trig.literal, Aggregate)
            keys = self._group_keys(store, trig.literal, seeds, graphs.union, stats)
            if keys and not all(map(_seedable, keys)):
                keys = [{}]
            if keys:
                yield from self._heads(store, rule, keys, graphs.new, stats)
            return
        yield from self._heads(store, rule, seeds, graphs.new, stats)

    # -- explanations ---------------------------------------------------------------------
    def explain(self, store: Store, graphs: Graphs, fact: Fact, *, depth: int = 4) -> list[dict[str, Any]]:
        """Which rules derive ``fact`` now, from which facts (inferred inputs explained in turn)."""
        out = []
        for stratum in self.strata:
            for rule, head in stratum.heads:
                seed = unify(head, fact)
                if seed is None:
                    continue
                query = f"SELECT * WHERE {{\n{sq.where_clause(rule, [seed])}\n}} LIMIT 1"
                result = self._rows(store, query, graphs.new, None)
                names = [v.value for v in result.variables]
                for row in result:
                    bindings = {**seed, **{n: row[n] for n in names if row[n] is not None}}
                    inputs = []
                    for atom, negative in body_atoms(rule):
                        if negative:
                            continue
                        inp = instantiate(atom, bindings)
                        if inp is None:
                            continue
                        asserted = self._in(store, inp, graphs.base)
                        entry: dict[str, Any] = {"fact": inp, "asserted": asserted}
                        if not asserted and depth > 0:
                            entry["because"] = self.explain(store, graphs, inp, depth=depth - 1)
                        inputs.append(entry)
                    out.append({"rule": rule, "bindings": bindings, "inputs": inputs})
        return out
