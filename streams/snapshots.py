"""Tenant snapshots: a copy of a tenant's store at a checkpoint, in the object store beside the
archive, so a replay (an ``as_of``, a rebuild) starts from the nearest earlier one instead of
offset zero.

A snapshot is two objects under ``snapshots/{tenant}/``: ``{offset:020d}.tar``, the store as
RocksDB's backup wrote it (hard links, taken right after a commit, so asserted facts, inferred
facts and checkpoint agree), and ``{offset:020d}.json``, what it holds (partition, offset, the log
time of that event, events handled, bytes, sha256). The JSON is written last: a snapshot without
it was cut short and is never used. The search indexes are not in it: they are rebuilt from the
graph when opened.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import shutil
import tarfile
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from projections.tenant_graph import TenantGraph
from streams.objects import MissingObject, Objects

log = logging.getLogger(__name__)

PREFIX = "snapshots"


@dataclass(frozen=True)
class Snapshot:
    tenant: str
    partition: int
    offset: int
    timestamp_ms: int  # when the log appended the event at ``offset``
    handled: int  # events the tenant's projection had handled
    bytes: int
    sha256: str

    @property
    def key(self) -> str:
        return f"{PREFIX}/{self.tenant}/{self.offset:020d}"


class Snapshots:
    """Takes, lists and restores one deployment's tenant snapshots; ``every`` is how many handled
    events apart the projector takes them (0: only on demand)."""

    def __init__(self, objects: Objects, every: int = 0) -> None:
        self.objects, self.every = objects, every

    def take(self, tenant: str, graph: TenantGraph) -> Snapshot:
        """Snapshot ``graph`` as it is now, at its checkpoint."""
        last = graph.checkpoint()
        if last is None:
            raise ValueError(f"tenant {tenant} has no checkpoint yet: nothing to snapshot")
        with tempfile.TemporaryDirectory(prefix="engram-snapshot-") as tmp:
            backup = Path(tmp) / "graph"
            graph.store.backup(str(backup))
            buffer = io.BytesIO()
            with tarfile.open(fileobj=buffer, mode="w") as tar:
                for path in sorted(backup.rglob("*")):
                    if path.is_file():
                        tar.add(path, arcname=str(path.relative_to(backup)), recursive=False)
            data = buffer.getvalue()
        snap = Snapshot(
            tenant, last.partition, last.offset, last.timestamp_ms, graph.handled(), len(data),
            hashlib.sha256(data).hexdigest(),
        )  # fmt: skip
        self.objects.put(f"{snap.key}.tar", data)
        self.objects.put(f"{snap.key}.json", json.dumps(asdict(snap), sort_keys=True).encode())
        log.info("snapshot %s at %d:%d, %d bytes", tenant, last.partition, last.offset, len(data))
        return snap

    def due(self, before: int, after: int) -> bool:
        """Whether a commit that moved the handled count from ``before`` to ``after`` crossed a
        multiple of ``every``."""
        return self.every > 0 and after // self.every > before // self.every

    def list(self, tenant: str) -> list[Snapshot]:
        """The tenant's complete snapshots, oldest first."""
        found = []
        for key in self.objects.list(f"{PREFIX}/{tenant}/"):
            if key.endswith(".json"):
                found.append(Snapshot(**json.loads(self.objects.get(key))))
        return sorted(found, key=lambda s: s.offset)

    def nearest(
        self, tenant: str, partition: int, before_offset: int, at_or_before_ms: int | None = None
    ) -> Snapshot | None:
        """The latest snapshot of the tenant's partition below ``before_offset`` (and taken at or
        before a log time), or None."""
        fits = [
            s
            for s in self.list(tenant)
            if s.partition == partition
            and s.offset < before_offset
            and (at_or_before_ms is None or s.timestamp_ms <= at_or_before_ms)
        ]
        return fits[-1] if fits else None

    def restore(self, snap: Snapshot, target: Path) -> None:
        """Unpack ``snap`` into ``target`` (a store directory that must not exist yet)."""
        try:
            data = self.objects.get(f"{snap.key}.tar")
        except MissingObject as exc:
            raise ValueError(f"snapshot {snap.key} has lost its data") from exc
        if hashlib.sha256(data).hexdigest() != snap.sha256:
            raise ValueError(f"snapshot {snap.key} is corrupt (sha256 differs)")
        target.mkdir(parents=True)
        try:
            with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
                tar.extractall(target, filter="data")  # no absolute paths, links or devices
        except BaseException:
            shutil.rmtree(target, ignore_errors=True)
            raise
