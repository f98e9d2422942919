"""The SPARQL route over a real `engram serve`: no query reaches the network, a runaway query is
stopped and frees its place, and legal queries named like keywords are answered."""

from __future__ import annotations

import concurrent.futures
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engram.settings import Settings
from tests.harness import Server, isolated_settings

CORPUS = Path(__file__).resolve().parents[1] / "corpus" / "sparql_service.txt"
LIMIT_S = 1.0
# a COUNT over a cross product of the ontology graph (~10^9 rows): it runs for minutes, and
# oxigraph yields nothing before it ends
RUNAWAY = "SELECT (COUNT(*) AS ?c) WHERE { ?a ?p ?x . ?b ?q ?y . ?c ?r ?z }"
QUICK = "PREFIX e: <https://engram.dev/ns#> SELECT ?id WHERE { ?m e:memoryId ?id }"


def remember(server: Server, tenant: str, memory_id: str) -> None:
    body = {"memory_id": memory_id, "label": "Meta cap", "content": "Max $40k/month on Meta",
            "kind": "fact", "importance": 3, "source": "operator"}  # fmt: skip
    r = server.http.post(f"{server.url}/v1/tenants/{tenant}/memories", params={"wait": "true"}, json=body)
    assert r.status_code == 202, r.text


@pytest.fixture(scope="module")
def server(broker: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One server for the module, its SPARQL limit short; two tenants with a memory each."""
    import asyncio

    from engram.streams.topics import ensure_topics

    tmp = tmp_path_factory.mktemp("sparql")
    settings = isolated_settings(broker, tmp / "data").model_copy(update={"sparql_timeout_s": LIMIT_S})
    asyncio.run(ensure_topics(settings))
    srv = Server(settings, tmp / "server.log").start()
    srv.wait_ready()
    remember(srv, "acme", "m1")
    remember(srv, "globex", "g1")
    yield srv
    srv.stop()


def sparql(server: Server, tenant: str, query: str, accept: str | None = None) -> Any:
    headers = server.bearer(tenant, role="auditor", user="audrey")
    if accept is not None:
        headers["Accept"] = accept
    return server.http.post(
        f"{server.url}/v1/tenants/{tenant}/sparql", json={"query": query}, headers=headers
    )


class Listener:
    """A TCP listener on 127.0.0.1 (and ::1 when there is one) counting every connection."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET6 if socket.has_ipv6 else socket.AF_INET)
        if self.sock.family == socket.AF_INET6:
            self.sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            self.sock.bind(("::", 0))
        else:
            self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.sock.listen(64)
        self.sock.settimeout(0.1)
        self.seen: list[Any] = []
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while not self.stopped.is_set():
            try:
                conn, peer = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.seen.append(peer)
            conn.close()

    def close(self) -> None:
        self.stopped.set()
        self.thread.join()
        self.sock.close()


def corpus(port: int) -> list[str]:
    blocks = CORPUS.read_text().split("\n%%\n")[1:]
    return [b.strip("\n").replace("{PORT}", str(port)) for b in blocks if b.strip()]


def test_no_spelling_of_service_reaches_the_network(server: Server) -> None:
    listener = Listener()
    try:
        queries = corpus(listener.port)
        assert len(queries) >= 30
        for query in queries:
            r = sparql(server, "acme", query)
            assert r.status_code == 200 or 400 <= r.status_code < 500, (query, r.status_code, r.text)
            if r.status_code == 200:
                if r.headers["content-type"].startswith("application/sparql-results+json"):
                    body = r.json()  # FROM <remote> is not fetched: the tenant's graphs are the dataset
                    assert "boolean" in body or isinstance(body["results"]["bindings"], list), (query, r.text)
                else:
                    assert r.text == "", (query, r.text)
            else:
                assert r.json()["detail"][0]["msg"], (query, r.text)
        time.sleep(0.2)  # a connection on its way would be accepted by now
    finally:
        listener.close()
    assert listener.seen == [], listener.seen


def test_a_service_that_cannot_connect_is_a_422_naming_service(server: Server) -> None:
    r = sparql(server, "acme", "SELECT * WHERE { SERVICE <http://127.0.0.1:9/> { ?s ?p ?o } }")
    assert r.status_code == 422, r.text
    assert "SERVICE is not evaluated" in r.json()["detail"][0]["msg"]


@pytest.mark.parametrize(
    "query",
    [
        "SELECT ?delete WHERE { ?m <https://engram.dev/ns#memoryId> ?delete }",
        "SELECT ?service ?load ?insert WHERE { ?service <https://engram.dev/ns#memoryId> ?load "
        "OPTIONAL { ?service <urn:x> ?insert } }",
        "PREFIX x: <urn:x:> SELECT ?s WHERE { ?s ?p x:with }",
        "PREFIX x: <urn:x:> SELECT ?s WHERE { ?s x:insert ?o . ?s x:drop ?o }",
        "PREFIX service: <urn:s:> SELECT ?clear WHERE { ?clear service:copy ?move }",
        "SELECT ?m WHERE { ?m <https://engram.dev/ns#label> ?l FILTER(CONTAINS(?l, 'DELETE')) }",
        "ASK { ?create ?add ?copy }",
    ],
)
def test_legal_queries_named_like_keywords_are_answered(server: Server, query: str) -> None:
    r = sparql(server, "acme", query)
    assert r.status_code == 200, r.text


def test_updates_are_refused_with_a_reason(server: Server) -> None:
    for update in ("INSERT DATA { <urn:a> <urn:b> <urn:c> }", "DELETE WHERE { ?s ?p ?o }", "CLEAR ALL"):
        r = sparql(server, "acme", update)
        assert r.status_code == 422 and "not a SPARQL query" in r.json()["detail"][0]["msg"], r.text
    assert [b["id"]["value"] for b in sparql(server, "acme", QUICK).json()["results"]["bindings"]] == ["m1"]


def test_runaway_queries_are_stopped_at_the_limit_and_free_their_places(server: Server) -> None:
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        started = time.monotonic()
        runaways = [pool.submit(sparql, server, "acme", RUNAWAY) for _ in range(2)]
        answers = [f.result() for f in runaways]
        limited = time.monotonic()
    for r in answers:
        assert r.status_code == 422 and "time limit" in r.json()["detail"][0]["msg"], r.text
    assert limited - started < LIMIT_S + 1.5, limited - started
    other = sparql(server, "globex", QUICK)
    answered = time.monotonic() - limited
    assert other.status_code == 200, other.text
    assert [b["id"]["value"] for b in other.json()["results"]["bindings"]] == ["g1"]
    assert answered < 1.0, answered


def test_results_never_cross_threads(server: Server) -> None:
    """DESCRIBE, CONSTRUCT and SELECT, some answered 406: pyoxigraph's results are made, read and
    dropped on one thread, so the server's output never says one was dropped on another."""
    q = "PREFIX e: <https://engram.dev/ns#> "
    cases = [
        (q + "DESCRIBE ?m WHERE { ?m e:memoryId ?id }", "application/n-triples", 200),
        (q + "DESCRIBE ?m WHERE { ?m e:memoryId ?id }", "application/sparql-results+json", 406),
        (q + "CONSTRUCT { ?m e:memoryId ?id } WHERE { ?m e:memoryId ?id }", "text/turtle", 200),
        (q + "CONSTRUCT { ?m e:memoryId ?id } WHERE { ?m e:memoryId ?id }", "text/csv", 406),
        (QUICK, "text/csv", 200),
        (QUICK, "application/n-triples", 406),
    ]
    for _ in range(10):
        for query, accept, status in cases:
            r = sparql(server, "acme", query, accept)
            assert r.status_code == status, (query, accept, r.text)
            if status == 406:
                assert "available as" in r.json()["detail"][0]["msg"]
    graph = sparql(server, "acme", q + "DESCRIBE ?m WHERE { ?m e:memoryId ?id }", "text/turtle")
    assert graph.headers["content-type"].startswith("text/turtle") and "m1" in graph.text
    time.sleep(0.5)
    log = server.log_path.read_text()
    assert "unsendable" not in log and "another thread" not in log, log[-3000:]


def test_rows_past_the_cap_are_cut_and_said_so(server: Server) -> None:
    r = sparql(server, "acme", "SELECT ?a ?b WHERE { ?a ?p ?x . ?b ?q ?y } LIMIT 10001")
    assert r.status_code == 200 and r.headers.get("x-result-truncated") == "true"
    assert len(r.json()["results"]["bindings"]) == 10_000
    assert json.loads(sparql(server, "acme", "ASK { ?s ?p ?o }").text)["boolean"] is True
