"""Read-only SPARQL over a tenant's real store."""

from __future__ import annotations

import json

import pytest

from projections.sparql import QueryRefused, run
from tests.factories import remembered
from tests.tenant import Tenant

E = "PREFIX e: <https://engram.dev/ns#> "


@pytest.fixture
def acme(tenant: Tenant) -> Tenant:
    for i in range(5):
        tenant.apply("MemoryRemembered", remembered(f"m{i}", label=f'label "{i}" with SERVICE in it'))
    return tenant


def ask(t: Tenant, query: str, accept: str = "application/sparql-results+json", rows: int = 100) -> object:
    return run(t.graph, query, accept, timeout_s=10, max_rows=rows)


def test_select_in_every_results_format(acme: Tenant) -> None:
    q = E + "SELECT ?id ?label WHERE { ?m e:memoryId ?id ; e:label ?label } ORDER BY ?id"
    answer = ask(acme, q)
    body = json.loads(answer.body)  # type: ignore[attr-defined]
    assert body["head"]["vars"] == ["id", "label"]
    assert [b["id"]["value"] for b in body["results"]["bindings"]] == [f"m{i}" for i in range(5)]
    assert body["results"]["bindings"][0]["label"] == {
        "type": "literal",
        "value": 'label "0" with SERVICE in it',
    }
    csv = ask(acme, q, "text/csv").body  # type: ignore[attr-defined]
    assert csv.splitlines()[0] == "id,label" and '"label ""0"" with SERVICE in it"' in csv
    tsv = ask(acme, q, "text/tab-separated-values").body  # type: ignore[attr-defined]
    assert tsv.splitlines()[0] == "?id\t?label" and len(tsv.splitlines()) == 6


def test_ask_construct_and_the_cap(acme: Tenant) -> None:
    assert json.loads(ask(acme, E + "ASK { ?m e:memoryId 'm3' }").body)["boolean"] is True  # type: ignore[attr-defined]
    graph = ask(acme, E + "CONSTRUCT { ?m e:memoryId ?id } WHERE { ?m e:memoryId ?id }", "text/turtle")
    assert graph.media_type == "text/turtle" and graph.body.count(" .\n") == 5  # type: ignore[attr-defined]
    capped = ask(acme, E + "SELECT ?m WHERE { ?m e:memoryId ?id }", rows=2)
    assert capped.truncated and len(json.loads(capped.body)["results"]["bindings"]) == 2  # type: ignore[attr-defined]


def test_the_checkpoint_and_vectors_are_not_the_querys(acme: Tenant) -> None:
    everything = ask(acme, "SELECT DISTINCT ?g WHERE { GRAPH ?g { ?s ?p ?o } }")
    graphs = {b["g"]["value"] for b in json.loads(everything.body)["results"]["bindings"]}  # type: ignore[attr-defined]
    assert graphs <= {"urn:engram:graph:asserted", "urn:engram:graph:inferred", "urn:engram:graph:ontology"}


@pytest.mark.parametrize(
    ("query", "reason"),
    [
        ("SELECT * WHERE { SERVICE <http://example.org/sparql> { ?s ?p ?o } }", "SERVICE is not allowed"),
        ("INSERT DATA { <urn:a> <urn:b> <urn:c> }", "INSERT is not allowed"),
        ("DELETE WHERE { ?s ?p ?o }", "DELETE is not allowed"),
        ("LOAD <http://example.org/x.ttl>", "LOAD is not allowed"),
        ("SELECT ?x WHERE { ?x", "not a SPARQL query"),
        ("x" * 20_001, "at most 20000 characters"),
    ],
)
def test_what_a_read_only_endpoint_refuses(acme: Tenant, query: str, reason: str) -> None:
    with pytest.raises(QueryRefused, match=reason):
        ask(acme, query)


def test_a_format_nobody_asked_for_is_406(acme: Tenant) -> None:
    with pytest.raises(QueryRefused, match="406"):
        ask(acme, "SELECT * WHERE { ?s ?p ?o } LIMIT 1", "application/pdf")
