"""System time: a tenant as the system knew it at a log position or a time, rebuilt by replay.

An ``as_of`` read is answered from an ephemeral projection of the tenant's events up to that
point, built by the same ``replay_tenant`` (and so the same ``handle_batch_with_retries``) that
builds the live one, with its own search indexes. The last few are kept, keyed by where they end,
so the reads of one audit session replay once.
"""

from __future__ import annotations

import asyncio
import gc
import re
import shutil
import tempfile
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from aiokafka import AIOKafkaConsumer, TopicPartition
from engram.projections.indexes import EmbedMemories
from engram.projections.knowledge import Knowledge
from engram.projections.stores import TenantStores
from engram.projections.tenant_graph import TenantGraph
from engram.schemas.checks import InvalidEvent, parse_time
from engram.streams.keystore import KeyStore, ReadOnlyKeys, erasures
from engram.streams.replay import replay_tenant
from engram.streams.snapshots import Snapshots
from engram.streams.topics import partition_count, partition_for

from engram.settings import Settings

POSITION = re.compile(r"([0-9]{1,9}):([0-9]{1,18})", re.ASCII)


@dataclass(frozen=True)
class AsOf:
    """A point of system time: a log position (the event at it included) or a time (every event
    the log appended at or before it)."""

    position: tuple[int, int] | None = None
    time_ms: int | None = None


def parse_as_of(text: str) -> AsOf:
    """``partition:offset`` or an ISO-8601 time (UTC when it has no offset); ValueError else."""
    if m := POSITION.fullmatch(text):
        return AsOf(position=(int(m[1]), int(m[2])))
    try:
        return AsOf(time_ms=round(parse_time(text, "as_of").timestamp() * 1000))
    except InvalidEvent as exc:
        raise ValueError(f"{exc}; or a log position partition:offset such as 3:1200") from exc


async def replay_end(settings: Settings, tenant: str, at: AsOf) -> int:
    """The offset of the tenant's partition a replay to ``at`` stops before; ValueError for a
    position on another partition than the tenant's."""
    partitions = await partition_count(settings, settings.events_topic)
    home = partition_for(tenant, partitions)
    if at.position is not None:
        partition, offset = at.position
        if partition != home:
            raise ValueError(f"tenant {tenant}'s events are on partition {home}, not {partition}")
        return offset + 1
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.kafka_bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        tp = TopicPartition(settings.events_topic, home)
        # a time before 1970 (no append time is) stops before the first event, as 1970 would
        found = (await consumer.offsets_for_times({tp: max(0, (at.time_ms or 0) + 1)}))[tp]
        return found.offset if found is not None else (await consumer.end_offsets([tp]))[tp]
    finally:
        await consumer.stop()


@dataclass
class Past:
    """One ephemeral projection: its stores (graph and indexes) and the tenant's graph in them."""

    stores: TenantStores
    graph: TenantGraph | None
    root: Path
    erasures: int  # the tenant's erasures when it was built: kept only while that is still true


class AsOfProjections:
    """Ephemeral projections of tenants at points of system time, the last ``keep`` of them."""

    def __init__(
        self,
        settings: Settings,
        knowledge: Knowledge,
        vectors: tuple[str, int] | None,
        snapshots: Snapshots | None = None,
        keep: int = 4,
        embed: EmbedMemories | None = None,
    ) -> None:
        """``embed`` embeds a revised memory anew, as the live indexes do (its event dropped the vector)."""
        self.settings, self.knowledge, self.vectors, self.keep = settings, knowledge, vectors, keep
        self.embed = embed
        self.snapshots = snapshots
        # under the data directory, so an erasure's scan finds them; the leftovers of a process
        # that died are removed, as only one process uses a data directory
        scratch = settings.data_dir / "scratch"
        scratch.mkdir(parents=True, exist_ok=True)
        for old in scratch.glob("asof-*"):
            shutil.rmtree(old, ignore_errors=True)
        self.root = Path(tempfile.mkdtemp(prefix="asof-", dir=scratch))
        self._built: OrderedDict[tuple[str, int, int | None], Past] = OrderedDict()
        self._locks: dict[tuple[str, int, int | None], asyncio.Lock] = {}

    async def at(self, tenant: str, at: AsOf) -> Past:
        """The tenant as of ``at``: replayed now, or kept from an earlier read of the same point."""
        key = (tenant, await replay_end(self.settings, tenant, at), at.time_ms)
        async with self._locks.setdefault(key, asyncio.Lock()):
            if (past := self._built.get(key)) is not None:
                if past.erasures == erasures(self.settings.key_store_dir, tenant):
                    self._built.move_to_end(key)
                    return past
                self._drop(key, self._built.pop(key))  # a memory was forgotten since: words gone
            return await self._build(key, tenant, at)

    async def _build(self, key: tuple[str, int, int | None], tenant: str, at: AsOf) -> Past:
        """Replay the tenant to ``at``; again if a key was destroyed meanwhile (the replay may have
        read the words with it), so a build never outlives a forget it overlapped."""
        while True:
            before = erasures(self.settings.key_store_dir, tenant)
            root = Path(tempfile.mkdtemp(prefix=f"{tenant}-", dir=self.root))
            keys = ReadOnlyKeys(KeyStore(self.settings.key_store_dir))
            stores = TenantStores(
                root, knowledge=self.knowledge, vectors=self.vectors, keys=keys, embed=self.embed
            )
            graph = await replay_tenant(
                self.settings,
                tenant,
                root,
                as_of_ms=at.time_ms,
                until_offset=key[1],
                stores=stores,
                snapshots=self.snapshots,
            )
            past = Past(stores, graph, root, before)
            if erasures(self.settings.key_store_dir, tenant) != before:
                self._discard(past)
                continue
            self._built[key] = past
            while len(self._built) > self.keep:
                self._drop(*self._built.popitem(last=False))
            return past

    def forget_tenant(self, tenant: str) -> None:
        """Drop every projection of the tenant (an erasure listener: its words may be in them)."""
        for key in [k for k in self._built if k[0] == tenant]:
            self._drop(key, self._built.pop(key))

    def _drop(self, key: tuple[str, int, int | None], past: Past) -> None:
        self._locks.pop(key, None)
        self._discard(past)

    @staticmethod
    def _discard(past: Past) -> None:
        past.stores.close()
        past.graph = None
        gc.collect()  # the store's handle goes with its last reference, before its files
        shutil.rmtree(past.root, ignore_errors=True)

    def close(self) -> None:
        while self._built:
            self._drop(*self._built.popitem(last=False))
        shutil.rmtree(self.root, ignore_errors=True)
