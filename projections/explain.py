"""Derived facts about a memory, each with the rule and the facts that derived it, in words.

A rule may join a memory with another one (``supersedes``, ``conflictsWith``); an answer for a
principal shows only the facts, derivations and inputs that name no memory it may not see (the
``sees`` filter, ``projections.visibility.sight``).
"""

from __future__ import annotations

import dataclasses
import string
from collections.abc import Mapping
from typing import NotRequired, TypedDict

from engram.projections.conflict_sets import CONFLICTS_WITH, IN_SET, conflict_quads, explain_pair
from engram.projections.rules.compile import Value
from engram.projections.rules.engine import Derivation
from engram.projections.tenant_graph import TenantGraph
from engram.projections.terms import INFERRED, MEMORY_PREFIX, memory_iri
from engram.projections.visibility import MemoryFilter, everything, fact_shown, shown
from engram.schemas import vocabulary as v
from pyoxigraph import Literal, NamedNode, Triple

NUMERIC = {v.XSD + t for t in ("integer", "decimal", "double", "float")}


# The JSON shapes of the HTTP API; key order is part of them.
class FactView(TypedDict):
    subject: str
    predicate: str
    object: str


class InputView(FactView):
    asserted: bool


class ExplainedInputView(InputView):
    because: NotRequired[list[DerivationView]]  # only for an inferred input with derivations


class DerivationView(TypedDict):
    rule: str
    explanation: str | None
    inputs: list[ExplainedInputView]


class InferredView(TypedDict):
    predicate: str
    value: str
    derivations: list[DerivationView]


class DerivedView(TypedDict):
    """An inferred fact about a memory with its first derivation, one level deep."""

    predicate: str
    value: str
    rule: str | None
    explanation: str | None
    inputs: list[InputView]


def show(term: object) -> str:
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
        if iri.startswith(MEMORY_PREFIX):
            return iri.removeprefix(MEMORY_PREFIX)
        if iri.startswith(v.ENGRAM):
            return iri.removeprefix(v.ENGRAM)
        return iri
    return str(term)


def sentence(template: str | None, bindings: Mapping[str, Value]) -> str | None:
    if template is None:
        return None
    names = {name for _, name, _, _ in string.Formatter().parse(template) if name}
    values = {name: show(bindings[name]) if name in bindings else "?" for name in names}
    return template.format(**values)


def fact_view(fact: Triple) -> FactView:
    return {"subject": show(fact.subject), "predicate": show(fact.predicate), "object": show(fact.object)}


def derivation_view(derivation: Derivation) -> DerivationView:
    return {
        "rule": derivation.rule.source,
        "explanation": sentence(derivation.rule.explain, derivation.bindings),
        "inputs": [
            {
                **fact_view(read.fact),
                "asserted": read.asserted,
                **({"because": [derivation_view(d) for d in read.because]} if read.because else {}),
            }
            for read in derivation.inputs
        ],
    }


def seen_derivation(derivation: Derivation, sees: MemoryFilter) -> Derivation | None:
    """The derivation as ``sees`` may be shown it, or None if it rests on a hidden memory: one of
    its bindings (its sentence's words) or input facts names one, or an inferred input was derived
    only through one. Of an input's derivations, the ones through a hidden memory are left out."""
    if not all(shown(term, sees) for term in derivation.bindings.values()):
        return None
    inputs = []
    for read in derivation.inputs:
        if not fact_shown(read.fact, sees):
            return None
        because = tuple(d for d in (seen_derivation(d, sees) for d in read.because) if d is not None)
        if read.because and not because:
            return None
        inputs.append(dataclasses.replace(read, because=because) if because != read.because else read)
    return dataclasses.replace(derivation, inputs=tuple(inputs))


def inferred_about(
    graph: TenantGraph, subject: NamedNode, *, depth: int = 3, sees: MemoryFilter = everything
) -> list[InferredView]:
    """Every inferred fact with ``subject``, each with how it was derived (its ``conflictsWith``
    pairs read from its conflict sets, which stand for them and are not listed); with ``sees``, only
    what the principal may see: a fact that names a hidden memory, or that every derivation of
    derives through one, is left out, as it would not be there without that memory."""
    out: list[InferredView] = []
    stored = graph.store.quads_for_pattern(subject, None, None, INFERRED)
    quads = [*(q for q in stored if q.predicate != IN_SET), *conflict_quads(graph.store, subject)]
    memo: dict[Triple, list[Derivation]] = {}
    for quad in sorted(quads, key=str):
        if not fact_shown(quad.triple, sees):
            continue
        if quad.predicate == CONFLICTS_WITH:  # read from the conflict sets, not stored
            derivations = explain_pair(graph, quad.triple, depth=depth, memo=memo)
        else:
            derivations = graph.explain(quad.triple, depth=depth)
        kept = [d for d in (seen_derivation(d, sees) for d in derivations) if d is not None]
        if derivations and not kept:
            continue
        out.append(
            {
                "predicate": show(quad.predicate),
                "value": show(quad.object),
                "derivations": [derivation_view(d) for d in kept],
            }
        )
    return out


def derived_for_memory(
    graph: TenantGraph, memory_id: str, sees: MemoryFilter = everything
) -> list[DerivedView]:
    """Statuses of a memory with one explanation each, for the memory's own view (as ``sees``
    may be shown them)."""
    out: list[DerivedView] = []
    for item in inferred_about(graph, memory_iri(memory_id), depth=1, sees=sees):
        first = item["derivations"][0] if item["derivations"] else None
        out.append(
            {
                "predicate": item["predicate"],
                "value": item["value"],
                "rule": first["rule"] if first else None,
                "explanation": first["explanation"] if first else None,
                "inputs": [
                    {
                        "subject": read["subject"],
                        "predicate": read["predicate"],
                        "object": read["object"],
                        "asserted": read["asserted"],
                    }
                    for read in (first["inputs"] if first else [])
                ],
            }
        )
    return out
