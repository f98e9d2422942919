"""Where tenants' stores live: one directory per tenant, opened on demand, a bounded number open."""

from __future__ import annotations

import gc
from collections import OrderedDict
from pathlib import Path

from projections.graph import TenantGraph
from projections.knowledge import Knowledge, load_knowledge
from schemas import vocabulary as v


class TenantStores:
    """Opens each tenant's graph at most once per process (RocksDB allows one opener)."""

    def __init__(self, root: Path, *, max_open: int = 256, knowledge: Knowledge | None = None) -> None:
        self.root = root
        self.max_open = max_open
        self.knowledge = knowledge or load_knowledge()
        self._open: OrderedDict[str, TenantGraph] = OrderedDict()

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
            _, evicted = self._open.popitem(last=False)
            evicted.flush()
        return graph

    def tenants(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if (p / "graph").is_dir())

    def close(self) -> None:
        for graph in self._open.values():
            graph.flush()
        self._open.clear()
