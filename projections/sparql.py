"""Read-only SPARQL over one tenant's store: queries only, the tenant's graphs only, a row cap,
answered in the standard result formats.

``answer`` evaluates in the calling process and thread, and reads the results to the end (or the
cap) there: pyoxigraph's result iterators must be made, read and dropped on one thread. The
server never calls it itself; it runs in the sandboxed evaluator (``projections.sparql_sandbox``),
a process with no network, which is what keeps ``SERVICE`` from fetching anything: a query is
never vetted by reading its text.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from engram.schemas import vocabulary as v
from pyoxigraph import BlankNode, Literal, NamedNode, QueryBoolean, QuerySolutions, Store, Triple

GRAPHS = [NamedNode(g) for g in (v.GRAPH_ASSERTED, v.GRAPH_INFERRED, v.GRAPH_ONTOLOGY)]  # no meta, vectors
MAX_QUERY_CHARS = 20_000

SELECT_TYPES = {
    "application/sparql-results+json": "json",
    "text/csv": "csv",
    "text/tab-separated-values": "tsv",
}
GRAPH_TYPES = {"application/n-triples": "nt", "text/turtle": "nt"}  # N-Triples is Turtle too
NO_NETWORK = "a query never reaches the network: SERVICE is not evaluated"


class QueryRefused(ValueError):
    """A query this endpoint does not answer; ``status`` is the HTTP answer (406, 422 or 503)."""

    def __init__(self, reason: str, status: int = 422) -> None:
        super().__init__(reason)
        self.status = status


@dataclass(frozen=True)
class Answer:
    body: str
    media_type: str
    truncated: bool = False


def answer(store: Store, query: str, accept: str, *, max_rows: int) -> Answer:
    """The query's answer in the format ``accept`` asks for, at most ``max_rows`` rows or triples.
    The format is chosen before the first row is read, so a 406 evaluates nothing."""
    if len(query) > MAX_QUERY_CHARS:
        raise QueryRefused(f"a query is at most {MAX_QUERY_CHARS} characters")
    try:
        result = store.query(query, default_graph=GRAPHS, named_graphs=GRAPHS)
        if isinstance(result, QueryBoolean):
            return Answer(
                json.dumps({"head": {}, "boolean": bool(result)}), "application/sparql-results+json"
            )
        if isinstance(result, QuerySolutions):
            fmt = _negotiate(accept, SELECT_TYPES)
            names = [var.value for var in result.variables]
            rows, truncated = _take(result, max_rows)
            return Answer(_solutions(names, rows, fmt), _media(fmt, SELECT_TYPES), truncated)
        fmt = _negotiate(accept, GRAPH_TYPES)
        triples, truncated = _take(result, max_rows)
        return Answer("".join(f"{t} .\n" for t in triples), _media(fmt, GRAPH_TYPES, accept), truncated)
    except SyntaxError as exc:
        raise QueryRefused(
            f"not a SPARQL query (SELECT, ASK, CONSTRUCT or DESCRIBE; no updates): {exc}"
        ) from None
    except OSError as exc:  # the network refused (the sandbox), or the store could not be read
        if reached_for_the_network(exc):
            raise QueryRefused(NO_NETWORK) from None
        raise
    except RuntimeError as exc:  # an evaluation error: the query's own doing
        if "service" in str(exc).lower():
            raise QueryRefused(f"{NO_NETWORK} ({exc})") from None
        raise QueryRefused(f"the query could not be evaluated: {exc}") from None


def reached_for_the_network(exc: OSError) -> bool:
    """Whether an evaluation error is the sandbox refusing a connection (or the name lookup
    before one): only SERVICE asks for either."""
    text = str(exc).lower()
    return isinstance(exc, PermissionError) or any(
        s in text for s in ("operation not permitted", "lookup address", "connect", "http", "tls")
    )


def _take(items: Iterable[Any], cap: int) -> tuple[list[Any], bool]:
    out = []
    for item in items:
        if len(out) == cap:
            return out, True
        out.append(item)
    return out, False


def _negotiate(accept: str, types: dict[str, str]) -> str:
    wanted = [part.split(";")[0].strip().lower() for part in (accept or "*/*").split(",")]
    for media in wanted:
        if media in types:
            return types[media]
        if media in ("*/*", "application/*", "text/*", ""):
            return next(iter(types.values()))
    raise QueryRefused(f"this result is available as {', '.join(types)}", 406)


def _media(fmt: str, types: dict[str, str], accept: str = "") -> str:
    chosen = [m for m, f in types.items() if f == fmt]
    return "text/turtle" if "text/turtle" in accept and "text/turtle" in chosen else chosen[0]


def _term(term: Any) -> dict[str, str]:
    if isinstance(term, NamedNode):
        return {"type": "uri", "value": term.value}
    if isinstance(term, BlankNode):
        return {"type": "bnode", "value": term.value}
    if isinstance(term, Literal):
        out = {"type": "literal", "value": term.value}
        if term.language:
            out["xml:lang"] = term.language
        elif term.datatype.value != "http://www.w3.org/2001/XMLSchema#string":
            out["datatype"] = term.datatype.value
        return out
    if isinstance(term, Triple):
        return {"type": "triple", "value": str(term)}
    return {"type": "literal", "value": str(term)}


def _solutions(names: list[str], rows: list[Any], fmt: str) -> str:
    if fmt == "json":
        bindings = [{n: _term(row[n]) for n in names if row[n] is not None} for row in rows]
        return json.dumps({"head": {"vars": names}, "results": {"bindings": bindings}})
    out = io.StringIO()
    if fmt == "csv":
        writer = csv.writer(out, lineterminator="\r\n")
        writer.writerow(names)
        for row in rows:
            writer.writerow(["" if row[n] is None else getattr(row[n], "value", str(row[n])) for n in names])
        return out.getvalue()
    out.write("\t".join(f"?{n}" for n in names) + "\n")
    for row in rows:
        out.write("\t".join("" if row[n] is None else str(row[n]) for n in names) + "\n")
    return out.getvalue()
