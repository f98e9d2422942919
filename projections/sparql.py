"""Read-only SPARQL over one tenant's store: queries only, no SERVICE, the tenant's graphs only,
a time limit and a row cap, answered in the standard result formats."""

from __future__ import annotations

import csv
import io
import json
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pyoxigraph import BlankNode, Literal, NamedNode, QueryBoolean, QuerySolutions, Triple

from projections.tenant_graph import TenantGraph
from projections.terms import ASSERTED, INFERRED, ONTOLOGY

GRAPHS = [ASSERTED, INFERRED, ONTOLOGY]  # not the checkpoint (meta) or the vectors
MAX_QUERY_CHARS = 20_000
# What a read-only endpoint never runs, found outside strings, IRIs and comments.
FORBIDDEN = re.compile(
    r"\b(SERVICE|LOAD|INSERT|DELETE|CLEAR|DROP|CREATE|ADD|MOVE|COPY|WITH)\b", re.IGNORECASE
)
QUOTED = re.compile(
    r'"""[\s\S]*?"""|\'\'\'[\s\S]*?\'\'\'|"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\'|<[^<>\s]*>|#[^\n]*'
)

SELECT_TYPES = {
    "application/sparql-results+json": "json",
    "text/csv": "csv",
    "text/tab-separated-values": "tsv",
}
GRAPH_TYPES = {"application/n-triples": "nt", "text/turtle": "nt"}  # N-Triples is Turtle too


class QueryRefused(ValueError):
    """A query this endpoint does not run; the message says why (a 422, or 406 for a format)."""


@dataclass(frozen=True)
class Answer:
    body: str
    media_type: str
    truncated: bool = False


def run(graph: TenantGraph, query: str, accept: str, *, timeout_s: float, max_rows: int) -> Answer:
    if len(query) > MAX_QUERY_CHARS:
        raise QueryRefused(f"a query is at most {MAX_QUERY_CHARS} characters")
    bare = QUOTED.sub(" ", query)
    if found := FORBIDDEN.search(bare):
        raise QueryRefused(f"read-only: {found.group(1).upper()} is not allowed")
    try:
        result = graph.store.query(query, default_graph=GRAPHS, named_graphs=GRAPHS)
    except SyntaxError as exc:
        raise QueryRefused(f"not a SPARQL query: {exc}") from exc
    deadline = time.monotonic() + timeout_s
    if isinstance(result, QueryBoolean):
        return Answer(json.dumps({"head": {}, "boolean": bool(result)}), "application/sparql-results+json")
    if isinstance(result, QuerySolutions):
        fmt = _negotiate(accept, SELECT_TYPES)
        names = [v.value for v in result.variables]
        rows, truncated = _take(result, max_rows, deadline)
        return Answer(_solutions(names, rows, fmt), _media(fmt, SELECT_TYPES), truncated)
    fmt = _negotiate(accept, GRAPH_TYPES)
    triples, truncated = _take(result, max_rows, deadline)
    return Answer("".join(f"{t} .\n" for t in triples), _media(fmt, GRAPH_TYPES, accept), truncated)


def _take(items: Iterable[Any], cap: int, deadline: float) -> tuple[list[Any], bool]:
    out = []
    for item in items:
        if len(out) == cap:
            return out, True
        if time.monotonic() > deadline:
            raise QueryRefused("the query took longer than its time limit; narrow it")
        out.append(item)
    return out, False


def _negotiate(accept: str, types: dict[str, str]) -> str:
    wanted = [part.split(";")[0].strip().lower() for part in (accept or "*/*").split(",")]
    for media in wanted:
        if media in types:
            return types[media]
        if media in ("*/*", "application/*", "text/*", ""):
            return next(iter(types.values()))
    raise QueryRefused(f"406: this result is available as {', '.join(types)}")


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
