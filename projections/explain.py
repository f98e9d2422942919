"""Derived facts about a memory, each with the rule and the facts that derived it, in words."""

from __future__ import annotations

import string
from typing import Any

from pyoxigraph import Literal, NamedNode, Triple

from projections.graph import INFERRED, TenantGraph, memory_iri
from schemas import vocabulary as v

NUMERIC = {v.XSD + t for t in ("integer", "decimal", "double", "float")}


def show(term: Any) -> str:
    """A term as a person reads it: 34,000 not "34000"^^xsd:double, a memory by its id."""
    if isinstance(term, Literal):
        if term.datatype.value in NUMERIC:
            number = float(term.value)
            return f"{number:,.0f}" if number.is_integer() else f"{number:,.2f}".rstrip("0").rstrip(".")
        return term.value
    if isinstance(term, NamedNode):
        iri = term.value
        if iri == v.RDF_TYPE:
            return "type"
        if iri.startswith("urn:engram:memory:"):
            return iri.removeprefix("urn:engram:memory:")
        if iri.startswith(v.ENGRAM):
            return iri.removeprefix(v.ENGRAM)
        return iri
    return str(term)


def sentence(template: str | None, bindings: dict[str, Any]) -> str | None:
    if template is None:
        return None
    names = {name for _, name, _, _ in string.Formatter().parse(template) if name}
    values = {n: show(bindings[n]) if n in bindings else "?" for n in names}
    return template.format(**values)


def fact_view(fact: Triple) -> dict[str, str]:
    return {"subject": show(fact.subject), "predicate": show(fact.predicate), "object": show(fact.object)}


def derivation_view(d: dict[str, Any]) -> dict[str, Any]:
    return {
        "rule": d["rule"].source,
        "explanation": sentence(d["rule"].explain, d["bindings"]),
        "inputs": [
            {
                **fact_view(i["fact"]),
                "asserted": i["asserted"],
                **({"because": [derivation_view(b) for b in i["because"]]} if i.get("because") else {}),
            }
            for i in d["inputs"]
        ],
    }


def inferred_about(graph: TenantGraph, subject: NamedNode, *, depth: int = 3) -> list[dict[str, Any]]:
    """Every inferred fact with ``subject``, each with how it was derived."""
    out = []
    for q in sorted(graph.store.quads_for_pattern(subject, None, None, INFERRED), key=str):
        derivations = graph.explain(q.triple, depth=depth)
        out.append(
            {
                "predicate": show(q.predicate),
                "value": show(q.object),
                "derivations": [derivation_view(d) for d in derivations],
            }
        )
    return out


def derived_for_memory(graph: TenantGraph, memory_id: str) -> list[dict[str, Any]]:
    """Statuses of a memory with one explanation each, for the memory's own view."""
    out = []
    for item in inferred_about(graph, memory_iri(memory_id), depth=1):
        first = item["derivations"][0] if item["derivations"] else {}
        out.append(
            {
                "predicate": item["predicate"],
                "value": item["value"],
                "rule": first.get("rule"),
                "explanation": first.get("explanation"),
                "inputs": [
                    {k: x[k] for k in ("subject", "predicate", "object", "asserted")}
                    for x in first.get("inputs", [])
                ],
            }
        )
    return out
