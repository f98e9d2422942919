"""What the projections need from the layers above them, as protocols.

A tenant's stores unseal events with data keys and purge snapshots on erasure, but the key store
and the object store are infrastructure (``streams``): naming them here by their shape keeps the
imports running one way, and lets a test or another backend stand in.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from engram.projections.tenant_graph import TenantGraph
from engram.schemas.events import Position
from pyoxigraph import Store

PICKS = 3  # a reader whose snapshot was deleted under it picks again this many times in all


class Vanished(ValueError):
    """The snapshot a reader picked was deleted (pruned, or purged after a forget) before it was
    read: another process took a newer one. The reader picks again (``PICKS`` times in all)."""


class Keys(Protocol):
    """Memories' data keys (``streams.keystore.KeyStore``, or replay's read-only view of it)."""

    def data_key(self, tenant: str, key_id: str, *, create: bool = False) -> bytes | None: ...

    def destroy(self, tenant: str, key_id: str) -> bool: ...


class Snapshotter(Protocol):
    """Tenant snapshots in the object store (``streams.snapshots.Snapshots``): the projector takes
    one every ``every`` handled events (0: only on demand); an erasure purges a tenant's."""

    every: int

    def due(self, before: int, after: int) -> bool: ...

    def take(self, tenant: str, graph: TenantGraph) -> object: ...

    def purge(self, tenant: str, *, keep: int | None = None) -> int: ...

    def newest(self, tenant: str) -> Snapshot | None: ...

    def load(self, snap: Snapshot) -> Store: ...

    def load_newest(self, tenant: str) -> tuple[Snapshot | None, Store]: ...

    def restore(self, snap: Snapshot, target: Path) -> None: ...


class Snapshot(Protocol):
    """What a tenant's store opens from: a snapshot's checkpoint."""

    offset: int

    @property
    def position(self) -> Position: ...
