"""SHACL shapes compiled into checks on one memory node.

A write is validated before it is produced, and again by the projector for events that arrive
straight on Kafka, so validation must cost microseconds, not the milliseconds a general SHACL
engine takes. This compiles the SHACL Core subset ``ontology/shapes.ttl`` uses; any other SHACL
term in a shape is refused when the shapes load, so nothing is silently ignored. The tests check
it against pyshacl on generated nodes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from engram.projections.ontology import Ontology
from pyoxigraph import BlankNode, Literal, NamedNode, RdfFormat, Store

SH = "http://www.w3.org/ns/shacl#"
RDF_FIRST = "http://www.w3.org/1999/02/22-rdf-syntax-ns#first"
RDF_REST = "http://www.w3.org/1999/02/22-rdf-syntax-ns#rest"
RDF_NIL = "http://www.w3.org/1999/02/22-rdf-syntax-ns#nil"
RDF_TYPE = "http://www.w3.org/1999/02/22-rdf-syntax-ns#type"
NUMERIC = {
    "http://www.w3.org/2001/XMLSchema#" + t
    for t in ("integer", "decimal", "double", "float", "int", "long", "short", "byte", "nonNegativeInteger")
}
NODE_KEYS = {"targetClass", "property"}
PROPERTY_KEYS = {
    "path",
    "minCount",
    "maxCount",
    "datatype",
    "or",
    "in",
    "minInclusive",
    "maxInclusive",
    "minExclusive",
    "maxExclusive",
    "minLength",
    "maxLength",
    "pattern",
    "name",
    "description",
}

Term = NamedNode | Literal | BlankNode


class ShapesError(ValueError):
    """shapes.ttl uses SHACL this engine does not implement, or is malformed."""


@dataclass(frozen=True)
class PropertyShape:
    path: str
    min_count: int = 0
    max_count: int | None = None
    datatypes: frozenset[str] = frozenset()  # any of (sh:datatype, or sh:or of datatypes)
    allowed: frozenset[str] | None = None  # sh:in, as serialised terms
    min_inclusive: float | None = None
    max_inclusive: float | None = None
    min_exclusive: float | None = None
    max_exclusive: float | None = None
    min_length: int | None = None
    max_length: int | None = None
    pattern: re.Pattern[str] | None = None
    pattern_text: str | None = None  # as sh:pattern states it (XPath), for messages and JSON Schema
    local: str = ""  # the path as messages name it (``_local``), worked out once, not per node checked

    def check(self, values: Sequence[Term], local: str) -> list[str]:
        out = []
        if len(values) < self.min_count:
            out.append(f"{local} is required (at least {self.min_count})")
        if self.max_count is not None and len(values) > self.max_count:
            out.append(f"{local} may have at most {self.max_count} value(s), has {len(values)}")
        for value in values:
            out += self._check_value(value, local)
        return out

    def _check_value(self, value: Term, local: str) -> list[str]:
        out = []
        is_literal = isinstance(value, Literal)
        if self.datatypes and (not is_literal or value.datatype.value not in self.datatypes):
            names = " or ".join(sorted(d.rsplit("#", 1)[-1] for d in self.datatypes))
            out.append(f"{local} must be {names}, got {value}")
        if self.allowed is not None and str(value) not in self.allowed:
            out.append(f"{local} must be one of {', '.join(sorted(self.allowed))}, got {value}")
        bounds = (self.min_inclusive, self.max_inclusive, self.min_exclusive, self.max_exclusive)
        if any(b is not None for b in bounds):
            number = _number(value)
            if number is None:
                out.append(f"{local} must be a number, got {value}")
            else:
                if self.min_inclusive is not None and number < self.min_inclusive:
                    out.append(f"{local} must be >= {self.min_inclusive:g}, got {number:g}")
                if self.max_inclusive is not None and number > self.max_inclusive:
                    out.append(f"{local} must be <= {self.max_inclusive:g}, got {number:g}")
                if self.min_exclusive is not None and number <= self.min_exclusive:
                    out.append(f"{local} must be > {self.min_exclusive:g}, got {number:g}")
                if self.max_exclusive is not None and number >= self.max_exclusive:
                    out.append(f"{local} must be < {self.max_exclusive:g}, got {number:g}")
        if self.min_length is not None or self.max_length is not None or self.pattern is not None:
            if isinstance(value, BlankNode):
                out.append(f"{local} must be a literal or IRI")
            else:
                text = value.value
                if self.min_length is not None and len(text) < self.min_length:
                    out.append(f"{local} must have at least {self.min_length} characters")
                if self.max_length is not None and len(text) > self.max_length:
                    out.append(f"{local} must have at most {self.max_length} characters")
                if self.pattern is not None and not self.pattern.search(text):
                    out.append(f"{local} must match {self.pattern_text}")
        return out


def _number(value: Term) -> float | None:
    if isinstance(value, Literal) and value.datatype.value in NUMERIC:
        try:
            return float(value.value)
        except ValueError:
            return None
    return None


@dataclass(frozen=True)
class NodeShape:
    name: str
    target_class: str
    properties: tuple[PropertyShape, ...]


@dataclass(frozen=True)
class Shapes:
    shapes: tuple[NodeShape, ...]
    by_class: dict[str, list[NodeShape]] = field(default_factory=dict)

    def validate(
        self,
        classes: Sequence[str],
        facts: Mapping[str, Sequence[Term]],
        ontology: Ontology,
        *,
        memory: bool = True,
    ) -> list[str]:
        """Violations of a node with asserted ``classes`` and ``facts`` (predicate IRI -> values);
        ``memory``: the node is a memory, so its class must be one under :Memory (an agent-work node's
        classes are the projection's own)."""
        out: list[str] = []
        targets: set[str] = set()
        for cls in classes:
            if memory and not ontology.is_memory_class(cls):
                out.append(f"unknown class {_local(cls)}: not declared under :Memory in the ontology")
            targets |= ontology.superclasses.get(cls, {cls})
        for cls in sorted(targets):
            for shape in self.by_class.get(cls, []):
                for prop in shape.properties:
                    found = prop.check(facts.get(prop.path, ()), prop.local)
                    out += [f"{_local(cls)}: {msg}" for msg in found]
        return out


def _local(iri: str) -> str:
    return ":" + iri.rsplit("#", 1)[-1] if "#" in iri else iri


def _list(store: Store, head: Term) -> list[Term]:
    items = []
    while not (isinstance(head, NamedNode) and head.value == RDF_NIL):
        first = [q.object for q in store.quads_for_pattern(head, NamedNode(RDF_FIRST), None)]
        rest = [q.object for q in store.quads_for_pattern(head, NamedNode(RDF_REST), None)]
        if len(first) != 1 or len(rest) != 1:
            raise ShapesError("malformed RDF list in shapes")
        items.append(first[0])
        head = rest[0]
    return items


def _props(store: Store, node: Term, allowed: set[str], where: str) -> dict[str, list[Term]]:
    out: dict[str, list[Term]] = {}
    for q in store.quads_for_pattern(node, None, None):
        p = q.predicate.value
        if p == RDF_TYPE:
            continue
        if not p.startswith(SH):
            continue
        key = p[len(SH) :]
        if key not in allowed:
            raise ShapesError(f"{where}: sh:{key} is not supported by engram's SHACL engine")
        out.setdefault(key, []).append(q.object)
    return out


def _one(props: dict[str, list[Term]], key: str) -> Term | None:
    values = props.get(key)
    return values[0] if values else None


def _compile_property(store: Store, node: Term, where: str) -> PropertyShape:
    props = _props(store, node, PROPERTY_KEYS, where)
    path = _one(props, "path")
    if not isinstance(path, NamedNode):
        raise ShapesError(f"{where}: sh:path must be a single IRI")
    datatypes = {d.value for d in props.get("datatype", [])}
    for alternative in props.get("or", []):
        for member in _list(store, alternative):
            inner = _props(store, member, {"datatype"}, f"{where} sh:or")
            datatypes |= {d.value for d in inner.get("datatype", [])}

    def num(key: str) -> float | None:
        value = _one(props, key)
        return float(value.value) if isinstance(value, Literal) else None

    def count(key: str) -> int | None:
        value = _one(props, key)
        return int(value.value) if isinstance(value, Literal) else None

    allowed = None
    if "in" in props:
        allowed = frozenset(str(t) for t in _list(store, props["in"][0]))
    pattern = _one(props, "pattern")
    return PropertyShape(
        path=path.value,
        local=_local(path.value),
        min_count=count("minCount") or 0,
        max_count=count("maxCount"),
        datatypes=frozenset(datatypes),
        allowed=allowed,
        min_inclusive=num("minInclusive"),
        max_inclusive=num("maxInclusive"),
        min_exclusive=num("minExclusive"),
        max_exclusive=num("maxExclusive"),
        min_length=count("minLength"),
        max_length=count("maxLength"),
        pattern=xpath_regex(pattern.value) if isinstance(pattern, Literal) else None,
        pattern_text=pattern.value if isinstance(pattern, Literal) else None,
    )


def xpath_regex(pattern: str) -> re.Pattern[str]:
    """``sh:pattern`` as Python searches it: in XPath regexes ``$`` is the end of the text only,
    where Python's also matches before a final newline (so "usd\\n" would pass ``^[a-z]+$``)."""
    out, escaped, in_class = [], False, False
    for ch in pattern:
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == "[":
            in_class = True
        elif ch == "]":
            in_class = False
        elif ch == "$" and not in_class:
            ch = r"\Z"
        out.append(ch)
    return re.compile("".join(out))


def load_shapes(directory: Path) -> Shapes:
    """Every sh:NodeShape declared in any Turtle file of ``directory``."""
    store = Store()
    for path in sorted(directory.glob("*.ttl")):
        store.load(path=str(path), format=RdfFormat.TURTLE)
    shapes = []
    for q in store.quads_for_pattern(None, NamedNode(RDF_TYPE), NamedNode(SH + "NodeShape")):
        where = _local(str(q.subject.value))
        props = _props(store, q.subject, NODE_KEYS, where)
        target = _one(props, "targetClass")
        if not isinstance(target, NamedNode):
            raise ShapesError(f"{where}: needs one sh:targetClass IRI")
        compiled = tuple(
            sorted(
                (_compile_property(store, p, where) for p in props.get("property", [])), key=lambda x: x.path
            )
        )
        shapes.append(NodeShape(where, target.value, compiled))
    by_class: dict[str, list[NodeShape]] = {}
    for shape in shapes:
        by_class.setdefault(shape.target_class, []).append(shape)
    return Shapes(tuple(shapes), by_class)
