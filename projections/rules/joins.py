"""Rule bodies as Python index joins: one closure per atom, chosen once per rule and seed shape.

Most of an update's queries are seeded by one changed fact and find nothing (a new memory fires
every association rule; none has an association yet). A SPARQL query costs a parse, a plan and a
VALUES join whatever it finds; a join that starts from the seed and looks the next atom up in the
store's index stops at the first empty lookup, in microseconds. So a body of atoms, NOTs and
FILTERs of the form ``?a != ?b`` over subjects (never literals, so term inequality is value
inequality) is compiled here: atoms ordered as the SPARQL compiler orders them, each a closure
that knows which of its positions are constants, bound before, or new. Any other FILTER, a BIND,
an AGGREGATE or a RANK keeps the SPARQL path (``compile``): their expression semantics are
oxigraph's, not re-implemented here.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

from engram.projections.rules.compile import Binding, Value, negation_locals, order_atoms
from engram.projections.rules.program import RDF_TYPE, Atom, BodyLiteral, Filter, Negation, Rule, Var
from pyoxigraph import Literal, NamedNode, Store

Row = dict[str, Value]
# A step extends one partial solution: (store, graphs, solution) -> the solutions it extends to.
Step = Callable[[Store, frozenset[NamedNode], Row], Iterator[Row]]
RDF_TYPE_NODE = NamedNode(RDF_TYPE)
_NOT_EQUAL = re.compile(r"\s*\?([A-Za-z_]\w*)\s*!=\s*\?([A-Za-z_]\w*)\s*")


def compilable(rule: Rule) -> bool:
    """Whether every literal of the body is one this module evaluates as SPARQL would."""
    subjects = {atom.s.name for atom in rule.body if isinstance(atom, Atom) and isinstance(atom.s, Var)}
    for literal in rule.body:
        if isinstance(literal, Atom | Negation):
            continue
        m = _NOT_EQUAL.fullmatch(literal.expr) if isinstance(literal, Filter) else None
        if m is not None and {m.group(1), m.group(2)} <= subjects:
            continue
        return False
    return True


def _score(atom: Atom, bound: set[str]) -> tuple[int, int]:
    """How selective an atom is once ``bound`` variables are known (higher joins first): a known
    subject most, then a known object; a variable already bound (one node: a memory, an
    association) before a constant (a status many nodes share), a class last of the constants;
    fewer new variables break ties."""
    score = 0
    for term, if_bound, if_constant in ((atom.s, 16, 12), (atom.o, 6, 3), (atom.p, 1, 1)):
        if isinstance(term, Var):
            score += if_bound if term.name in bound else 0
        else:
            score += if_constant
    if atom.p == RDF_TYPE_NODE and not isinstance(atom.o, Var):
        score -= 1
    return score, -len(atom.vars - bound)


def _atom_step(atom: Atom, bound: frozenset[str]) -> Step:
    """The closure matching ``atom`` once ``bound`` variables are known: each position a
    constant, a value read from the solution, or a new variable (checked again if repeated)."""
    consts: list[Value | None] = []
    reads: list[str | None] = []
    news: list[str | None] = []
    for term in atom.terms:
        if isinstance(term, Var):
            consts.append(None)
            reads.append(term.name if term.name in bound else None)
            news.append(None if term.name in bound else term.name)
        else:
            consts.append(term)
            reads.append(None)
            news.append(None)
    # a variable new here but occurring twice in the atom: the second occurrence must agree
    names = [n for n in news if n is not None]
    repeated = len(names) != len(set(names))
    (cs, cp, co), (rs, rp, ro), (ns, np_, no) = consts, reads, news

    if not names:  # ground once bound: a membership test

        def ground(store: Store, graphs: frozenset[NamedNode], row: Row) -> Iterator[Row]:
            s = cs if rs is None else row[rs]
            p = cp if rp is None else row[rp]
            o = co if ro is None else row[ro]
            if isinstance(s, Literal) or not isinstance(p, NamedNode):
                return
            for quad in store.quads_for_pattern(s, p, o):  # type: ignore[arg-type]
                if quad.graph_name in graphs:
                    yield row
                    return

        return ground

    def match(store: Store, graphs: frozenset[NamedNode], row: Row) -> Iterator[Row]:
        s = cs if rs is None else row[rs]
        p = cp if rp is None else row[rp]
        o = co if ro is None else row[ro]
        if isinstance(s, Literal) or (p is not None and not isinstance(p, NamedNode)):
            return
        for quad in store.quads_for_pattern(s, p, o):  # type: ignore[arg-type]
            if quad.graph_name not in graphs:
                continue
            out = dict(row)
            if ns is not None:
                out[ns] = quad.subject
            if np_ is not None:
                if repeated and out.get(np_, quad.predicate) != quad.predicate:
                    continue
                out[np_] = quad.predicate
            if no is not None:
                if repeated and out.get(no, quad.object) != quad.object:
                    continue
                out[no] = quad.object
            yield out

    return match


class JoinPlan:
    """A rule body, less ``skip`` and (for over-deletion) its NOTs, as steps in join order from
    the ``seeded`` variables: atoms greedily most selective first (as ``compile.order_atoms``),
    each FILTER and NOT as soon as its variables are bound, a NOT last of all otherwise."""

    def __init__(
        self, rule: Rule, skip: BodyLiteral | None, drop_negations: bool, seeded: frozenset[str]
    ) -> None:
        atoms = [lit for lit in rule.body if isinstance(lit, Atom) and lit is not skip]
        filters = [lit for lit in rule.body if isinstance(lit, Filter) and lit is not skip]
        negations = (
            []
            if drop_negations
            else [lit for lit in rule.body if isinstance(lit, Negation) and lit is not skip]
        )
        self.steps: list[Step] = []
        bound = frozenset(seeded)
        pending_filters = list(filters)
        pending_negations = [(neg, negation_locals(rule, neg)) for neg in negations]
        for atom in order_atoms(atoms, set(bound), score=_score):
            self.steps.append(_atom_step(atom, bound))
            bound |= atom.vars
            for condition in [f for f in pending_filters if f.vars <= bound]:
                self.steps.append(_not_equal_step(condition))
                pending_filters.remove(condition)
            for neg, local in [
                (n, loc) for n, loc in pending_negations if n.atoms and _outer(n) - loc <= bound
            ]:
                self.steps.append(_negation_step(neg, bound))
                pending_negations.remove((neg, local))
        # what is left reads a variable no atom binds: unbound, as SPARQL leaves it
        self.steps += [_not_equal_step(condition) for condition in pending_filters]
        self.steps += [_negation_step(neg, bound) for neg, _ in pending_negations]

    def solutions(self, store: Store, graphs: frozenset[NamedNode], seed: Binding) -> Iterator[Row]:
        rows: Iterator[Row] = iter((dict(seed),))
        for step in self.steps:
            rows = _chain(step, store, graphs, rows)
        return rows


def _chain(step: Step, store: Store, graphs: frozenset[NamedNode], rows: Iterator[Row]) -> Iterator[Row]:
    for row in rows:
        yield from step(store, graphs, row)


def _outer(negation: Negation) -> frozenset[str]:
    return frozenset().union(*(atom.vars for atom in negation.atoms))


def _not_equal_step(condition: Filter) -> Step:
    m = _NOT_EQUAL.fullmatch(condition.expr)
    assert m is not None  # ``compilable`` admitted only these
    left, right = m.group(1), m.group(2)

    def not_equal(store: Store, graphs: frozenset[NamedNode], row: Row) -> Iterator[Row]:
        a, b = row.get(left), row.get(right)
        if a is not None and b is not None and a != b:  # an unbound side is an error: false
            yield row

    return not_equal


def _negation_step(negation: Negation, bound: frozenset[str]) -> Step:
    """NOT: the solution stands when the negated atoms have no match, their local variables free."""
    inner = Rule((), tuple(negation.atoms), "", "")
    plan = JoinPlan(inner, None, True, bound)

    def absent(store: Store, graphs: frozenset[NamedNode], row: Row) -> Iterator[Row]:
        if next(plan.solutions(store, graphs, row), None) is None:
            yield row

    return absent
