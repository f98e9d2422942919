"""Stratification: order rules so negation and aggregation only look at finished strata.

Rule B depends on rule A when a head of A can produce a fact a body atom of B matches (the
atoms unify). The dependency is negative through NOT, AGGREGATE and RANK. Strata are the strongly
connected components in dependency order; a negative dependency inside one is a cycle through
negation, and the program is refused with the cycle spelled out.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from engram.projections.rules.program import Aggregate, Atom, Negation, Rank, Rule, Var


class StratificationError(ValueError):
    """The program recurses through NOT or AGGREGATE; the message names the cycle."""


def unifiable(first: Atom, second: Atom) -> bool:
    """Whether one fact could match both atoms: each position has a variable or the same constant."""
    return all(
        isinstance(one, Var) or isinstance(other, Var) or one == other
        for one, other in zip(first.terms, second.terms, strict=True)
    )


def body_atoms(rule: Rule) -> Iterator[tuple[Atom, bool]]:
    """(atom, negative) for every atom the body reads."""
    for literal in rule.body:
        match literal:
            case Atom():
                yield literal, False
            case Negation():
                for atom in literal.atoms:
                    yield atom, True
            case Aggregate() | Rank():
                for atom in literal.atoms:
                    yield atom, True


@dataclass(frozen=True)
class Edge:
    user: int  # the rule whose body reads
    producer: int  # the rule whose head produces
    negative: bool


def dependency_edges(rules: list[Rule]) -> list[Edge]:
    negative_by_pair: dict[tuple[int, int], bool] = {}
    for user, rule in enumerate(rules):
        for atom, negative in body_atoms(rule):
            for producer, other in enumerate(rules):
                if any(unifiable(head, atom) for head in other.heads):
                    pair = (user, producer)
                    negative_by_pair[pair] = negative_by_pair.get(pair, False) or negative
    return [Edge(user, producer, negative) for (user, producer), negative in negative_by_pair.items()]


Successors = dict[int, list[int]]  # rule index -> the indices of the rules it depends on


def _sccs(count: int, successors: Successors) -> list[list[int]]:
    """Tarjan's algorithm, iterative; components come out dependencies first."""
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    on_stack: set[int] = set()
    stack: list[int] = []
    components: list[list[int]] = []
    counter = 0
    for root in range(count):
        if root in index:
            continue
        work = [(root, iter(successors.get(root, [])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, unvisited = work[-1]
            successor = next(unvisited, None)
            if successor is not None:
                if successor not in index:
                    index[successor] = low[successor] = counter
                    counter += 1
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(successors.get(successor, []))))
                elif successor in on_stack:
                    low[node] = min(low[node], index[successor])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(sorted(component))
    return components


def _path(successors: Successors, start: int, goal: int, allowed: set[int]) -> list[int]:
    """A shortest path from ``start`` to ``goal`` through ``allowed`` (breadth first)."""
    previous: dict[int, int] = {}
    queue, seen = [start], {start}
    while queue:
        node = queue.pop(0)
        if node == goal:
            path = [node]
            while path[-1] != start:
                path.append(previous[path[-1]])
            return path[::-1]
        for successor in successors.get(node, []):
            if successor in allowed and successor not in seen:
                seen.add(successor)
                previous[successor] = node
                queue.append(successor)
    return [start, goal]


def describe(rule: Rule) -> str:
    heads = ", ".join(f"[{head.s}, {_short(head.p)}, {_short(head.o)}]" for head in rule.heads)
    return f"{rule.source} {heads}"


def _short(term: object) -> str:
    text = str(term)
    for separator in ("#", "/"):
        if text.startswith("<") and separator in text:
            return ":" + text.rstrip(">").rsplit(separator, 1)[-1]
    return text


def stratify(rules: list[Rule]) -> list[list[Rule]]:
    """Rules grouped in strata, lowest first; raises StratificationError on a negative cycle."""
    edges = dependency_edges(rules)
    successors: Successors = {}
    for edge in edges:
        successors.setdefault(edge.user, []).append(edge.producer)
    strata = []
    for component in _sccs(len(rules), successors):
        members = set(component)
        for edge in edges:
            if edge.negative and edge.user in members and edge.producer in members:
                cycle = (
                    [edge.user, *_path(successors, edge.producer, edge.user, members)[:-1]]
                    if edge.user != edge.producer
                    else [edge.user]
                )
                chain = " -> ".join(describe(rules[index]) for index in [*cycle, cycle[0]])
                raise StratificationError(f"rules recurse through NOT/AGGREGATE: {chain}")
        strata.append([rules[index] for index in component])
    return strata
