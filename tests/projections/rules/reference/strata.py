"""A stratified program compiled for incremental evaluation: which rules a changed fact can fire.

Each stratum indexes its rules' body atoms by predicate (a changed fact finds the triggers it can
fire without scanning every rule), and ``_Routes`` sorts an update's changed facts by the strata
that read them. Matching a fact to an atom (``unify``) and back (``instantiate``) live here too.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from engram.projections.rules import compile as sparql
from engram.projections.rules.compile import Binding, Value
from engram.projections.rules.program import RDF_TYPE, Aggregate, Atom, Negation, Rank, Rule, Var
from engram.projections.rules.stratify import body_atoms, unifiable
from pyoxigraph import BlankNode, Literal, NamedNode, QuerySolution, Triple

RDF_TYPE_NODE = NamedNode(RDF_TYPE)


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


def index_stratum(rules: list[Rule]) -> _Stratum:
    """The stratum's rules indexed by the predicates (and objects) that can fire them."""
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
