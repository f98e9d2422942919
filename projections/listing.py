"""A tenant's memories in listing order (newest recorded first), with the asserted facts a list
filters on: the memories route's page and count without sorting the whole store on every call.

It is a cache of the asserted graph, held by ``TenantGraph`` and kept current by the deltas it
commits (``apply``); any other write leaves it stale and the next read builds it again from the
store (``build``: the order's two columns; ``need``: a scan per further column).
``tests/projections/test_listing.py`` checks it against the SPARQL query it replaced, after random
runs of events. Read and written on the event loop only (the projector's commits and the routes
that list), so it takes no lock; a read moved to a thread would need one.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from engram.projections.terms import ASSERTED, INFERRED, MEMORY_PREFIX, RDF_TYPE, e, time_order
from engram.schemas import vocabulary as v
from pyoxigraph import NamedNode, Quad, Store

ONE_VALUED = ("memoryId", "recordedAt", "kind", "scope", "stakeholderUser")
TRACKED = {e(name): name for name in (*ONE_VALUED, "stakeholderTeam")}


@dataclass(slots=True)
class Row:
    """What a list filters and sorts one memory by; listed once it has an id and a recording time.
    (Slots, and no set until a team is held: ~100k of these per large tenant.)"""

    iri: str
    facts: dict[str, str] = field(default_factory=dict)
    teams: set[str] | None = None


class Listing:
    """Rows by memory IRI; the listing order is computed again only after a change."""

    def __init__(self, generation: int) -> None:
        self.generation = generation  # the graph's generation this reflects (``TenantGraph``)
        self._rows: dict[str, Row] = {}
        self._loaded: set[str] = set()  # the columns read so far (``need``)
        self._typed: dict[NamedNode, set[str]] = {}  # ``of_class``, until the next commit
        self._order: list[Row] | None = None

    @classmethod
    def build(cls, store: Store, generation: int) -> Listing:
        """The order alone (ids and recording times); ``need`` reads the columns a filter uses."""
        listing = cls(generation)
        listing.need(store, ("memoryId", "recordedAt"))
        return listing

    def need(self, store: Store, names: Iterable[str]) -> None:
        """Read these columns from ``store`` (a scan each) unless held: the store is at the
        generation this listing reflects, and from then on the commits keep them too."""
        rows = self._rows
        for name in names:
            if name in self._loaded:
                continue
            self._loaded.add(name)
            self._order = None
            for q in store.quads_for_pattern(None, e(name), None, ASSERTED):  # only what differs per quad
                iri = q.subject.value
                if not iri.startswith(MEMORY_PREFIX):
                    continue
                row = rows.get(iri)
                if row is None:
                    row = rows[iri] = Row(iri)
                if name == "stakeholderTeam":
                    row.teams = (row.teams or set()) | {q.object.value}
                else:
                    row.facts[name] = q.object.value

    def apply(self, adds: Iterable[Quad], removes: Iterable[Quad]) -> None:
        """A committed delta (removals first: a replaced value is a removal and an addition)."""
        self._typed.clear()  # the rules may have concluded otherwise
        self._set(removes, add=False)
        self._set(adds, add=True)

    def _set(self, quads: Iterable[Quad], *, add: bool) -> None:
        for q in quads:
            name = TRACKED.get(q.predicate)  # type: ignore[call-overload]
            if name not in self._loaded or q.graph_name != ASSERTED:
                continue
            iri = q.subject.value
            if not iri.startswith(MEMORY_PREFIX):
                continue
            self._order = None
            row = self._rows.get(iri)
            if row is None:
                row = self._rows[iri] = Row(iri)
            value = q.object.value
            if name == "stakeholderTeam":
                row.teams = (row.teams or set()) | {value} if add else (row.teams or set()) - {value}
            elif add:
                row.facts[name] = value
            elif row.facts.get(name) == value:
                del row.facts[name]
            if not add and not row.facts and not row.teams:
                del self._rows[iri]

    def of_class(self, store: Store, cls: NamedNode) -> set[str]:
        """The IRIs of the nodes of class ``cls``, asserted or inferred: read once between two
        commits (classes are the rules' too, so the deltas alone do not keep them)."""
        found = self._typed.get(cls)
        if found is None:
            found = self._typed[cls] = {
                q.subject.value
                for g in (ASSERTED, INFERRED)
                for q in store.quads_for_pattern(None, RDF_TYPE, cls, g)
            }
        return found

    def rows(self) -> list[Row]:
        """Every listed memory's row (one with an id and a recording time), newest recorded first,
        then by id (as ``ORDER BY DESC(?at) ?id``: two stable sorts, the last key first)."""
        if self._order is None:
            listed = [
                row for row in self._rows.values() if "memoryId" in row.facts and "recordedAt" in row.facts
            ]
            listed.sort(key=lambda row: row.facts["memoryId"])
            listed.sort(key=lambda row: time_order(row.facts["recordedAt"]), reverse=True)
            self._order = listed
        return self._order


def team_scoped(row: Row) -> frozenset[str]:
    """The teams that may see a team memory (none for any other scope)."""
    return frozenset(row.teams or ()) if row.facts.get("scope") == v.Scope.TEAM else frozenset()
