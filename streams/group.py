"""Several processes, one consumer group: who owns which tenant, and what a move asks of them.

Kafka's consumer group splits the events topic's partitions between the processes that run the
projector; a tenant's events are all in one partition (``topics.partition_for``), so the member
assigned that partition owns the tenant: it alone projects it and answers its reads. Faust's
partition assignor carries each member's URL (its ``canonical_url``, ``ENGRAM_ADVERTISED_URL``) in
the group's metadata and hands every member the whole assignment, so any process can say which URL
owns a partition (``Membership.where``); ``api.routing`` forwards a request there.

Only in-memory stores can move (``ENGRAM_STORE=memory``): a moved tenant opens from its newest
snapshot in the object store, and its events after that come again from the group's committed
offsets, which never pass what the snapshots hold (``streams.held_acks``). So the group's id is kept
in the object store: processes share a group exactly when they share the snapshots. A disk-mode
process keeps a group of its own per data directory (its stores are on its own disk), consumes
every partition itself, and never hands a tenant to a process that lacks its store.
"""

from __future__ import annotations

import asyncio
import logging
import time
import zlib
from collections.abc import Iterable
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from engram.projections.progress import Progress
from engram.streams.log_keys import KEYS_KEY, key_store_id
from engram.streams.objects import MissingObject, Objects
from engram.streams.topics import partition_count, partition_for

from engram.settings import Settings

log = logging.getLogger(__name__)

GROUP_KEY = "projector-group-id"  # in the object store: the id every process sharing it joins
SETTLE_S = 1.0  # a new group's id is read back this long after it was written
KINDS = ("engram-serve", "engram-worker")  # a member's client id: the command that runs it


def projector_group(settings: Settings, objects: Objects) -> str:
    """The projector's consumer group. When tenants move (``Settings.tenants_move``) its id is the
    object store's (seeded, by the first process, from its own data directory's, so a lone process
    keeps its committed offsets); otherwise the data directory's (``Settings.projector_group``)."""
    own = settings.projector_group()
    if not settings.tenants_move:
        return own
    try:
        return f"{settings.consumer_group}-{objects.get(GROUP_KEY).decode().strip()}"
    except MissingObject:
        pass
    # processes starting at once (compose) race to create it: exactly one does, the others read its
    # id. A store that ignores the condition (an S3 server without conditional writes) lets each
    # write theirs: then all keep the one written last, read back once every racer has written
    if objects.put_new(GROUP_KEY, own.removeprefix(f"{settings.consumer_group}-").encode()):
        time.sleep(SETTLE_S)
    return f"{settings.consumer_group}-{objects.get(GROUP_KEY).decode().strip()}"


class NotShared(RuntimeError):
    """This process would join a group whose other members read another key store."""


def check_shared_keys(settings: Settings, objects: Objects) -> None:
    """When tenants move, refuse to start unless this process's key store is the one the group's other
    processes use: a tenant moved here would otherwise unseal none of its memories and project
    every one as erased, silently. The key store and the object store each keep a copy of one id
    (``KEYS_KEY``); a process whose key store has no id, or another, joins no group that has one."""
    if not settings.tenants_move:
        return
    try:
        expected: str | None = objects.get(KEYS_KEY).decode().strip()
    except MissingObject:
        expected = None
    # the first process of the group makes its key store's id the group's (processes starting at
    # once on one shared key store read the one made first)
    mine = key_store_id(settings, create=expected is None) or ""
    if expected is None:
        objects.put(KEYS_KEY, mine.encode())
    elif mine != expected:
        raise NotShared(
            f"the key store {settings.key_store_dir} is not the one the other processes sharing this "
            f"object store use (its {KEYS_KEY} is {mine or 'missing'}, theirs {expected}): point "
            "ENGRAM_KEYS_DIR at the group's key store (tenants move between processes, their keys must not)"
        )


class Membership:
    """This process's share of the events topic, told by the projector app's rebalance signals.

    A partition gained from another member (any gain after the first assignment, or the first one
    when the group has other members) is *catching up* until the projector has handled every record
    the log held when it was assigned: a read for one of its tenants waits for that (``ready``), so
    it never answers from a snapshot older than what the previous owner answered from."""

    def __init__(self, settings: Settings, progress: Progress, url: str, kind: str = "serve") -> None:
        """``kind``: ``serve`` or ``worker``, the command that runs this process (its consumer's
        client id says it to ``engram status``)."""
        self.settings, self.progress, self.url, self.kind = settings, progress, url, kind
        self.topic = settings.events_topic
        self.assignor: Any = None  # Faust's partition assignor, set by the projector app
        self.group = ""  # set by the projector app
        self.owned: frozenset[int] = frozenset()
        self.moving = True  # until the first assignment, and between a revocation and the next
        self.rebalances = 0
        self.partitions = 0  # of the events topic, known once started
        self._previous: frozenset[int] = frozenset()
        self._owners: dict[int, str] = {}
        self._targets: dict[int, int | None] = {}  # partition: end offset to reach (None: being asked)
        self._since: dict[int, float] = {}  # partition: when it was gained
        self._changed = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self.took_s: dict[int, float] = {}  # partition: seconds from its assignment to caught up

    async def start(self) -> None:
        """Before the projector starts: the events topic's partitions (a tenant's is its key's
        hash modulo these; more partitions later would move every tenant, so they are fixed)."""
        self.partitions = await partition_count(self.settings, self.topic)

    # -- the projector app's rebalance signals -------------------------------------------------
    def revoked(self, partitions: Iterable[Any]) -> None:
        self.moving = True
        self.owned = self.owned - {tp.partition for tp in partitions if tp.topic == self.topic}

    def assigned(self, partitions: Iterable[Any]) -> None:
        now = frozenset(tp.partition for tp in partitions if tp.topic == self.topic)
        self._owners = self._read_owners()
        first = self.rebalances == 0
        self.rebalances += 1
        gained = now - self._previous
        if gained and (not first or len(set(self._owners.values())) > 1):
            for p in gained:
                self._targets[p], self._since[p] = None, time.monotonic()
            task = asyncio.ensure_future(self._ask_targets(sorted(gained)))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        for p in list(self._targets):
            if p not in now:
                del self._targets[p]
        self._previous = self.owned = now
        self.moving = False
        self._wake()
        log.info(
            "partitions of %s assigned to %s: %s (%d gained); group members %d",
            self.topic, self.url, sorted(now), len(gained), len(set(self._owners.values())),
        )  # fmt: skip

    def _read_owners(self) -> dict[int, str]:
        if self.assignor is None:
            return {}
        owners: dict[int, str] = {}
        for url, topics in self.assignor.external_topics_metadata().items():
            for p in topics.get(self.topic, ()):
                owners[p] = url
        return owners

    async def _ask_targets(self, partitions: list[int]) -> None:
        """The end offset of each gained partition, and whether the group's committed offset
        already reaches it (nothing to catch up). Asked again until the broker answers."""
        while any(p in self._targets and self._targets[p] is None for p in partitions):
            try:
                ends, committed = await self._offsets(partitions)
            except Exception as exc:  # the broker did not answer: reads keep waiting (bounded)
                log.warning("end offsets of gained partitions not known yet: %s", exc)
                await asyncio.sleep(0.5)
                continue
            for p in partitions:
                if p in self._targets and self._targets[p] is None:
                    self._targets[p] = ends[p] if committed.get(p, 0) < ends[p] else -1
        self._wake()

    async def _offsets(self, partitions: list[int]) -> tuple[dict[int, int], dict[int, int]]:
        consumer = AIOKafkaConsumer(bootstrap_servers=self.settings.kafka_bootstrap, group_id=None)
        admin = AIOKafkaAdminClient(bootstrap_servers=self.settings.kafka_bootstrap)
        await consumer.start()
        try:
            await admin.start()
            try:
                tps = [TopicPartition(self.topic, p) for p in partitions]
                ends = await consumer.end_offsets(tps)
                done = await admin.list_consumer_group_offsets(self.group, partitions=tps)
            finally:
                await admin.close()
        finally:
            await consumer.stop()
        return (
            {tp.partition: ends[tp] for tp in tps},
            {tp.partition: m.offset for tp, m in done.items() if m is not None and m.offset >= 0},
        )

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def handled(self) -> None:
        """The projector handled a batch: a read waiting for a catching-up partition looks again."""
        if self._targets:
            for p in list(self._targets):
                self.caught_up(p)
            self._wake()

    # -- what a request asks --------------------------------------------------------------------
    def where(self, partition: int) -> str | None:
        """``self.url`` when this process owns ``partition``, the owner's URL when another member
        does, None while the group is rebalancing or no member has it."""
        if self.moving:
            return None
        if partition in self.owned:
            return self.url
        return self._owners.get(partition)

    def owns(self, tenant: str) -> bool:
        """Whether the tenant's partition is this process's (any, before the first assignment)."""
        if self.rebalances == 0 or not self.partitions:
            return True
        return partition_for(tenant, self.partitions) in self.owned

    def holds(self, tenant: str) -> bool:
        """Whether the tenant is this process's now: assigned, not moving (never before the first
        assignment), for the work only its owner may do (capture)."""
        if self.moving or not self.partitions:
            return False
        return partition_for(tenant, self.partitions) in self.owned

    def caught_up(self, partition: int) -> bool:
        if partition not in self._targets:
            return True
        target = self._targets[partition]
        if target is None:
            return False
        if self.progress.last_offset.get(partition, -1) + 1 >= target:
            del self._targets[partition]
            self.took_s[partition] = time.monotonic() - self._since.pop(partition, time.monotonic())
            return True
        return False

    async def owner(self, tenant: str, timeout: float) -> str | None:
        """The URL of the process that owns ``tenant`` (``self.url`` for this one) once the group is
        not rebalancing and, if it is this process, the tenant's partition is caught up; None if
        that does not happen within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            partition = partition_for(tenant, self.partitions) if self.partitions else None
            url = self.where(partition) if partition is not None else None
            if url is not None and (url != self.url or self.caught_up(partition)):  # type: ignore[arg-type]
                return url
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            changed = self._changed
            try:  # woken by a rebalance or a handled batch; polled too (a batch may be skipped)
                async with asyncio.timeout(min(left, 0.05)):
                    await changed.wait()
            except TimeoutError:
                pass

    def describe(self) -> dict[str, Any]:
        """The group as this process sees it: members' URLs, each partition's owner, what is catching up."""
        return {
            "group": self.group,
            "url": self.url,
            "rebalancing": self.moving,
            "members": sorted(set(self._owners.values())),
            "owners": {str(p): url for p, url in sorted(self._owners.items())},
            "owned": sorted(self.owned),
            "catching_up": sorted(self._targets),
        }

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


async def group_status(settings: Settings, group: str) -> dict[str, Any]:
    """The projector's consumer group as Kafka holds it: its state, each member's kind (``serve``
    or ``worker``, from its client id), URL and partitions (from the assignment Faust's assignor
    handed it), and per partition of the events
    topic its owner, the log's end offset, the group's committed offset and the lag between them.
    For ``engram status``; asks the broker only, so it works whatever the members serve."""
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap)
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.kafka_bootstrap, group_id=None)
    await admin.start()
    try:
        await consumer.start()
        try:
            described = await admin.describe_consumer_groups([group])
            count = await partition_count(settings, settings.events_topic)
            tps = [TopicPartition(settings.events_topic, p) for p in range(count)]
            ends = await consumer.end_offsets(tps)
            committed = await admin.list_consumer_group_offsets(group, partitions=tps)
        finally:
            await consumer.stop()
    finally:
        await admin.close()
    state, members, owners = "Dead", [], {}
    for found in described[0].groups if described else []:
        state = found[2]
        for member in found[5]:
            url, parts = _member(member[4], settings.events_topic)
            kind = member[1].removeprefix("engram-") if member[1] in KINDS else None
            members.append(
                {"member": member[0], "kind": kind, "host": member[2], "url": url, "partitions": parts}
            )
            owners.update({p: url for p in parts})
    partitions = []
    for tp in tps:
        done = committed.get(tp)
        offset = done.offset if done is not None and done.offset >= 0 else 0
        partitions.append(
            {"partition": tp.partition, "owner": owners.get(tp.partition), "end": ends[tp],
             "committed": offset, "lag": max(0, ends[tp] - offset)}
        )  # fmt: skip
    return {"group": group, "state": state, "members": members, "partitions": partitions}


def _member(assignment: bytes, topic: str) -> tuple[str | None, list[int]]:
    """A member's URL (Faust's client metadata, in the assignment's user data) and its partitions."""
    from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment
    from faust.assignor.client_assignment import ClientMetadata

    if not assignment:
        return None, []
    decoded = ConsumerProtocolMemberAssignment.decode(assignment)
    parts = sorted(p for t, ps in decoded.assignment for p in ps if t == topic)
    try:
        url = ClientMetadata.loads(zlib.decompress(decoded.user_data)).url
    except Exception:  # not a Faust member (another client in the group): no URL to tell
        url = None
    return url, parts
