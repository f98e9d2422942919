"""The ontology (Turtle): the class hierarchy and the derived statuses it declares; loaded once."""

from __future__ import annotations

import hashlib
import string
from dataclasses import dataclass
from pathlib import Path

from engram.schemas import vocabulary as v
from pyoxigraph import NamedNode, Quad, RdfFormat, Triple, parse

RDFS_SUBCLASS = "http://www.w3.org/2000/01/rdf-schema#subClassOf"
RDFS_RANGE = "http://www.w3.org/2000/01/rdf-schema#range"
SHAPES_FILE = "shapes.ttl"


@dataclass(frozen=True)
class StatusField:
    """A property shown among a memory's statuses: derived by the rules, or asserted beside them."""

    iri: str
    name: str  # its local name: the key in a memory's ``statuses``
    derived: bool  # a :DerivedStatus (read from the inferred graph) or an asserted property
    group: str | None  # the context bundle's block it is shown in ("target", "budget")
    field: str  # its name in that block
    order: int
    as_text: bool  # rdfs:range xsd:string: shown as text, never read as a number


@dataclass(frozen=True)
class StatusGroup:
    name: str
    status: StatusField  # the field named "status": the group is shown when it has a value
    fields: tuple[StatusField, ...]  # in :statusOrder
    sentence: str | None  # the :statusText of the group's status property, {field} placeholders


@dataclass(frozen=True)
class Ontology:
    triples: tuple[Triple, ...]
    digest: str
    superclasses: dict[str, frozenset[str]]  # class -> itself and every superclass
    derived_statuses: tuple[StatusField, ...] = ()  # every :DerivedStatus, by name
    status_groups: tuple[StatusGroup, ...] = ()  # the context bundle's status blocks, in order

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
    fields = _status_fields(triples)
    return Ontology(
        tuple(dict.fromkeys(triples)),
        digest.hexdigest(),
        _closure(edges),
        tuple(f for f in fields if f.derived),
        _status_groups(fields, triples),
    )


def _status_fields(triples: list[Triple]) -> list[StatusField]:
    said: dict[str, dict[str, str]] = {}
    derived: set[str] = set()
    for t in triples:
        if t.predicate.value == v.RDF_TYPE and t.object.value == v.ENGRAM + "DerivedStatus":
            derived.add(t.subject.value)
        elif t.predicate.value.startswith(v.ENGRAM + "status") or t.predicate.value == RDFS_RANGE:
            said.setdefault(t.subject.value, {})[t.predicate.value.rsplit("#", 1)[-1]] = t.object.value
    fields = []
    for iri in sorted(derived | {s for s, d in said.items() if "statusGroup" in d}):
        d = said.get(iri, {})
        name = iri.rsplit("#", 1)[-1]
        fields.append(
            StatusField(
                iri=iri,
                name=name,
                derived=iri in derived,
                group=d.get("statusGroup"),
                field=d.get("statusField", name),
                order=int(d.get("statusOrder", 0)),
                as_text=d.get("range") == v.XSD + "string",
            )
        )
    return sorted(fields, key=lambda f: (f.order, f.name))


def _status_groups(fields: list[StatusField], triples: list[Triple]) -> tuple[StatusGroup, ...]:
    texts = {t.subject.value: t.object.value for t in triples if t.predicate.value == v.ENGRAM + "statusText"}
    groups: dict[str, list[StatusField]] = {}
    for f in fields:
        if f.group is not None:
            groups.setdefault(f.group, []).append(f)
    out = []
    for name, members in sorted(groups.items()):  # groups in name order, fields in :statusOrder
        status = next((f for f in members if f.field == "status"), None)
        if status is None:
            raise ValueError(f"status group {name!r} has no field named 'status' (ontology :statusField)")
        sentence = texts.get(status.iri)
        named = {n for _, n, _, _ in string.Formatter().parse(sentence or "") if n is not None}
        unknown = named - {f.field for f in members}
        if unknown:
            raise ValueError(
                f"{status.iri} :statusText names {sorted(unknown)}, not fields of group {name!r}"
            )
        out.append(StatusGroup(name, status, tuple(members), sentence))
    return tuple(out)
