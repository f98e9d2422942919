"""Tenant snapshots: a copy of a tenant's store at a checkpoint, in the object store beside the
archive, so a replay (an ``as_of``, a rebuild) starts from the nearest earlier one instead of
offset zero.

A snapshot is the store as RocksDB's backup wrote it, taken right after a commit (so asserted
facts, inferred facts and checkpoint agree), under ``snapshots/{tenant}/``: in an object store,
``{offset:020d}.tar`` (sha256-checked on restore); in a local directory, ``{offset:020d}.d/``, the
backup itself, whose table files are hard links to the live store's (RocksDB never changes a
table file), so a snapshot costs the files written since the last one and a restore links them
again (milliseconds, not a copy of the store). Its descriptor, ``index/{offset:020d}.json``, says
what it holds (format, partition, offset, the log time of that event, events handled, bytes,
sha256) and is written last: a snapshot without it was cut short and is never used. The
descriptors have a directory of their own so that finding the nearest snapshot lists them alone,
not the files of every snapshot, and reads only the ones it needs. The search indexes are not in a
snapshot: they are rebuilt from the graph when opened.

A tenant held in memory (``ENGRAM_STORE=memory``) is snapshotted as ``{offset:020d}.nq.zst``
(format ``nquads``): every quad of its store, checkpoint included, as zstd-compressed N-Quads,
sha256-checked on load; it is what the tenant opens from (``load``) and a replay restores into a
store on disk. Those snapshots are its only durable copy besides the log, which is why the
projector commits no consumer offset past them (see ``streams.projector_app``).
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import shutil
import tarfile
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import cramjam
from engram.projections.seams import PICKS, Vanished
from engram.projections.tenant_graph import TenantGraph
from engram.schemas.events import Position
from engram.streams.objects import LocalObjects, MissingObject, Objects
from pyoxigraph import RdfFormat, Store

from engram import metrics

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
    sha256: str  # of the tar; a directory's table files carry RocksDB's own checksums
    format: str = "tar"  # or "dir": a local directory of hard links; or "nquads": an in-memory store

    @property
    def key(self) -> str:
        return f"{PREFIX}/{self.tenant}/{self.offset:020d}"

    @property
    def position(self) -> Position:
        """The checkpoint it holds: the event at ``offset`` and every one of the tenant's before it."""
        return Position(self.partition, self.offset, self.timestamp_ms)

    @property
    def descriptor(self) -> str:
        return _descriptor(self.tenant, self.offset)


def _index(tenant: str) -> str:
    return f"{PREFIX}/{tenant}/index/"


def _descriptor(tenant: str, offset: int) -> str:
    return f"{_index(tenant)}{offset:020d}.json"


def retained(offsets: list[int], keep: int) -> list[int]:
    """Which of a tenant's snapshots (their offsets, ascending) a retention of ``keep`` keeps: the
    newest ``keep`` (a tenant opens from the newest; the one before covers a take cut short by a
    rebalance), and of the older ones the first in each aligned window of ``2**g`` offsets, ``g``
    growing with the distance d from the newest (a window is d/4 to d/2 wide), so an ``as_of`` d
    records back starts within d records of its point (2/3 d measured), from O(log) snapshots instead of
    every one ever taken (in memory mode one every few seconds of writes). The windows nest as a
    snapshot ages, so pruning at every take keeps what pruning once would; the first snapshot stays.
    ``keep`` 0 keeps all.

    >>> retained(list(range(0, 101, 10)), 2)
    [0, 40, 50, 70, 80, 90, 100]
    """
    if keep <= 0 or len(offsets) <= keep:
        return list(offsets)
    newest = offsets[-1]
    first_in: dict[tuple[int, int], int] = {}  # (window size, window): its first snapshot
    for offset in offsets[:-keep]:
        g = max((newest - offset).bit_length() - 2, 0)
        first_in.setdefault((g, offset >> g), offset)
    return sorted({*offsets[-keep:], *first_in.values()})


class Snapshots:
    """Takes, lists and restores one deployment's tenant snapshots; ``every`` is how many handled
    events apart the projector takes them (0: only on demand); ``keep`` is the retention each take
    applies to the tenant's older snapshots (``retained``; 0: keep all)."""

    def __init__(self, objects: Objects, every: int = 0, *, links: bool | None = None, keep: int = 0) -> None:
        """``links``: snapshots as directories of hard links (default: when the store is local)."""
        self.objects, self.every, self.keep = objects, every, keep
        self.links = isinstance(objects, LocalObjects) if links is None else links

    def take(self, tenant: str, graph: TenantGraph) -> Snapshot:
        """Snapshot ``graph`` as it is now, at its checkpoint."""
        last = graph.checkpoint()
        if last is None:
            raise ValueError(f"tenant {tenant} has no checkpoint yet: nothing to snapshot")
        key = f"{PREFIX}/{tenant}/{last.offset:020d}"
        if graph.in_memory:
            snap = self._take_nquads(tenant, graph, last, key)
        elif self.links:
            snap = self._take_dir(tenant, graph, last, key)
        else:
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
            self.objects.put(f"{key}.tar", data)
        self.objects.put(snap.descriptor, json.dumps(asdict(snap), sort_keys=True).encode())
        if graph.held:  # the events up to the snapshot's are durable without the log
            graph.saved = snap.position
        metrics.snapshot_taken()
        if self.keep:
            self.prune(tenant)
        log.info(
            "snapshot %s at %d:%d, %d bytes (%s)",
            tenant,
            last.partition,
            last.offset,
            snap.bytes,
            snap.format,
        )
        return snap

    def _take_dir(self, tenant: str, graph: TenantGraph, last: Position, key: str) -> Snapshot:
        """The backup straight into the local object store: hard links when it shares the store's
        file system. Written beside its final name, then renamed: a crash leaves no half of it."""
        if not isinstance(self.objects, LocalObjects):
            raise ValueError("snapshots as directories of hard links need a local object store")
        final = self.objects.root.joinpath(*f"{key}.d".split("/"))
        final.parent.mkdir(parents=True, exist_ok=True)
        if final.exists():  # the same checkpoint taken again: the same store
            shutil.rmtree(final)
        partial = final.with_name(f".tmp-{final.name}")
        shutil.rmtree(partial, ignore_errors=True)
        graph.store.backup(str(partial))
        size = sum(p.stat().st_size for p in partial.iterdir() if p.is_file())
        partial.rename(final)
        return Snapshot(
            tenant, last.partition, last.offset, last.timestamp_ms, graph.handled(), size, "", "dir"
        )

    def _take_nquads(self, tenant: str, graph: TenantGraph, last: Position, key: str) -> Snapshot:
        """An in-memory store's quads as compressed N-Quads, the state at ``last``: the projector
        waits for its own snapshots, and one taken on demand beside it is dumped again until no
        commit (each moves the checkpoint, in one transaction) came during the dump."""
        while True:
            dumped = graph.store.dump(format=RdfFormat.N_QUADS)
            if (now := graph.checkpoint()) == last:
                break
            assert now is not None
            last, key = now, f"{PREFIX}/{tenant}/{now.offset:020d}"
        data = bytes(cramjam.zstd.compress(dumped, level=3))
        self.objects.put(f"{key}.nq.zst", data)
        return Snapshot(
            tenant, last.partition, last.offset, last.timestamp_ms, graph.handled(), len(data),
            hashlib.sha256(data).hexdigest(), "nquads",
        )  # fmt: skip

    def newest(self, tenant: str) -> Snapshot | None:
        """The tenant's latest complete snapshot, or None."""
        for offset in reversed(self._offsets(tenant)):
            if (snap := self._read(tenant, offset)) is not None:
                return snap
        return None

    def load_newest(self, tenant: str) -> tuple[Snapshot | None, Store]:
        """The tenant's newest snapshot loaded in memory (an empty store when it has none),
        picked again when another process deletes it meanwhile: a newer one exists then, since
        the newest is never deleted. Vanished after ``PICKS`` picks: never an empty store in place
        of one that exists (in memory mode it is the tenant's durable copy)."""
        for pick in range(PICKS):
            snap = self.newest(tenant)
            if snap is None:
                return None, Store()
            try:
                return snap, self.load(snap)
            except Vanished:
                log.info("snapshot %s was deleted as it was read; picking again (%d)", snap.key, pick + 1)
        raise Vanished(f"tenant {tenant}'s newest snapshot was deleted {PICKS} times as it was read")

    def restore_nearest(
        self, tenant: str, partition: int, before_offset: int, at_or_before_ms: int | None, target: Path
    ) -> Snapshot | None:
        """Restore into ``target`` the snapshot ``nearest`` picks; the one it picks then when
        another process deletes it as it is restored; None (a replay from the log) when there is
        none, or after ``PICKS`` picks that all vanished."""
        for pick in range(PICKS):
            snap = self.nearest(tenant, partition, before_offset, at_or_before_ms)
            if snap is None:
                return None
            try:
                self.restore(snap, target)
                return snap
            except Vanished:
                log.info("snapshot %s was deleted as it was restored; picking again (%d)", snap.key, pick + 1)
        log.warning("tenant %s: %d snapshots deleted as they were restored; replaying the log", tenant, PICKS)
        return None

    def _data(self, snap: Snapshot, suffix: str) -> bytes:
        """A snapshot's bytes, sha256-checked; Vanished if they are gone, ValueError if corrupt."""
        try:
            data = self.objects.get(f"{snap.key}.{suffix}")
        except MissingObject as exc:
            raise Vanished(f"snapshot {snap.key} has lost its data") from exc
        if hashlib.sha256(data).hexdigest() != snap.sha256:
            raise ValueError(f"snapshot {snap.key} is corrupt (sha256 differs)")
        return data

    def load(self, snap: Snapshot) -> Store:
        """An in-memory store holding what ``snap`` holds (an ``nquads`` snapshot)."""
        if snap.format != "nquads":
            raise ValueError(f"snapshot {snap.key} is a {snap.format}, not an in-memory store's")
        data = self._data(snap, "nq.zst")
        store = Store()
        store.bulk_load(bytes(cramjam.zstd.decompress(data)), format=RdfFormat.N_QUADS)
        return store

    def due(self, before: int, after: int) -> bool:
        """Whether a commit that moved the handled count from ``before`` to ``after`` crossed a
        multiple of ``every``."""
        return self.every > 0 and after // self.every > before // self.every

    def _offsets(self, tenant: str) -> list[int]:
        """The offsets of the tenant's complete snapshots, from their descriptors' names, ascending."""
        names = (key.rpartition("/")[2] for key in self.objects.list(_index(tenant)))
        return sorted(int(name[:-5]) for name in names if name.endswith(".json") and name[:-5].isdigit())

    def _read(self, tenant: str, offset: int) -> Snapshot | None:
        """The descriptor at ``offset``; None when it was deleted since it was listed."""
        try:
            return Snapshot(**json.loads(self.objects.get(_descriptor(tenant, offset))))
        except MissingObject:
            return None

    def list(self, tenant: str) -> list[Snapshot]:
        """The tenant's complete snapshots, oldest first."""
        return [snap for offset in self._offsets(tenant) if (snap := self._read(tenant, offset)) is not None]

    def nearest(
        self, tenant: str, partition: int, before_offset: int, at_or_before_ms: int | None = None
    ) -> Snapshot | None:
        """The latest snapshot of the tenant's partition below ``before_offset`` (and taken at or
        before a log time), or None: the descriptors are read newest first, until one fits."""
        for offset in reversed(self._offsets(tenant)):
            if offset >= before_offset:
                continue
            snap = self._read(tenant, offset)
            if (
                snap is not None
                and snap.partition == partition
                and (at_or_before_ms is None or snap.timestamp_ms <= at_or_before_ms)
            ):
                return snap
        return None

    def purge(self, tenant: str, *, keep: int | None = None) -> int:
        """Delete every snapshot of the tenant (after a forget: any of them may hold the forgotten
        words) but the one at offset ``keep``; returns how many. The descriptor goes first, so a
        purge cut short leaves data no one will use, never a descriptor without its data."""
        offsets = [o for o in self._offsets(tenant) if o != keep]
        self._delete(tenant, offsets)
        return len(offsets)

    def prune(self, tenant: str) -> int:
        """Delete the tenant's snapshots that the retention (``keep``) does not keep; how many.
        Run by whoever takes one, after it is complete: the newest is never deleted."""
        offsets = self._offsets(tenant)
        kept = set(retained(offsets, self.keep))
        dropped = [o for o in offsets if o not in kept]
        self._delete(tenant, dropped)
        return len(dropped)

    def _delete(self, tenant: str, offsets: list[int]) -> None:
        """The descriptor first: a delete cut short leaves data no one uses, never a descriptor
        without its data."""
        for offset in offsets:
            key = f"{PREFIX}/{tenant}/{offset:020d}"
            self.objects.delete(_descriptor(tenant, offset))
            self.objects.delete(f"{key}.tar")
            self.objects.delete(f"{key}.nq.zst")
            if isinstance(self.objects, LocalObjects):
                shutil.rmtree(self.objects.root.joinpath(*f"{key}.d".split("/")), ignore_errors=True)

    def restore(self, snap: Snapshot, target: Path) -> None:
        """Unpack ``snap`` into ``target`` (a store directory that must not exist yet); Vanished
        (and no ``target``) when the snapshot is deleted before or while it is read."""
        if snap.format == "dir":
            self._restore_dir(snap, target)
            return
        if snap.format == "nquads":
            memory = self.load(snap)
            target.mkdir(parents=True)
            store = Store(str(target))
            store.bulk_extend(memory.quads_for_pattern(None, None, None, None))
            store.flush()
            return
        data = self._data(snap, "tar")
        target.mkdir(parents=True)
        try:
            with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
                tar.extractall(target, filter="data")  # no absolute paths, links or devices
        except BaseException:
            shutil.rmtree(target, ignore_errors=True)
            raise

    def _restore_dir(self, snap: Snapshot, target: Path) -> None:
        """Link the snapshot's table files (immutable) and copy the rest (RocksDB rewrites its
        manifest and logs), so the restored store never writes into the snapshot. A delete removes
        the descriptor before any file, so a descriptor still there once every file is linked or
        copied means none was missed (a directory listed as it is removed may skip files silently)."""
        if not isinstance(self.objects, LocalObjects):
            raise ValueError(f"snapshot {snap.key} is a local directory; this object store is not local")
        source = self.objects.root.joinpath(*f"{snap.key}.d".split("/"))
        if not source.is_dir():
            raise Vanished(f"snapshot {snap.key} has lost its data")
        target.mkdir(parents=True)
        try:
            try:
                for path in source.iterdir():
                    if path.suffix in (".sst", ".blob"):
                        try:
                            os.link(path, target / path.name)
                            continue
                        except OSError:  # another file system: copied instead
                            pass
                    shutil.copy2(path, target / path.name)
            except OSError as exc:
                if self.objects.exists(snap.descriptor):
                    raise
                raise Vanished(f"snapshot {snap.key} was deleted as it was restored") from exc
            if not self.objects.exists(snap.descriptor):
                raise Vanished(f"snapshot {snap.key} was deleted as it was restored")
        except BaseException:
            shutil.rmtree(target, ignore_errors=True)
            raise
