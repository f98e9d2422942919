"""Rule bodies as SPARQL: one SELECT per use (full, seeded by a changed fact, minus a literal).

Constants are serialised by pyoxigraph; FILTER and BIND expressions come verbatim from the rule
files (trusted configuration, never request data). Seeds become a leading VALUES block and the
positive atoms are ordered greedily so that each joins on what is already bound.
"""

from __future__ import annotations

from collections.abc import Mapping

from pyoxigraph import Literal, NamedNode

from projections.rules.syntax import (
    RDF_TYPE,
    Aggregate,
    Atom,
    Bind,
    Filter,
    Negation,
    Program,
    Rule,
    Term,
    Var,
)

Binding = Mapping[str, NamedNode | Literal]


def sparql_term(term: Term) -> str:
    return f"?{term.name}" if isinstance(term, Var) else str(term)


def prefix_block(program: Program) -> str:
    return "".join(f"PREFIX {p}: <{iri}>\n" for p, iri in program.prefixes.items())


def values_block(seed: Binding) -> str:
    if not seed:
        return ""
    names = sorted(seed)
    return f"VALUES ({' '.join('?' + n for n in names)}) {{ ({' '.join(str(seed[n]) for n in names)}) }}\n"


def _atom(atom: Atom) -> str:
    return f"{sparql_term(atom.s)} {sparql_term(atom.p)} {sparql_term(atom.o)} ."


def _score(atom: Atom, bound: set[str]) -> int:
    """How selective an atom is once ``bound`` variables are known (higher joins first)."""

    def known(t: Term) -> bool:
        return not isinstance(t, Var) or t.name in bound

    score = 0
    if known(atom.s):
        score += 8
    if known(atom.o):
        score += 2 if atom.p == NamedNode(RDF_TYPE) else 4
    if known(atom.p):
        score += 1
    return score


def order_atoms(atoms: list[Atom], bound: set[str]) -> list[Atom]:
    bound = set(bound)
    rest, out = list(atoms), []
    while rest:
        best = max(rest, key=lambda a: _score(a, bound))
        rest.remove(best)
        out.append(best)
        bound |= best.vars
    return out


def negation_locals(rule: Rule, neg: Negation) -> frozenset[str]:
    """Variables that occur only inside ``neg``: existential, not shared with the rest."""
    outside: set[str] = set()
    for lit in rule.body:
        if lit is neg:
            continue
        match lit:
            case Atom():
                outside |= lit.vars
            case Negation():
                outside |= set().union(*(a.vars for a in lit.atoms))
            case Filter() | Bind():
                outside |= lit.vars | ({lit.var} if isinstance(lit, Bind) else set())
            case Aggregate():
                outside |= set(lit.group) | {o.var for o in lit.outputs}
    inside = set().union(*(a.vars for a in neg.atoms))
    return frozenset((inside - outside) | neg.exists)


def aggregate_subquery(agg: Aggregate, seed: Binding) -> str:
    inner_seed = {k: v for k, v in seed.items() if k in agg.group}
    atoms = order_atoms(list(agg.atoms), set(inner_seed))
    outputs = " ".join(
        f"({o.func}({'DISTINCT ' if o.distinct else ''}{o.expr}) AS ?{o.var})" for o in agg.outputs
    )
    group = " ".join(f"?{g}" for g in agg.group)
    body = values_block(inner_seed) + " ".join(_atom(a) for a in atoms)
    body += "".join(f" FILTER({f.expr})" for f in agg.filters)
    grouping = f" GROUP BY {group}" if group else ""
    return f"{{ SELECT {group} {outputs} WHERE {{ {body} }}{grouping} }}"


def where_clause(rule: Rule, seed: Binding, *, skip: object = None, drop_negations: bool = False) -> str:
    """The body as a SPARQL group; ``skip`` leaves one literal out (by identity)."""
    atoms: list[Atom] = []
    binds: list[Bind] = []
    filters: list[str] = []
    negs: list[str] = []
    subqueries: list[str] = []
    for lit in rule.body:
        if lit is skip:
            continue
        match lit:
            case Atom():
                atoms.append(lit)
            case Bind():
                binds.append(lit)
            case Filter():
                filters.append(f"FILTER({lit.expr})")
            case Negation():
                if not drop_negations:
                    negs.append(f"FILTER NOT EXISTS {{ {' '.join(_atom(a) for a in lit.atoms)} }}")
            case Aggregate():
                subqueries.append(aggregate_subquery(lit, seed))
    parts = [values_block(seed), *subqueries]
    bound = set(seed)
    # A seeded BIND target is already in scope: check the value instead of binding it.
    filters += [f"FILTER(?{b.var} = ({b.expr}))" for b in binds if b.var in seed]
    pending = [b for b in binds if b.var not in seed]
    for atom in order_atoms(atoms, bound):
        parts.append(_atom(atom))
        bound |= atom.vars
        for b in [b for b in pending if b.vars <= bound]:
            parts.append(f"BIND({b.expr} AS ?{b.var})")
            bound.add(b.var)
            pending.remove(b)
    parts += [f"BIND({b.expr} AS ?{b.var})" for b in pending]
    parts += filters + negs
    return "\n".join(p for p in parts if p)


def select(rule: Rule, seed: Binding, variables: list[str], **options: object) -> str:
    projected = " ".join(f"?{v}" for v in variables) if variables else "*"
    return f"SELECT DISTINCT {projected} WHERE {{\n{where_clause(rule, seed, **options)}\n}}"  # type: ignore[arg-type]


def ask(rule: Rule, seed: Binding) -> str:
    return f"ASK {{\n{where_clause(rule, seed)}\n}}"


def group_keys(agg: Aggregate, seed: Binding) -> str:
    """The groups of an aggregate that the seeded atoms touch."""
    inner = {k: v for k, v in seed.items() if k in set().union(*(a.vars for a in agg.atoms))}
    atoms = order_atoms(list(agg.atoms), set(inner))
    body = values_block(inner) + " ".join(_atom(a) for a in atoms)
    body += "".join(f" FILTER({f.expr})" for f in agg.filters)
    group = " ".join(f"?{g}" for g in agg.group) or "*"
    return f"SELECT DISTINCT {group} WHERE {{ {body} }}"
