"""Unknown query parameters are refused: a misspelt parameter is an error, not silently ignored."""

from __future__ import annotations

from typing import Any

from engram.api.errors import problem
from fastapi import Request

_known: dict[int, frozenset[str]] = {}


def _query_names(dependant: Any) -> set[str]:
    names = {field.alias for field in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _query_names(sub)
    return names


async def known_query_only(request: Request) -> None:
    """A query parameter the route does not take is refused (422), so a client that misspells
    ``kind`` or ``as_of`` is told so rather than silently answered without it."""
    route = request.scope.get("route")
    if route is None or not request.query_params:
        return
    allowed = _known.get(id(route))
    if allowed is None:
        allowed = _known[id(route)] = frozenset(_query_names(route.dependant))
    unknown = sorted(set(request.query_params) - allowed)
    if unknown:
        takes = ", ".join(sorted(allowed)) or "none"
        raise problem(
            422,
            f"unknown query parameter {unknown[0][:64]!r}; this route takes: {takes}",
            ["query", unknown[0][:64]],
            "unknown_parameter",
        )
