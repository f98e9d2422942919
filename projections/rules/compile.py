"""Rule bodies as SPARQL: one SELECT per use (full, seeded by a changed fact, minus a literal).

Constants are serialised by pyoxigraph; FILTER and BIND expressions come verbatim from the rule
files (trusted configuration, never request data). Seeds become a leading VALUES block and the
positive atoms are ordered greedily so that each joins on what is already bound.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

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
Seeds = Sequence[Binding]


def sparql_term(term: Term) -> str:
    return f"?{term.name}" if isinstance(term, Var) else str(term)


def prefix_block(program: Program) -> str:
    return "".join(f"PREFIX {p}: <{iri}>\n" for p, iri in program.prefixes.items())


def values_block(seeds: Seeds) -> str:
    """One VALUES row per seed; every seed binds the same variables."""
    if not seeds or not seeds[0]:
        return ""
    names = sorted(seeds[0])
    rows = dict.fromkeys(f"({' '.join(str(seed[n]) for n in names)})" for seed in seeds)
    return f"VALUES ({' '.join('?' + n for n in names)}) {{ {' '.join(rows)} }}\n"


def project(seeds: Seeds, keep: Iterable[str]) -> list[Binding]:
    keep = set(keep)
    out = {tuple(sorted((k, str(v)) for k, v in s.items() if k in keep)): s for s in seeds}
    return [{k: v for k, v in s.items() if k in keep} for s in out.values()]


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


def aggregate_subquery(agg: Aggregate, seeds: Seeds) -> str:
    inner_seed = project(seeds, agg.group) if seeds and set(agg.group) & set(seeds[0]) else []
    atoms = order_atoms(list(agg.atoms), set(inner_seed[0]) if inner_seed else set())
    outputs = " ".join(
        f"({o.func}({'DISTINCT ' if o.distinct else ''}{o.expr}) AS ?{o.var})" for o in agg.outputs
    )
    group = " ".join(f"?{g}" for g in agg.group)
    body = values_block(inner_seed) + " ".join(_atom(a) for a in atoms)
    body += "".join(f" FILTER({f.expr})" for f in agg.filters)
    grouping = f" GROUP BY {group}" if group else ""
    return f"{{ SELECT {group} {outputs} WHERE {{ {body} }}{grouping} }}"


BodyCache = dict[tuple[int, int, frozenset[str], bool], str]


def where_clause(
    rule: Rule,
    seeds: Seeds,
    *,
    skip: object = None,
    drop_negations: bool = False,
    cache: BodyCache | None = None,
) -> str:
    """The body as a SPARQL group; ``skip`` leaves one literal out (by identity).

    A body depends only on the rule, the literal left out and which variables are seeded, so a
    caller that keeps its rules alive (the engine) passes a ``cache`` keyed by their ids.
    """
    bound = frozenset(seeds[0]) if seeds else frozenset()
    if cache is None or any(isinstance(lit, Aggregate) for lit in rule.body):  # subqueries carry seeds
        return _body(rule, bound, skip, drop_negations, seeds)
    key = (id(rule), id(skip), bound, drop_negations)
    body = cache.get(key)
    if body is None:
        body = cache[key] = _body(rule, bound, skip, drop_negations, ())
    return values_block(seeds) + body


def _body(rule: Rule, seeded: frozenset[str], skip: object, drop_negations: bool, seeds: Seeds) -> str:
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
                subqueries.append(aggregate_subquery(lit, seeds))
    parts = [values_block(seeds) if seeds else "", *subqueries]
    bound = set(seeded)
    # A seeded BIND target is already in scope: check the value instead of binding it.
    filters += [f"FILTER(sameTerm(?{b.var}, {b.expr}))" for b in binds if b.var in bound]
    pending = [b for b in binds if b.var not in bound]
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


def select(rule: Rule, seeds: Seeds, variables: list[str], **options: object) -> str:
    projected = " ".join(f"?{v}" for v in variables) if variables else "*"
    return f"SELECT DISTINCT {projected} WHERE {{\n{where_clause(rule, seeds, **options)}\n}}"  # type: ignore[arg-type]


def ask(rule: Rule, seeds: Seeds, cache: BodyCache | None = None) -> str:
    return f"ASK {{\n{where_clause(rule, seeds, cache=cache)}\n}}"


def group_keys(agg: Aggregate, seeds: Seeds) -> str:
    """The groups of an aggregate that the seeded atoms touch."""
    inner = project(seeds, set().union(*(a.vars for a in agg.atoms)))
    atoms = order_atoms(list(agg.atoms), set(inner[0]) if inner else set())
    body = values_block(inner) + " ".join(_atom(a) for a in atoms)
    body += "".join(f" FILTER({f.expr})" for f in agg.filters)
    group = " ".join(f"?{g}" for g in agg.group) or "*"
    return f"SELECT DISTINCT {group} WHERE {{ {body} }}"
