"""Stratification: order rules so negation and aggregation only look at finished strata.

Rule B depends on rule A when a head of A can produce a fact a body atom of B matches (the
atoms unify). The dependency is negative through NOT and AGGREGATE. Strata are the strongly
connected components in dependency order; a negative dependency inside one is a cycle through
negation, and the program is refused with the cycle spelled out.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from projections.rules.syntax import Aggregate, Atom, Negation, Rule, Var


class StratificationError(ValueError):
    """The program recurses through NOT or AGGREGATE; the message names the cycle."""


def unifiable(a: Atom, b: Atom) -> bool:
    return all(
        isinstance(x, Var) or isinstance(y, Var) or x == y for x, y in zip(a.terms, b.terms, strict=True)
    )


def body_atoms(rule: Rule) -> Iterator[tuple[Atom, bool]]:
    """(atom, negative) for every atom the body reads."""
    for lit in rule.body:
        match lit:
            case Atom():
                yield lit, False
            case Negation():
                for atom in lit.atoms:
                    yield atom, True
            case Aggregate():
                for atom in lit.atoms:
                    yield atom, True


@dataclass(frozen=True)
class Edge:
    user: int  # the rule whose body reads
    producer: int  # the rule whose head produces
    negative: bool


def dependency_edges(rules: list[Rule]) -> list[Edge]:
    edges: dict[tuple[int, int], bool] = {}
    for i, rule in enumerate(rules):
        for atom, negative in body_atoms(rule):
            for j, other in enumerate(rules):
                if any(unifiable(head, atom) for head in other.heads):
                    edges[(i, j)] = edges.get((i, j), False) or negative
    return [Edge(i, j, neg) for (i, j), neg in edges.items()]


def _sccs(n: int, succ: dict[int, list[int]]) -> list[list[int]]:
    """Tarjan's algorithm, iterative; components come out dependencies first."""
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    on_stack: set[int] = set()
    stack: list[int] = []
    out: list[list[int]] = []
    counter = 0
    for root in range(n):
        if root in index:
            continue
        work = [(root, iter(succ.get(root, [])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(succ.get(nxt, []))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                out.append(sorted(comp))
    return out


def _path(succ: dict[int, list[int]], start: int, goal: int, allowed: set[int]) -> list[int]:
    prev: dict[int, int] = {}
    queue, seen = [start], {start}
    while queue:
        node = queue.pop(0)
        if node == goal:
            path = [node]
            while path[-1] != start:
                path.append(prev[path[-1]])
            return path[::-1]
        for nxt in succ.get(node, []):
            if nxt in allowed and nxt not in seen:
                seen.add(nxt)
                prev[nxt] = node
                queue.append(nxt)
    return [start, goal]


def describe(rule: Rule) -> str:
    heads = ", ".join(f"[{h.s}, {_short(h.p)}, {_short(h.o)}]" for h in rule.heads)
    return f"{rule.source} {heads}"


def _short(term: object) -> str:
    text = str(term)
    for sep in ("#", "/"):
        if text.startswith("<") and sep in text:
            return ":" + text.rstrip(">").rsplit(sep, 1)[-1]
    return text


def stratify(rules: list[Rule]) -> list[list[Rule]]:
    """Rules grouped in strata, lowest first; raises StratificationError on a negative cycle."""
    edges = dependency_edges(rules)
    succ: dict[int, list[int]] = {}
    for e in edges:
        succ.setdefault(e.user, []).append(e.producer)
    strata = []
    for comp in _sccs(len(rules), succ):
        members = set(comp)
        for e in edges:
            if e.negative and e.user in members and e.producer in members:
                cycle = (
                    [e.user, *_path(succ, e.producer, e.user, members)[:-1]]
                    if e.user != e.producer
                    else [e.user]
                )
                chain = " -> ".join(describe(rules[i]) for i in [*cycle, cycle[0]])
                raise StratificationError(f"rules recurse through NOT/AGGREGATE: {chain}")
        strata.append([rules[i] for i in comp])
    return strata
