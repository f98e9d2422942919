"""A tenant's memories in listing order (newest recorded first), with the asserted facts a list
filters on: the memories route's page and count without sorting the whole store on every call.

It is a cache of the asserted graph, held by ``TenantGraph`` and kept current by the deltas it
commits (``apply``); any other write leaves it stale and the next read builds it again from the
store (``build``: the recording times, one scan; ``need``: a scan per further column).

A scan costs some microseconds a quad in pyoxigraph (it makes a Python quad of each), so a build
reads no more than it must: a memory's id is its IRI's tail (``terms.memory_iri``), and ``scope``
is read for the scopes other than company alone (a memory is remembered with its recording time
and scope in one event, and neither is ever removed or changed: forgetting keeps the node), so a
listed memory without one is a company memory. Columns, not rows: a column is one dict from IRI to
value, built by one comprehension over its scan.

``tests/projections/test_listing.py`` checks it against the SPARQL query it replaced, after random
runs of events. Read and written on the event loop only (the projector's commits and the routes
that list), so it takes no lock; a read moved to a thread would need one.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import chain

from engram.projections.terms import ASSERTED, INFERRED, MEMORY_PREFIX, RDF_TYPE, e, time_order
from engram.schemas import vocabulary as v
from pyoxigraph import Literal, NamedNode, Quad, Store

RECORDED = "recordedAt"  # the column the order is by
TEAMS = "stakeholderTeam"  # the one column of several values per memory
ONE_VALUED = (RECORDED, "kind", "scope", "stakeholderUser", "importance")
TRACKED = {e(name): name for name in (*ONE_VALUED, TEAMS)}
PREFIX = len(MEMORY_PREFIX)
COMPANY = v.Scope.COMPANY.value  # what a listed memory without a scope in its column holds
SCOPES_READ = tuple(Literal(s.value) for s in v.Scope if s.value != COMPANY)


def listed_id(iri: str) -> str:
    """A listed memory's id: its IRI's tail."""
    return iri[PREFIX:]


class Listing:
    """Columns by memory IRI; the listing order is computed again only after a recording time
    changes."""

    def __init__(self, generation: int) -> None:
        self.generation = generation  # the graph's generation this reflects (``TenantGraph``)
        self._columns: dict[str, dict[str, str]] = {}  # the one-valued columns read so far
        self._teams: dict[str, set[str]] | None = None  # stakeholderTeam, once read
        self._typed: dict[NamedNode, set[str]] = {}  # ``of_class``, until the next commit
        self._order: list[str] | None = None

    @classmethod
    def build(cls, store: Store, generation: int) -> Listing:
        """The order alone (the recording times); ``need`` reads the columns a filter uses."""
        listing = cls(generation)
        listing.need(store, (RECORDED,))
        return listing

    def need(self, store: Store, names: Iterable[str]) -> None:
        """Read these columns from ``store`` (a scan each) unless held: the store is at the
        generation this listing reflects, and from then on the commits keep them too."""
        for name in names:
            if name in self._columns or (name == TEAMS and self._teams is not None):
                continue
            predicate = e(name)
            if name == "scope":  # company, the scope of most, is what a memory without one holds
                found: Iterable[Quad] = chain.from_iterable(
                    store.quads_for_pattern(None, predicate, s, ASSERTED) for s in SCOPES_READ
                )
            else:
                found = store.quads_for_pattern(None, predicate, None, ASSERTED)
            if name == TEAMS:
                teams: dict[str, set[str]] = {}
                for q in found:
                    if q.subject.value.startswith(MEMORY_PREFIX):
                        teams.setdefault(q.subject.value, set()).add(q.object.value)
                self._teams = teams
                continue
            self._columns[name] = {
                q.subject.value: q.object.value for q in found if q.subject.value.startswith(MEMORY_PREFIX)
            }
            if name == RECORDED:
                self._order = None

    def apply(self, adds: Iterable[Quad], removes: Iterable[Quad]) -> None:
        """A committed delta (removals first: a replaced value is a removal and an addition)."""
        self._typed.clear()  # the rules may have concluded otherwise
        self._set(removes, add=False)
        self._set(adds, add=True)

    def _set(self, quads: Iterable[Quad], *, add: bool) -> None:
        for q in quads:
            name = TRACKED.get(q.predicate)  # type: ignore[call-overload]
            if name is None or q.graph_name != ASSERTED:
                continue
            iri = q.subject.value
            if not iri.startswith(MEMORY_PREFIX):
                continue
            value = q.object.value
            if name == TEAMS:
                if self._teams is None:
                    continue
                held = self._teams.get(iri, set())
                held = held | {value} if add else held - {value}
                if held:
                    self._teams[iri] = held
                else:
                    self._teams.pop(iri, None)
                continue
            column = self._columns.get(name)
            if column is None:
                continue
            if name == RECORDED:
                self._order = None
            if add:
                column[iri] = value
            elif column.get(iri) == value:
                del column[iri]

    def column(self, name: str) -> dict[str, str]:
        """A one-valued column read so far (``need``): memory IRI -> the value's text."""
        return self._columns[name]

    def scope(self, iri: str) -> str:
        """A listed memory's scope (``need("scope")`` first)."""
        return self._columns["scope"].get(iri, COMPANY)

    def team_scoped(self, iri: str) -> frozenset[str]:
        """The teams that may see a team memory (none for any other scope; ``need`` both)."""
        if self.scope(iri) != v.Scope.TEAM:
            return frozenset()
        assert self._teams is not None, "need stakeholderTeam first"
        return frozenset(self._teams.get(iri, ()))

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

    def rows(self) -> list[str]:
        """Every listed memory's IRI (one with a recording time), newest recorded first, then by id
        (as ``ORDER BY DESC(?at) ?id``: two stable sorts, the last key first; the IRIs sort as the
        ids do, one prefix before each)."""
        if self._order is None:
            at = self._columns[RECORDED]
            listed = sorted(at)
            listed.sort(key=lambda iri: time_order(at[iri]), reverse=True)
            self._order = listed
        return self._order
