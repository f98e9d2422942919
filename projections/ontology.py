"""The ontology (Turtle) and the class hierarchy it declares; loaded once per process."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from pyoxigraph import NamedNode, Quad, RdfFormat, Triple, parse

from schemas import vocabulary as v

RDFS_SUBCLASS = "http://www.w3.org/2000/01/rdf-schema#subClassOf"
SHAPES_FILE = "shapes.ttl"


@dataclass(frozen=True)
class Ontology:
    triples: tuple[Triple, ...]
    digest: str
    superclasses: dict[str, frozenset[str]]  # class -> itself and every superclass

    def quads(self, graph: NamedNode) -> list[Quad]:
        return [Quad(t.subject, t.predicate, t.object, graph) for t in self.triples]

    def is_memory_class(self, iri: str) -> bool:
        return v.ENGRAM + "Memory" in self.superclasses.get(iri, frozenset())


def _closure(edges: dict[str, set[str]]) -> dict[str, frozenset[str]]:
    out: dict[str, frozenset[str]] = {}
    for cls in set(edges) | {c for sups in edges.values() for c in sups}:
        seen, stack = {cls}, [cls]
        while stack:
            for sup in edges.get(stack.pop(), ()):
                if sup not in seen:
                    seen.add(sup)
                    stack.append(sup)
        out[cls] = frozenset(seen)
    return out


def load_ontology(directory: Path) -> Ontology:
    """Every ``*.ttl`` of ``directory`` except shapes.ttl, in name order (its digest covers all)."""
    files = sorted(p for p in directory.glob("*.ttl") if p.name != SHAPES_FILE)
    if not files:
        raise FileNotFoundError(f"no ontology (*.ttl) in {directory}")
    triples: list[Triple] = []
    digest = hashlib.sha256()
    for path in sorted(directory.glob("*.ttl")):
        data = path.read_bytes()
        digest.update(path.name.encode() + b"\0" + data)
        if path.name == SHAPES_FILE:
            continue
        try:
            triples += [q.triple for q in parse(data, format=RdfFormat.TURTLE)]
        except SyntaxError as exc:
            raise ValueError(f"{path.name}: {exc}") from exc
    edges: dict[str, set[str]] = {}
    for t in triples:
        if t.predicate.value == RDFS_SUBCLASS and isinstance(t.object, NamedNode):
            edges.setdefault(t.subject.value, set()).add(t.object.value)
    edges.setdefault(v.ENGRAM + "Memory", set())
    return Ontology(tuple(dict.fromkeys(triples)), digest.hexdigest(), _closure(edges))
