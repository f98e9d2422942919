"""Where tenants' stores live: one directory per tenant, opened on demand, a bounded number open."""

from __future__ import annotations

import gc
from collections import OrderedDict
from pathlib import Path

from projections.indexes import TenantIndexes
from projections.knowledge import Knowledge, load_knowledge
from projections.tenant_graph import TenantGraph
from schemas import vocabulary as v
from schemas.events import Position
from streams.keystore import Keys


class TenantStores:
    """Opens each tenant's graph at most once per process (RocksDB allows one opener)."""

    def __init__(
        self,
        root: Path,
        *,
        max_open: int = 256,
        knowledge: Knowledge | None = None,
        vectors: tuple[str, int] | None = None,
        keys: Keys | None = None,
    ) -> None:
        """``vectors`` is the (model, dimension) the vector indexes hold; None keeps no indexes.
        ``keys`` unseals memory events (without it every sealed event reads as erased)."""
        self.root = root
        self.keys = keys
        self.max_open = max_open
        self.knowledge = knowledge or load_knowledge()
        self.vectors = vectors
        self._open: OrderedDict[str, TenantGraph] = OrderedDict()
        self._indexes: dict[str, TenantIndexes] = {}

    def _path(self, tenant: str) -> Path:
        if not v.full_match(v.TENANT_RE, tenant):
            raise ValueError(f"invalid tenant id {tenant!r}")
        return self.root / tenant / "graph"

    def exists(self, tenant: str) -> bool:
        return v.full_match(v.TENANT_RE, tenant) and self._path(tenant).is_dir()

    def get(self, tenant: str, *, create: bool = False) -> TenantGraph | None:
        """The tenant's graph; None when it has none yet and ``create`` is false."""
        graph = self._open.get(tenant)
        if graph is not None:
            self._open.move_to_end(tenant)
            return graph
        if not create and not self.exists(tenant):
            return None
        try:
            graph = TenantGraph(self._path(tenant), self.knowledge)
        except OSError:
            gc.collect()  # an evicted handle may still hold the RocksDB lock until collected
            graph = TenantGraph(self._path(tenant), self.knowledge)
        self._open[tenant] = graph
        while len(self._open) > self.max_open:
            name, evicted = self._open.popitem(last=False)
            if (indexes := self._indexes.pop(name, None)) is not None:
                indexes.close()
            evicted.flush()
        return graph

    def indexes(self, tenant: str) -> TenantIndexes | None:
        """The tenant's search indexes (caught up with its graph when opened); None without a store."""
        if self.vectors is None:
            return None
        graph = self.get(tenant)
        if graph is None:
            return None
        found = self._indexes.get(tenant)
        if found is None or found.graph is not graph:
            model, dim = self.vectors
            found = self._indexes[tenant] = TenantIndexes(graph.path.parent, graph, model, dim)
        return found

    # -- records refused where no tenant's checkpoint can remember them ------------------------
    def _refused_mark(self, partition: int) -> Path:
        return self.root / "_refused" / f"partition-{partition}"

    def refused_before(self, position: Position) -> bool:
        """Whether a record at ``position`` with no store to record it was already refused.

        Refusals are deterministic, so the one record redelivered after a crash is refused again;
        this keeps it from being dead-lettered twice.
        """
        mark = self._refused_mark(position.partition)
        return mark.is_file() and position.offset <= int(mark.read_text() or -1)

    def note_refused(self, position: Position) -> None:
        mark = self._refused_mark(position.partition)
        mark.parent.mkdir(parents=True, exist_ok=True)
        tmp = mark.with_suffix(".tmp")
        tmp.write_text(str(position.offset))
        tmp.replace(mark)

    def tenants(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if (p / "graph").is_dir())

    def close(self) -> None:
        for indexes in self._indexes.values():
            indexes.close()
        self._indexes.clear()
        for graph in self._open.values():
            graph.flush()
        self._open.clear()
