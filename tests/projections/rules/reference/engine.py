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

This module holds the engine and the queries every step asks; the steps live beside it:
``strata`` (the program indexed by what fires it), ``incremental`` (overdelete, rederive,
insert), ``rank`` (RANK strata) and ``derivations`` (``explain``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from typing import Any

from engram.projections.rules import compile as sparql
from engram.projections.rules.compile import Binding, Value
from engram.projections.rules.program import Aggregate, Atom, BodyLiteral, Program, Rank, Rule
from engram.projections.rules.stratify import stratify
from pyoxigraph import Literal, NamedNode, Quad, Store

from tests.projections.rules.reference.derivations import Derivation, DerivationInput, Explaining
from tests.projections.rules.reference.incremental import Incremental
from tests.projections.rules.reference.rank import Ranking, _check_ranks
from tests.projections.rules.reference.strata import (
    RDF_TYPE_NODE,
    Fact,
    Graphs,
    UpdateStats,
    _readers,
    index_stratum,
    instantiate,
)

log = logging.getLogger(__name__)

# Seeds per query. Past about a thousand VALUES rows oxigraph joins each pattern whole (on a
# 100k-memory tenant 2,000 seeds took 1.9 s, the same seeds in chunks of 200 9 ms), so a query
# never gets more: a tenant's long run of a batch is asked in chunks.
SEED_CHUNK = 256


__all__ = ["Derivation", "DerivationInput", "Fact", "Graphs", "RuleEngine", "UpdateStats"]


class RuleEngine(Incremental, Ranking, Explaining):
    """A stratified program over a store: ``materialize`` from scratch, ``update`` incrementally
    (``incremental``), RANK strata by difference (``rank``), ``explain`` a derived fact
    (``derivations``). This module holds the queries all of them ask."""

    def __init__(self, program: Program) -> None:
        _check_ranks(program.rules)
        self.program = program
        self.prefixes = dict(program.prefixes)
        self.strata = [index_stratum(rules) for rules in stratify(program.rules)]
        self._readers = _readers(self.strata)
        self._bodies: sparql.BodyCache = {}
        # (rule id, skipped literal id, seeded variables) -> the atoms a seed makes ground
        self._ground_atoms: dict[tuple[int, int, frozenset[str]], list[Atom]] = {}
        # (rule id, skipped literal id) -> the atoms that name a class
        self._class_atoms: dict[tuple[int, int], list[Atom]] = {}

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
    def reasoner(self) -> RuleEngine:
        return self  # stateless, as the engine it was

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
