"""The rules run by the compiled core (``engram._core``, the Rust crate in ``core/``).

The program is parsed here as always (``syntax``) and handed to the core as data: a new derived
status is still a rule file and a shape. Each tenant's graph keeps a :class:`CoreReasoner`: the
facts its rules read, interned, and a count of derivations per derived fact, so an update costs
the derivations the batch touches. The store stays the read model: it receives the inferred
facts gained and lost, and ``explain`` reads them there (as the Python engine does).

``ENGRAM_RULE_ENGINE=reference`` runs the Python engine (``engine.RuleEngine``) instead; it is
also what a program the core does not evaluate (a SPARQL function it does not know, say) falls
back to, with a warning.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable
from typing import Any

from engram.projections.rules.derivations import Derivation
from engram.projections.rules.engine import RuleEngine
from engram.projections.rules.program import (
    Aggregate,
    Atom,
    Bind,
    Filter,
    Negation,
    Program,
    Rank,
    Rule,
    Term,
    Var,
    body_atoms,
)
from engram.projections.rules.strata import Fact, Graphs, UpdateStats
from pyoxigraph import BlankNode, Literal, NamedNode, Quad, Store, Triple

log = logging.getLogger(__name__)

Key = tuple[int, str, str, str]  # (0 IRI | 1 blank node | 2 literal, value, datatype, language)

try:
    from engram import _core
except ImportError as exc:  # not built: ./dev and `pip install .` build it (README: the toolchain)
    _core = None
    IMPORT_ERROR: str | None = str(exc)
else:
    IMPORT_ERROR = None


class Unsupported(ValueError):
    """A program the core does not evaluate (the reason says what)."""


def _term_data(term: Term) -> dict[str, Any]:
    if isinstance(term, Var):
        return {"v": term.name}
    return {"t": key(term)}


def _atom_data(atom: Atom) -> list[dict[str, Any]]:
    return [_term_data(t) for t in atom.terms]


def _rule_data(rule: Rule) -> dict[str, Any]:
    body: list[dict[str, Any]] = []
    for literal in rule.body:
        match literal:
            case Atom():
                body.append({"atom": _atom_data(literal)})
            case Negation():
                atoms = [_atom_data(a) for a in literal.atoms]
                body.append({"not": atoms, "declared": sorted(literal.declared_local)})
            case Filter():
                body.append({"filter": literal.expr})
            case Bind():
                body.append({"bind": literal.expr, "var": literal.var})
            case Rank():
                body.append(
                    {
                        "rank": {
                            "atoms": [_atom_data(a) for a in literal.atoms],
                            "filters": [f.expr for f in literal.filters],
                            "item": literal.item,
                            "keys": list(literal.keys),
                            "var": literal.var,
                            "limit": literal.limit,
                        }
                    }
                )
            case Aggregate():
                outputs = [
                    {"func": o.func, "expr": o.expr, "var": o.var, "distinct": o.distinct}
                    for o in literal.outputs
                ]
                body.append(
                    {
                        "aggregate": {
                            "atoms": [_atom_data(a) for a in literal.atoms],
                            "filters": [f.expr for f in literal.filters],
                            "group": list(literal.group),
                            "outputs": outputs,
                        }
                    }
                )
    return {"source": rule.source, "heads": [_atom_data(h) for h in rule.heads], "body": body}


def program_data(program: Program) -> str:
    """The program as the core reads it (JSON)."""
    return json.dumps(
        {
            "prefixes": sorted(program.prefixes.items()),
            "rules": [_rule_data(rule) for rule in program.rules],
        }
    )


def key(term: Any) -> Key:
    kind = type(term)
    if kind is NamedNode:
        return (0, term.value, "", "")
    if kind is Literal:
        return (2, term.value, term.datatype.value, term.language or "")
    if kind is BlankNode:
        return (1, term.value, "", "")
    raise TypeError(f"not a term the rules read: {term!r}")


def term(k: Key) -> Any:
    kind, value, datatype, language = k
    if kind == 0:
        return NamedNode(value)
    if kind == 1:
        return BlankNode(value)
    if language:
        return Literal(value, language=language)
    return Literal(value, datatype=NamedNode(datatype))


def _triple(k: tuple[Key, Key, Key]) -> Triple:
    return Triple(term(k[0]), term(k[1]), term(k[2]))


class CoreEngine:
    """A program run by the core, with the surface of :class:`~engine.RuleEngine`: ``materialize``
    and ``update`` over a store (a tenant's graph keeps a ``reasoner()`` instead, whose state
    lives between updates), and ``explain``, answered by the Python engine from the store."""

    def __init__(self, program: Program, reference: RuleEngine | None = None) -> None:
        if _core is None:
            raise Unsupported(f"the compiled core is not built ({IMPORT_ERROR})")
        self.program = program
        self.prefixes = dict(program.prefixes)
        self.reference = reference or RuleEngine(program)
        try:
            self.compiled = _core.Program(program_data(program))
        except ValueError as exc:
            raise Unsupported(str(exc)) from exc
        preds: set[str] = set()
        everything = False
        for rule in program.rules:
            for atom in [*body_atoms(rule), *rule.heads]:
                if isinstance(atom.p, NamedNode):
                    preds.add(atom.p.value)
                else:
                    everything = True
        # the predicates whose facts the rules read or conclude (None: any): the rest never cross
        self.reads: frozenset[str] | None = None if everything else frozenset(preds)

    def reasoner(self) -> CoreReasoner:
        return CoreReasoner(self)

    def materialize(self, store: Store, graphs: Graphs) -> int:
        return self.reasoner().materialize(store, graphs)

    def update(
        self, store: Store, graphs: Graphs, added: Iterable[Fact], removed: Iterable[Fact]
    ) -> UpdateStats:
        """Without a kept state: derived again from the store (its base already holds the change)."""
        return self.reasoner().update(store, graphs, added, removed)

    def explain(self, store: Store, graphs: Graphs, fact: Triple, *, depth: int = 4) -> list[Derivation]:
        return self.reference.explain(store, graphs, fact, depth=depth)

    def relevant(self, facts: Iterable[Fact]) -> list[tuple[Key, Key, Key]]:
        reads = self.reads
        return [
            (key(f.subject), key(f.predicate), key(f.object))
            for f in facts
            if reads is None or f.predicate.value in reads
        ]


class CoreReasoner:
    """One graph's state in the core: the base facts its rules read and what they derive."""

    def __init__(self, engine: CoreEngine) -> None:
        self.engine = engine
        self.state: Any = None

    def _loaded(self, store: Store, graphs: Graphs) -> Any:
        """A state holding the base facts the rules read, read predicate by predicate (a tenant's
        base is mostly facts no rule reads: 1.8M quads at 100k memories, 0.6M of them read)."""
        assert _core is not None
        state = _core.State(self.engine.compiled)
        reads = self.engine.reads
        for graph in graphs.base:
            if reads is None:
                quads = store.quads_for_pattern(None, None, None, graph)
                core_call(state.load, self.engine.relevant(q.triple for q in quads))
                continue
            for predicate in sorted(reads):
                quads = store.quads_for_pattern(None, NamedNode(predicate), None, graph)
                core_call(state.load, [(key(q.subject), key(q.predicate), key(q.object)) for q in quads])
        return state

    def materialize(self, store: Store, graphs: Graphs) -> int:
        """Every inferred fact again, from the base facts alone, into ``graphs.inferred``."""
        started = time.monotonic()
        self.state = None
        state = self._loaded(store, graphs)
        inferred = core_call(state.materialize)
        store.remove_graph(graphs.inferred)
        # the bulk loader, not a transaction: a re-materialisation is marked stale until it is done
        # (``TenantGraph._rematerialize``), so a crash part-way is re-materialised again on open
        quads = (Quad(*_triple(f), graphs.inferred) for f in inferred)  # type: ignore[misc]
        (store.bulk_extend if len(inferred) > 10_000 else store.extend)(quads)
        self.state = state
        log.debug("materialised %d facts in %.3fs (core)", len(inferred), time.monotonic() - started)
        return len(inferred)

    def update(
        self, store: Store, graphs: Graphs, added: Iterable[Fact], removed: Iterable[Fact]
    ) -> UpdateStats:
        """Bring ``graphs.inferred`` up to date after base facts (already committed) changed."""
        stats, started = UpdateStats(), time.monotonic()
        # a fact removed from the asserted graph but still in the ontology is not gone
        gone = [fact for fact in dict.fromkeys(removed) if not RuleEngine._in(store, fact, graphs.base)]
        plus_facts, gone_facts = self.engine.relevant(added), self.engine.relevant(gone)
        state, self.state = self.state, None  # kept again only once the update went through
        if state is None:
            # first use since the store opened: a state of the base as it is now (the change in
            # it), taken back to the base before the change, which the stored inferences were
            # derived from (``TenantGraph`` re-materialises instead when they were not current),
            # then forward again: the change's difference, without reading the inferred graph
            state = self._loaded(store, graphs)
            core_call(state.settle)
            core_call(state.update, gone_facts, plus_facts)
        plus, minus = core_call(state.update, plus_facts, gone_facts)
        self.state = state
        gained, lost = [_triple(f) for f in plus], [_triple(f) for f in minus]
        for fact in lost:
            store.remove(Quad(fact.subject, fact.predicate, fact.object, graphs.inferred))
        store.extend(Quad(fact.subject, fact.predicate, fact.object, graphs.inferred) for fact in gained)
        stats.added, stats.removed = len(gained), len(lost)
        stats.seconds = time.monotonic() - started
        return stats

    def stats(self) -> dict[str, int]:
        """The state's size: facts held (base and derived), derived facts, terms, bytes (estimated)."""
        if self.state is None:
            return {"facts": 0, "derived": 0, "terms": 0, "bytes": 0}
        facts, derived, terms, size = self.state.stats()
        return {"facts": facts, "derived": derived, "terms": terms, "bytes": size}


def core_call(method: Any, *args: Any) -> Any:
    """A call into the core; a panic there (a bug: a derivation count below zero, say) comes out as
    a RuntimeError (which a graph answers by re-materialising, the live path by planning in Python),
    not as a BaseException that would end the process."""
    try:
        return method(*args)
    except Exception:
        raise
    except BaseException as exc:
        if type(exc).__name__ != "PanicException":
            raise
        raise RuntimeError(f"the rule core failed: {exc}") from exc


def engine_for(program: Program, choice: str = "core") -> RuleEngine | CoreEngine:
    """The engine ``choice`` names; the Python one when the core is not built or refuses the
    program (logged: the rules still run, slower)."""
    reference = RuleEngine(program)
    if choice == "reference":
        return reference
    try:
        return CoreEngine(program, reference)
    except Unsupported as exc:
        log.warning("the rules run on the Python engine: %s", exc)
        return reference


__all__ = ["CoreEngine", "CoreReasoner", "Unsupported", "engine_for"]
