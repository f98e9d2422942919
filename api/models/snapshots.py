"""Tenant snapshots, as the snapshots routes take and list them."""

from __future__ import annotations

from pydantic import (
    BaseModel,
    Field,
)


class SnapshotOut(BaseModel):
    """A tenant snapshot: its store at the checkpoint ``partition:offset`` (``{key}.tar`` and
    ``{key}.json`` in the object store)."""

    key: str
    tenant: str
    partition: int
    offset: int
    timestamp_ms: int = Field(description="When the log appended the checkpoint's event")
    handled: int = Field(description="Events the tenant's projection had handled")
    bytes: int
    sha256: str = Field(description="Of the tar; empty for a directory (RocksDB checksums its files)")
    format: str = Field(description="tar (an object store) or dir (a local directory of hard links)")


class SnapshotsOut(BaseModel):
    data: list[SnapshotOut]
