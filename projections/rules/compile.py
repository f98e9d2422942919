"""Rule bodies as SPARQL: one SELECT per use (full, seeded by a changed fact, minus a literal).

Constants are serialised by pyoxigraph; FILTER and BIND expressions come verbatim from the rule
files (trusted configuration, never request data). Seeds become a leading VALUES block and the
positive atoms are ordered greedily so that each joins on what is already bound.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from engram.projections.rules.program import (
    RDF_TYPE,
    Aggregate,
    Atom,
    Bind,
    BodyLiteral,
    Filter,
    Negation,
    Program,
    Rank,
    Rule,
    Term,
    Var,
)
from pyoxigraph import BlankNode, Literal, NamedNode

Value = NamedNode | BlankNode | Literal  # what a variable stands for in a fact or a solution
Binding = Mapping[str, Value]  # values of some of a rule's variables
Seeds = Sequence[Binding]  # what a query starts from: the same variables in each, no blank node
# A compiled body, by (rule id, skipped literal id, seeded variables, negations dropped).
BodyCache = dict[tuple[int, int, frozenset[str], bool], str]


def sparql_term(term: Term) -> str:
    return f"?{term.name}" if isinstance(term, Var) else str(term)


def prefix_block(program: Program) -> str:
    return "".join(f"PREFIX {prefix}: <{iri}>\n" for prefix, iri in program.prefixes.items())


def values_block(seeds: Seeds) -> str:
    """One VALUES row per seed; every seed binds the same variables."""
    if not seeds or not seeds[0]:
        return ""
    names = sorted(seeds[0])
    rows = dict.fromkeys(f"({' '.join(str(seed[name]) for name in names)})" for seed in seeds)
    return f"VALUES ({' '.join('?' + name for name in names)}) {{ {' '.join(rows)} }}\n"


def project(seeds: Seeds, keep: Iterable[str]) -> list[Binding]:
    """The seeds cut down to the ``keep`` variables, without repeats, in first-seen order."""
    keep = set(keep)
    unique = {
        tuple(sorted((var, str(value)) for var, value in seed.items() if var in keep)): seed for seed in seeds
    }
    return [{var: value for var, value in seed.items() if var in keep} for seed in unique.values()]


def _pattern(atom: Atom) -> str:
    return f"{sparql_term(atom.s)} {sparql_term(atom.p)} {sparql_term(atom.o)} ."


def _score(atom: Atom, bound: set[str]) -> int:
    """How selective an atom is once ``bound`` variables are known (higher joins first)."""

    def known(term: Term) -> bool:
        return not isinstance(term, Var) or term.name in bound

    score = 0
    if known(atom.s):
        score += 8
    if known(atom.o):
        score += 2 if atom.p == NamedNode(RDF_TYPE) else 4
    if known(atom.p):
        score += 1
    return score


def order_atoms(
    atoms: list[Atom], bound: set[str], score: Callable[[Atom, set[str]], Any] | None = None
) -> list[Atom]:
    """Greedy join order: the most selective atom next (by ``score``, this module's own for SPARQL
    by default), given what the ones before bind."""
    rank = score or _score
    bound = set(bound)
    rest, ordered = list(atoms), []
    while rest:
        best = max(rest, key=lambda atom: rank(atom, bound))
        rest.remove(best)
        ordered.append(best)
        bound |= best.vars
    return ordered


def negation_locals(rule: Rule, negation: Negation) -> frozenset[str]:
    """Variables that occur only inside ``negation``: existential, not shared with the rest."""
    outside: set[str] = set()
    for literal in rule.body:
        if literal is negation:
            continue
        match literal:
            case Atom():
                outside |= literal.vars
            case Negation():
                outside |= set().union(*(atom.vars for atom in literal.atoms))
            case Filter() | Bind():
                outside |= literal.vars | ({literal.var} if isinstance(literal, Bind) else set())
            case Aggregate():
                outside |= set(literal.group) | {output.var for output in literal.outputs}
            case Rank():
                outside |= literal.vars | {literal.var}
    inside = set().union(*(atom.vars for atom in negation.atoms))
    return frozenset((inside - outside) | negation.declared_local)


def aggregate_subquery(aggregate: Aggregate, seeds: Seeds) -> str:
    inner_seeds = project(seeds, aggregate.group) if seeds and set(aggregate.group) & set(seeds[0]) else []
    atoms = order_atoms(list(aggregate.atoms), set(inner_seeds[0]) if inner_seeds else set())
    outputs = " ".join(
        f"({output.func}({'DISTINCT ' if output.distinct else ''}{output.expr}) AS ?{output.var})"
        for output in aggregate.outputs
    )
    group = " ".join(f"?{var}" for var in aggregate.group)
    body = values_block(inner_seeds) + " ".join(_pattern(atom) for atom in atoms)
    body += "".join(f" FILTER({condition.expr})" for condition in aggregate.filters)
    grouping = f" GROUP BY {group}" if group else ""
    return f"{{ SELECT {group} {outputs} WHERE {{ {body} }}{grouping} }}"


def where_clause(
    rule: Rule,
    seeds: Seeds,
    *,
    skip: BodyLiteral | None = None,
    drop_negations: bool = False,
    cache: BodyCache | None = None,
) -> str:
    """The body as a SPARQL group; ``skip`` leaves one literal out (by identity).

    A body depends only on the rule, the literal left out and which variables are seeded, so a
    caller that keeps its rules alive (the engine) passes a ``cache`` keyed by their ids.
    """
    seeded = frozenset(seeds[0]) if seeds else frozenset()
    if cache is None or any(
        isinstance(literal, Aggregate) for literal in rule.body
    ):  # subqueries carry seeds
        return _body(rule, seeded, skip, drop_negations, seeds)
    key = (id(rule), id(skip), seeded, drop_negations)
    body = cache.get(key)
    if body is None:
        body = cache[key] = _body(rule, seeded, skip, drop_negations, ())
    return values_block(seeds) + body


def _body(
    rule: Rule, seeded: frozenset[str], skip: BodyLiteral | None, drop_negations: bool, seeds: Seeds
) -> str:
    atoms: list[Atom] = []
    binds: list[Bind] = []
    filters: list[str] = []
    negations: list[str] = []
    subqueries: list[str] = []
    for literal in rule.body:
        if literal is skip:
            continue
        match literal:
            case Atom():
                atoms.append(literal)
            case Bind():
                binds.append(literal)
            case Filter():
                filters.append(f"FILTER({literal.expr})")
            case Negation():
                if not drop_negations:
                    patterns = " ".join(_pattern(atom) for atom in literal.atoms)
                    negations.append(f"FILTER NOT EXISTS {{ {patterns} }}")
            case Aggregate():
                subqueries.append(aggregate_subquery(literal, seeds))
            case Rank():  # whether a solution holds; the order is the engine's (``ranked``)
                atoms += literal.atoms
                filters += [f"FILTER({condition.expr})" for condition in literal.filters]
    parts = [values_block(seeds) if seeds else "", *subqueries]
    bound = set(seeded)
    # A seeded BIND target is already in scope: check the value instead of binding it.
    filters += [f"FILTER(sameTerm(?{bind.var}, {bind.expr}))" for bind in binds if bind.var in bound]
    pending = [bind for bind in binds if bind.var not in bound]
    for atom in order_atoms(atoms, bound):
        parts.append(_pattern(atom))
        bound |= atom.vars
        for bind in [bind for bind in pending if bind.vars <= bound]:
            parts.append(f"BIND({bind.expr} AS ?{bind.var})")
            bound.add(bind.var)
            pending.remove(bind)
    parts += [f"BIND({bind.expr} AS ?{bind.var})" for bind in pending]
    parts += filters + negations
    return "\n".join(part for part in parts if part)


def select(
    rule: Rule,
    seeds: Seeds,
    variables: list[str],
    *,
    skip: BodyLiteral | None = None,
    drop_negations: bool = False,
    cache: BodyCache | None = None,
) -> str:
    projected = " ".join(f"?{var}" for var in variables) if variables else "*"
    body = where_clause(rule, seeds, skip=skip, drop_negations=drop_negations, cache=cache)
    return f"SELECT DISTINCT {projected} WHERE {{\n{body}\n}}"


def ask(rule: Rule, seeds: Seeds, cache: BodyCache | None = None) -> str:
    return f"ASK {{\n{where_clause(rule, seeds, cache=cache)}\n}}"


def ranked(rank: Rank, items: Seeds) -> str:
    """A RANK's solutions in key order, then the item's and the limit's (a total order, so the
    first row of an item and the order of items are the same whichever items are asked);
    ``items`` seeds the item variable."""
    atoms = order_atoms(list(rank.atoms), set(items[0]) if items else set())
    body = values_block(items) + " ".join(_pattern(atom) for atom in atoms)
    body += "".join(f" FILTER({condition.expr})" for condition in rank.filters)
    return f"SELECT * WHERE {{ {body} }} ORDER BY {' '.join(rank.keys)} STR(?{rank.item}) ?{rank.limit}"


def group_keys(aggregate: Aggregate, seeds: Seeds) -> str:
    """The groups of an aggregate that the seeded atoms touch."""
    inner_seeds = project(seeds, set().union(*(atom.vars for atom in aggregate.atoms)))
    atoms = order_atoms(list(aggregate.atoms), set(inner_seeds[0]) if inner_seeds else set())
    body = values_block(inner_seeds) + " ".join(_pattern(atom) for atom in atoms)
    body += "".join(f" FILTER({condition.expr})" for condition in aggregate.filters)
    group = " ".join(f"?{var}" for var in aggregate.group) or "*"
    return f"SELECT DISTINCT {group} WHERE {{ {body} }}"
