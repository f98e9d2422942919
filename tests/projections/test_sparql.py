"""Read-only SPARQL over a tenant's real store, and the sandbox it is evaluated in."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from engram.projections.no_network import SandboxUnavailable, program
from engram.projections.sparql import NO_NETWORK, Answer, QueryRefused, answer
from engram.projections.sparql_evaluator import with_fresh_opens
from engram.projections.sparql_sandbox import Sandbox, Unavailable
from engram.projections.terms import ASSERTED
from pyoxigraph import Literal, NamedNode, Quad, Store

from tests.factories import remembered
from tests.tenant import Tenant

E = "PREFIX e: <https://engram.dev/ns#> "


@pytest.fixture
def acme(tenant: Tenant) -> Tenant:
    for i in range(5):
        tenant.apply("MemoryRemembered", remembered(f"m{i}", label=f'label "{i}" with SERVICE in it'))
    return tenant


def ask(t: Tenant, query: str, accept: str = "application/sparql-results+json", rows: int = 100) -> Answer:
    return answer(t.graph.store, query, accept, max_rows=rows)


def test_select_in_every_results_format(acme: Tenant) -> None:
    q = E + "SELECT ?id ?label WHERE { ?m e:memoryId ?id ; e:label ?label } ORDER BY ?id"
    body = json.loads(ask(acme, q).body)
    assert body["head"]["vars"] == ["id", "label"]
    assert [b["id"]["value"] for b in body["results"]["bindings"]] == [f"m{i}" for i in range(5)]
    assert body["results"]["bindings"][0]["label"] == {
        "type": "literal",
        "value": 'label "0" with SERVICE in it',
    }
    csv = ask(acme, q, "text/csv").body
    assert csv.splitlines()[0] == "id,label" and '"label ""0"" with SERVICE in it"' in csv
    tsv = ask(acme, q, "text/tab-separated-values").body
    assert tsv.splitlines()[0] == "?id\t?label" and len(tsv.splitlines()) == 6


def test_ask_construct_and_the_cap(acme: Tenant) -> None:
    assert json.loads(ask(acme, E + "ASK { ?m e:memoryId 'm3' }").body)["boolean"] is True
    graph = ask(acme, E + "CONSTRUCT { ?m e:memoryId ?id } WHERE { ?m e:memoryId ?id }", "text/turtle")
    assert graph.media_type == "text/turtle" and graph.body.count(" .\n") == 5
    capped = ask(acme, E + "SELECT ?m WHERE { ?m e:memoryId ?id }", rows=2)
    assert capped.truncated and len(json.loads(capped.body)["results"]["bindings"]) == 2


def test_the_checkpoint_and_vectors_are_not_the_querys(acme: Tenant) -> None:
    everything = ask(acme, "SELECT DISTINCT ?g WHERE { GRAPH ?g { ?s ?p ?o } }")
    graphs = {b["g"]["value"] for b in json.loads(everything.body)["results"]["bindings"]}
    assert graphs <= {"urn:engram:graph:asserted", "urn:engram:graph:inferred", "urn:engram:graph:ontology"}


@pytest.mark.parametrize(
    ("query", "reason"),
    [
        ("INSERT DATA { <urn:a> <urn:b> <urn:c> }", "not a SPARQL query"),
        ("DELETE WHERE { ?s ?p ?o }", "not a SPARQL query"),
        ("LOAD <http://example.org/x.ttl>", "not a SPARQL query"),
        ("SELECT ?x WHERE { ?x", "not a SPARQL query"),
        ("SELECT * WHERE { VALUES ?e { <urn:e> } SERVICE ?f { ?s ?p ?o } }", NO_NETWORK),
        ("x" * 20_001, "at most 20000 characters"),
    ],
)
def test_what_a_read_only_endpoint_refuses(acme: Tenant, query: str, reason: str) -> None:
    with pytest.raises(QueryRefused, match=reason) as refused:
        ask(acme, query)
    assert refused.value.status == 422


def test_keywords_as_names_are_answered(acme: Tenant) -> None:
    q = E + "PREFIX x: <urn:x:> SELECT ?delete ?service WHERE { ?delete e:memoryId ?service "
    rows = json.loads(ask(acme, q + "OPTIONAL { ?delete x:with x:insert } }").body)["results"]["bindings"]
    assert len(rows) == 5


def test_a_format_nobody_asked_for_is_406(acme: Tenant) -> None:
    with pytest.raises(QueryRefused, match="available as") as refused:
        ask(acme, "SELECT * WHERE { ?s ?p ?o } LIMIT 1", "application/pdf")
    assert refused.value.status == 406


# -- the sandbox -------------------------------------------------------------------------------
def test_the_filter_leaves_no_network_and_keeps_local_sockets() -> None:
    code = (
        "import socket; from projections.no_network import deny_network; deny_network()\n"
        "socket.socket(socket.AF_UNIX).close()\n"
        "for family in (socket.AF_INET, socket.AF_INET6, socket.AF_NETLINK, socket.AF_PACKET):\n"
        "    kind = socket.SOCK_RAW if family == socket.AF_PACKET else socket.SOCK_DGRAM\n"
        "    try: socket.socket(family, kind)\n"
        "    except PermissionError: continue\n"
        "    raise SystemExit(f'family {family} opened')\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert run.returncode == 0, run.stderr


def test_a_machine_without_a_filter_is_refused() -> None:
    with pytest.raises(SandboxUnavailable, match="no seccomp filter"):
        program("riscv64")


def test_without_the_sandbox_nothing_is_evaluated(acme: Tenant) -> None:
    """An evaluator that cannot install its filter says so: every query is refused, not run."""
    says_no = "import os, struct; r = b'prctl refused'; os.write(1, b'N' + struct.pack('>I', len(r)) + r)"

    async def go() -> str:
        sandbox = await Sandbox(5.0, command=(sys.executable, "-c", says_no)).start()
        try:
            with pytest.raises(Unavailable, match="prctl refused"):
                await sandbox.query(str(acme.graph.path), "t", "ASK {}", "*/*", max_rows=10)
            return sandbox.unavailable or ""
        finally:
            await sandbox.close()

    assert "cannot be set up here: prctl refused" in asyncio.run(go())


def test_a_query_past_its_limit_is_killed_and_its_place_is_free_at_once(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "graph"))
    store.extend(
        [Quad(NamedNode(f"urn:s{i}"), NamedNode("urn:p"), Literal(i), ASSERTED) for i in range(3000)]
    )
    store.flush()
    slow = "SELECT (COUNT(*) AS ?c) WHERE { ?a ?p ?x . ?b ?p ?y . ?c ?p ?z }"
    quick = "SELECT ?s WHERE { ?s <urn:p> 7 }"

    async def go() -> tuple[float, float, str]:
        sandbox = await Sandbox(0.5).start()
        try:
            started = time.monotonic()
            results = await asyncio.gather(
                *(sandbox.query(str(tmp_path / "graph"), "t", slow, "*/*", max_rows=10) for _ in range(2)),
                return_exceptions=True,
            )
            limited = time.monotonic()
            for r in results:
                assert isinstance(r, QueryRefused) and "time limit" in str(r), r
            assert not sandbox.busy
            got = await sandbox.query(str(tmp_path / "graph"), "t", quick, "*/*", max_rows=10)
            return limited - started, time.monotonic() - limited, got.body
        finally:
            await sandbox.close()

    limit_took, next_took, body = asyncio.run(go())
    assert limit_took < 1.5, limit_took
    assert next_took < 1.0, next_took  # a replacement evaluator, started when the others were killed
    assert json.loads(body)["results"]["bindings"] == [{"s": {"type": "uri", "value": "urn:s7"}}]


def test_a_table_file_compacted_away_is_read_again_from_a_fresh_handle() -> None:
    """The evaluator's read-only handle can meet a table file the writer compacted away, even just
    after opening it (CI: twice in a row, then a 503): it opens afresh, up to ``FRESH_OPENS`` more
    times, and only a query's own refusal is never asked again."""
    gone = RuntimeError("Corruption: IO error: No such file or directory: While open a file: 000018.sst")
    calls: list[str] = []

    def flaky(failures: int, error: Exception) -> Callable[[], str]:
        def ask() -> str:
            calls.append("ask")
            if calls.count("ask") <= failures:
                raise error
            return "rows"

        return ask

    def forget() -> None:
        calls.append("forget")

    slept: list[float] = []
    assert with_fresh_opens(flaky(2, gone), forget, (0.0, 0.05, 0.1), slept.append) == "rows"
    assert calls == ["ask", "forget", "ask", "forget", "ask"] and slept == [0.0, 0.05]
    calls.clear()
    with pytest.raises(OSError):
        with_fresh_opens(flaky(9, OSError("gone")), forget, (0.0, 0.05), slept.append)
    assert calls.count("ask") == 3
    calls.clear()
    with pytest.raises(QueryRefused):
        with_fresh_opens(flaky(9, QueryRefused("bad")), forget, (0.0,), slept.append)
    assert calls == ["ask"]
