"""The compiled SHACL checks agree with pyshacl (the reference engine) on generated memory nodes."""

from __future__ import annotations

from typing import Any

import pyshacl
import rdflib
from engram.projections.knowledge import DEFAULT_ONTOLOGY_DIR, load_knowledge
from engram.projections.shapes import ShapesError, load_shapes
from engram.schemas import vocabulary as v
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyoxigraph import Literal, NamedNode

E = v.ENGRAM
XSD = v.XSD
KNOWLEDGE = load_knowledge()
SHAPES_GRAPH = rdflib.Graph().parse(DEFAULT_ONTOLOGY_DIR / "shapes.ttl")
ONT_GRAPH = rdflib.Graph()
for _path in sorted(DEFAULT_ONTOLOGY_DIR.glob("*.ttl")):
    if _path.name != "shapes.ttl":
        ONT_GRAPH.parse(_path)

LITERALS = st.one_of(
    st.integers(-2, 6).map(lambda i: Literal(i)),
    st.sampled_from([0.0, 0.5, 1.0, 1.5, 3.0, 40000.0, -1.0]).map(lambda f: Literal(f)),
    st.sampled_from(
        ["", "x", "roas", "USD", "usd", "month", "fact", "company", "operator", "Bad Metric"]
    ).map(Literal),
    st.just(Literal("2026-12-01T00:00:00Z", datatype=NamedNode(XSD + "dateTime"))),
    st.just(Literal(True)),
)
PREDICATES = [
    "memoryId", "label", "content", "kind", "scope", "importance", "confidence", "source", "expiresAt",
    "metric", "goal", "platform", "amount", "currency", "period", "role", "skill", "candidate", "rating",
]  # fmt: skip
CLASSES = [
    "Memory", "PerformanceTargetMemory", "BudgetConstraintMemory", "BrandVoiceMemory", "HiringCriteriaMemory",
    "TechnicalHiringCriteriaMemory", "CandidateAssessmentMemory", "SourcingPreferenceMemory",
]  # fmt: skip
VALID_BASE = {
    "memoryId": [Literal("m")], "label": [Literal("l")], "content": [Literal("c")], "kind": [Literal("fact")],
    "scope": [Literal("company")], "importance": [Literal(3)], "confidence": [Literal(1.0)],
    "source": [Literal("operator")],
}  # fmt: skip


@st.composite
def nodes(draw: st.DrawFn) -> tuple[str, dict[str, list[Any]]]:
    cls = draw(st.sampled_from(CLASSES))
    facts = {k: list(vs) for k, vs in VALID_BASE.items()} if draw(st.booleans()) else {}
    for pred in draw(st.lists(st.sampled_from(PREDICATES), max_size=6)):
        facts[pred] = draw(st.lists(LITERALS, min_size=0, max_size=2, unique_by=str))
    return cls, {E + k: vs for k, vs in facts.items() if vs}


def to_rdflib(term: Literal) -> rdflib.Literal:
    if term.datatype.value == XSD + "string":  # RDF 1.1: a simple literal; rdflib keeps them apart
        return rdflib.Literal(term.value)
    return rdflib.Literal(term.value, datatype=rdflib.URIRef(term.datatype.value))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes())
def test_compiled_shapes_agree_with_pyshacl(node: tuple[str, dict[str, list[Any]]]) -> None:
    cls, facts = node
    ours = KNOWLEDGE.shapes.validate([E + cls], facts, KNOWLEDGE.ontology)
    data = rdflib.Graph()
    subject = rdflib.URIRef("urn:engram:memory:m")
    data.add((subject, rdflib.RDF.type, rdflib.URIRef(E + cls)))
    for pred, values in facts.items():
        for value in values:
            data.add((subject, rdflib.URIRef(pred), to_rdflib(value)))
    conforms, _, report = pyshacl.validate(
        data, shacl_graph=SHAPES_GRAPH, ont_graph=ONT_GRAPH, inference="rdfs"
    )
    assert conforms == (not ours), f"ours: {ours}\npyshacl: {report}"


def test_unsupported_shacl_is_refused(tmp_path: Any) -> None:
    (tmp_path / "shapes.ttl").write_text(
        "@prefix sh: <http://www.w3.org/ns/shacl#> . @prefix : <https://engram.dev/ns#> .\n"
        ":S a sh:NodeShape ; sh:targetClass :Memory ;\n"
        "  sh:property [ sh:path :label ; sh:qualifiedMinCount 1 ] ."
    )
    try:
        load_shapes(tmp_path)
    except ShapesError as exc:
        assert "sh:qualifiedMinCount is not supported" in str(exc)
    else:
        raise AssertionError("an unsupported SHACL term was accepted")


def test_sh_pattern_dollar_is_the_end_of_the_text_not_before_a_final_newline() -> None:
    from engram.projections.shapes import xpath_regex

    currency = xpath_regex("^[A-Z]{3}$")
    assert currency.search("USD") and not currency.search("USD\n") and not currency.search("USDX")
    assert xpath_regex(r"^a\$[$]$").search("a$$") and not xpath_regex(r"^a\$[$]$").search("a$$\n")
    budget = {
        **{E + k: vs for k, vs in VALID_BASE.items()},
        E + "platform": [Literal("meta")], E + "amount": [Literal(10.0)], E + "currency": [Literal("USD\n")],
    }  # fmt: skip
    ok = {**budget, E + "currency": [Literal("USD")]}
    assert KNOWLEDGE.shapes.validate([E + "BudgetConstraintMemory"], ok, KNOWLEDGE.ontology) == []
    problems = KNOWLEDGE.shapes.validate([E + "BudgetConstraintMemory"], budget, KNOWLEDGE.ontology)
    assert any("currency must match" in p for p in problems), problems
