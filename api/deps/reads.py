"""What a read is answered from: the tenant's graph as the principal sees it (``View``), now or as of
the moment an ``as_of`` names (``Moment``), and a memory it may see.

Every read answer is assembled through the principal's filter (``projections.visibility.sight``)
over the graph the answer comes from; here the two are taken together, once, so no route builds a
filter over one graph and answers from another, and a memory the principal may not see is refused
by one check, exactly as one that does not exist (404 ``memory … not found``).

Only ``VisibleMemory`` decides while FastAPI resolves dependencies. A dependency runs before the
route's own parameters and body are checked, so one that refused (or replayed the log) there would
answer a request with two faults by another of them than it always had, and make a request that is
refused anyway pay for a replay: a ``Moment`` replays when the route asks for its view, and a
``View`` refuses a memory when the route names one.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Annotated, Any

from engram.api.deps.principal import CurrentPrincipal
from engram.api.deps.tenant import CurrentRuntime, MemoryId, SearchStore, TenantId, TenantStore, not_found
from engram.api.deps.time_params import AsOfParam, past_stores
from engram.api.runtime import Runtime
from engram.projections.read import get_memory
from engram.projections.stores import TenantStores
from engram.projections.tenant_graph import TenantGraph
from engram.projections.visibility import MemoryFilter, Principal, may_see_memory, sight
from engram.streams.asof import AsOf, Past
from fastapi import Depends, Path


def nothing(memory_id: str) -> bool:
    """The filter over a tenant with no store (yet, or then): there is no memory to name."""
    return False


@dataclass(frozen=True)
class SeenMemory:
    """A memory the principal may see, and the view it was read in (its graph, and the filter the
    rest of the answer is assembled through)."""

    memory: dict[str, Any]
    view: View

    @property
    def id(self) -> str:
        return self.memory["id"]  # type: ignore[no-any-return]

    @property
    def graph(self) -> TenantGraph:
        assert self.view.graph is not None  # a memory was found in it
        return self.view.graph

    @property
    def sees(self) -> MemoryFilter:
        return self.view.sees


@dataclass
class View:
    """A tenant's graph as one principal sees it; ``graph`` is None for a tenant with no store."""

    graph: TenantGraph | None
    who: Principal

    @cached_property
    def sees(self) -> MemoryFilter:
        """The principal's sight of the graph: every memory an answer names passes it."""
        return nothing if self.graph is None else sight(self.graph, self.who)

    def memory(self, memory_id: str, loc: list[str | int] | None = None) -> SeenMemory:
        """The memory, if it exists and the principal may see it, else 404 at ``loc`` (the path by
        default): the two are not told apart."""
        if self.graph is None:
            raise not_found(f"memory {memory_id}", loc)
        found = get_memory(self.graph, memory_id, self.sees)
        if found is None or not may_see_memory(self.who, found):
            raise not_found(f"memory {memory_id}", loc)
        return SeenMemory(found, self)


class Moment:
    """The moment a read is answered at, now or the system time of ``as_of``, for one principal:
    ``await at.view()`` is the tenant's view then, ``await at.stores()`` its stores then. The replay
    an ``as_of`` asks for is made once, when the route first asks."""

    def __init__(
        self, runtime: Runtime, tenant: str, present: TenantGraph | None, as_of: AsOf | None, who: Principal
    ) -> None:
        self.runtime = runtime
        self.tenant = tenant
        self.as_of = as_of
        self.who = who
        self._present = View(present, who)
        self._past: tuple[Past, View] | None = None

    async def _replayed(self) -> tuple[Past, View]:
        assert self.as_of is not None
        if self._past is None:
            past = await past_stores(self.runtime, self.tenant, self.as_of)  # 422 / 503 as_of
            self._past = past, View(past.graph, self.who)
        return self._past

    async def view(self) -> View:
        """The tenant's graph then as the principal sees it: the present one (read-your-writes),
        or the replay's."""
        return self._present if self.as_of is None else (await self._replayed())[1]

    async def stores(self) -> TenantStores:
        """The stores (graphs and indexes) then: the process's, or the replay's."""
        return self.runtime.stores if self.as_of is None else (await self._replayed())[0].stores


# The tenant as the routes declare it (``TenantId``), which checks it before the graph is read; taken
# again here unchecked and unlisted, so a bad id is refused once per route, as before these existed.
PathTenant = Annotated[str, Path(include_in_schema=False)]


async def get_view(graph: TenantStore, who: CurrentPrincipal) -> View:
    return View(graph, who)


async def get_moment(
    tenant: PathTenant,
    graph: TenantStore,
    runtime: CurrentRuntime,
    who: CurrentPrincipal,
    as_of: AsOfParam = None,
) -> Moment:
    return Moment(runtime, tenant, graph, as_of, who)


async def get_search_moment(
    tenant: PathTenant,
    graph: SearchStore,
    runtime: CurrentRuntime,
    who: CurrentPrincipal,
    as_of: AsOfParam = None,
) -> Moment:
    return Moment(runtime, tenant, graph, as_of, who)


async def get_visible_memory(at: GraphAsOf, tenant: TenantId, memory_id: MemoryId) -> SeenMemory:
    return (await at.view()).memory(memory_id)


CurrentView = Annotated[View, Depends(get_view)]
"""The tenant's present graph (read-your-writes) and the principal's sight of it."""
GraphAsOf = Annotated[Moment, Depends(get_moment)]
"""The tenant as of the route's ``as_of`` query parameter, or now."""
SearchAsOf = Annotated[Moment, Depends(get_search_moment)]
"""The same for a search: now is once this process's last write to the tenant is searchable."""
VisibleMemory = Annotated[SeenMemory, Depends(get_visible_memory)]
"""The path's memory as of ``as_of`` (or now), if the principal may see it, else 404; decided while
the dependencies resolve, so for a route with no parameter or body of its own to check first."""
