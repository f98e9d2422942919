"""The rules' abstract syntax: atoms, body literals, rules and the program they form.

What the parser (``syntax``) builds and the stratifier, compiler and engine read; kept apart so
those read a small model, not a parser.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from engram.schemas import vocabulary as v
from pyoxigraph import Literal, NamedNode

RDF_TYPE = v.RDF_TYPE
XSD = v.XSD
DEFAULT_PREFIXES = {
    "rdf": "http://www.w3.org/1999/02/22-rdf-syntax-ns#",
    "rdfs": "http://www.w3.org/2000/01/rdf-schema#",
    "owl": "http://www.w3.org/2002/07/owl#",
    "xsd": XSD,
}
AGGREGATES = ("COUNT", "SUM", "MIN", "MAX")


class RuleSyntaxError(ValueError):
    """A rule file that cannot be parsed; the message names the file and line."""


@dataclass(frozen=True)
class Var:
    name: str

    def __str__(self) -> str:
        return f"?{self.name}"


Term = Var | NamedNode | Literal


@dataclass(frozen=True)
class Atom:
    s: Term
    p: Term
    o: Term

    @property
    def terms(self) -> tuple[Term, Term, Term]:
        return (self.s, self.p, self.o)

    @property
    def vars(self) -> frozenset[str]:
        return frozenset(t.name for t in self.terms if isinstance(t, Var))


@dataclass(frozen=True)
class Negation:
    atoms: tuple[Atom, ...]
    declared_local: frozenset[str] = frozenset()  # NOT EXISTS ?v… IN: local even if used outside


@dataclass(frozen=True)
class Filter:
    expr: str
    vars: frozenset[str]


@dataclass(frozen=True)
class Bind:
    expr: str
    var: str
    vars: frozenset[str]


@dataclass(frozen=True)
class AggregateOutput:
    func: str
    expr: str
    var: str
    distinct: bool = False


@dataclass(frozen=True)
class Aggregate:
    atoms: tuple[Atom, ...]
    filters: tuple[Filter, ...]
    group: tuple[str, ...]
    outputs: tuple[AggregateOutput, ...]


@dataclass(frozen=True)
class Rank:
    """The first ``limit`` items of the atoms' solutions in ``keys`` order, each at its position.

    Only the top is derived, so a new item changes at most ``limit`` facts, where a rank counted
    per item (an AGGREGATE) changes every item it outranks and costs O(items) each.
    """

    atoms: tuple[Atom, ...]
    filters: tuple[Filter, ...]
    item: str  # what is ranked: one position per value, its best solution
    keys: tuple[str, ...]  # SPARQL ORDER BY conditions, first decides
    var: str  # the position, 1 for the first
    limit: str  # a variable the atoms bind: how many positions are derived

    @property
    def vars(self) -> frozenset[str]:
        return frozenset().union(*(atom.vars for atom in self.atoms))


BodyLiteral = Atom | Negation | Filter | Bind | Aggregate | Rank


@dataclass(frozen=True)
class Rule:
    heads: tuple[Atom, ...]
    body: tuple[BodyLiteral, ...]
    source: str  # file:line, names the rule in errors and explanations
    text: str
    explain: str | None = None

    @property
    def positive_vars(self) -> frozenset[str]:
        """Variables a body binds: positive atoms, BIND targets, aggregate groups and outputs."""
        bound: set[str] = set()
        for literal in self.body:
            match literal:
                case Atom():
                    bound |= literal.vars
                case Bind():
                    bound.add(literal.var)
                case Aggregate():
                    bound |= set(literal.group) | {output.var for output in literal.outputs}
                case Rank():
                    bound |= literal.vars | {literal.var}
        return frozenset(bound)


@dataclass
class Program:
    rules: list[Rule] = field(default_factory=list)
    prefixes: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_PREFIXES))


_VAR_IN_EXPR = re.compile(r"\?([A-Za-z_][A-Za-z0-9_]*)")
_STRING_IN_EXPR = re.compile(r'"(?:[^"\\]|\\.)*"')


def expr_vars(expr: str) -> frozenset[str]:
    return frozenset(_VAR_IN_EXPR.findall(_STRING_IN_EXPR.sub("", expr)))


def check_safe(rule: Rule) -> None:
    """A rule every variable of which is bound where it is used; RuleSyntaxError otherwise."""
    bound = rule.positive_vars
    for head in rule.heads:
        if missing := head.vars - bound:
            raise RuleSyntaxError(
                f"{rule.source}: head variables {_names(missing)} are not bound by the body"
            )
    atom_vars = frozenset().union(*(literal.vars for literal in rule.body if isinstance(literal, Atom)))
    targets = [literal.var for literal in rule.body if isinstance(literal, Bind)]
    for var in targets:
        if var in atom_vars or targets.count(var) > 1:
            raise RuleSyntaxError(f"{rule.source}: BIND target ?{var} is already bound in the body")
    for literal in rule.body:
        if isinstance(literal, Filter | Bind) and (missing := literal.vars - bound):
            raise RuleSyntaxError(f"{rule.source}: {_names(missing)} used in an expression but never bound")
    if any(isinstance(literal, Aggregate) for literal in rule.body) and any(
        isinstance(literal, Atom | Negation) for literal in rule.body
    ):
        raise RuleSyntaxError(
            f"{rule.source}: a rule with AGGREGATE may only add FILTER and BIND beside it; "
            "derive the other conditions in a rule of their own"
        )
    if any(isinstance(literal, Rank) for literal in rule.body) and len(rule.body) > 1:
        raise RuleSyntaxError(
            f"{rule.source}: RANK must be the whole body; put conditions inside it, "
            "or derive them in a rule of their own"
        )
    if isinstance(rank := rule.body[0], Rank):
        for head in rule.heads:
            if rank.item not in head.vars or head.vars - {rank.item, rank.var}:
                raise RuleSyntaxError(
                    f"{rule.source}: a RANK rule's heads hold ?{rank.item} and may hold ?{rank.var}, "
                    "nothing else (an item's other values need not be those it was ranked by)"
                )


def _names(vars_: set[str] | frozenset[str]) -> str:
    return ", ".join(f"?{n}" for n in sorted(vars_))


def body_atoms(rule: Rule) -> list[Atom]:
    """Every atom a rule's body reads: its own, and those inside NOT, AGGREGATE and RANK."""
    out: list[Atom] = []
    for literal in rule.body:
        if isinstance(literal, Atom):
            out.append(literal)
        elif isinstance(literal, Negation | Aggregate | Rank):
            out.extend(literal.atoms)
    return out


@dataclass(frozen=True)
class Slice:
    """The rules that derive some predicates, and every rule those need: a smaller program that
    derives the same facts of them (a stratified program's facts of a predicate depend only on the
    rules its own rules read through, positively or through NOT). ``reads``: the predicates the
    slice's bodies read (``RDF_TYPE`` among them when a body asks for a class), so a store holding
    only facts of those gives the same answers; None: any predicate."""

    program: Program
    reads: frozenset[str] | None


def slice_for(program: Program, wanted: frozenset[str]) -> Slice:
    """The :class:`Slice` of ``program`` that derives the predicates ``wanted`` (IRIs). A body atom
    ``[?x, a, :C]`` needs the rules concluding ``a :C`` or ``a ?class``; a variable predicate, in a
    head or a body, needs every rule (the whole program is the slice)."""
    preds, classes, any_class = set(wanted), set[str](), False
    chosen: set[int] = set()

    def concludes_needed(head: Atom) -> bool:
        if not isinstance(head.p, NamedNode):
            return True
        if head.p.value != RDF_TYPE:
            return head.p.value in preds
        if not isinstance(head.o, NamedNode):  # ``a ?class``: any class a body asks for
            return any_class or bool(classes)
        return any_class or head.o.value in classes

    grew = True
    while grew:
        grew = False
        for i, rule in enumerate(program.rules):
            if i in chosen or not any(concludes_needed(h) for h in rule.heads):
                continue
            chosen.add(i)
            grew = True
            for atom in body_atoms(rule):
                if not isinstance(atom.p, NamedNode):
                    return Slice(program, None)  # reads any predicate: nothing to leave out
                if atom.p.value != RDF_TYPE:
                    preds.add(atom.p.value)
                elif isinstance(atom.o, NamedNode):
                    classes.add(atom.o.value)
                else:
                    any_class = True
    rules = [rule for i, rule in enumerate(program.rules) if i in chosen]
    reads = {a.p.value for r in rules for a in body_atoms(r) if isinstance(a.p, NamedNode)}
    return Slice(Program(rules, dict(program.prefixes)), frozenset(reads))
