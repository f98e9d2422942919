"""The one path every write takes: decide it as the projection will, append it, answer, optionally wait.

``commands.writes.Commands`` builds each command's event and hands it here. Kept apart so the
rules of the path (read-your-writes, decided before anything costly, a retry answered as the
original and never appended twice, a refusal never a 5xx, the log's outage as a prompt 503) are read
in one place, whatever the command. A decided write goes to the intake (``commands.intake``), which
embeds, seals and produces the writes that arrive together as one batch, off the event loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from aiokafka.errors import KafkaError, KafkaTimeoutError
from engram.commands.answers import (
    Accepted,
    Attribution,
    Conflicting,
    Invalid,
    LogUnavailable,
    NotInTime,
    RecentWrites,
    Refused,
    TooLarge,
    refused,
)
from engram.commands.intake import Intake
from engram.projections.progress import Progress
from engram.projections.stores import TenantStores
from engram.projections.tenant_graph import AlreadyApplied, Status, TenantGraph
from engram.projections.validation import PLAN_ERRORS
from engram.schemas import payloads as ev
from engram.schemas.checks import Conflict, InvalidEvent
from engram.schemas.events import Event, Position
from engram.streams.embedder import Embedder
from engram.streams.pipeline import EventTooLarge, Framed, Pipeline
from engram.streams.producer import EventProducer
from engram.streams.projector import reindexes

log = logging.getLogger(__name__)

# the log may leave a record unacknowledged this long (at most half ENGRAM_WRITE_TIMEOUT_S) before
# new writes are refused at once: past the produce latency of a broker under load (tens of ms),
# well short of a broker gone
STALLED_S = 3.0
LANDED_KEPT = 10_000  # positions of this process's newest appended events, for retries before applied


@dataclass
class Appender:
    stores: TenantStores
    producer: EventProducer
    progress: Progress  # records applied to the graph
    indexed: Progress  # records whose memories are also searchable
    embedder: Embedder | None  # embeds a new memory that carries no vector
    wait_timeout_s: float
    recent: RecentWrites = field(default_factory=RecentWrites)
    queue_limit: int = 2000  # ENGRAM_WRITE_QUEUE
    intake: Intake = field(init=False)
    # writes handed to the intake and not yet acknowledged by the log, by event id: a retry of one
    # waits for it instead of appending a second record
    _on_the_way: dict[str, asyncio.Future[Position]] = field(init=False, default_factory=dict)
    _landed: dict[str, Position] = field(init=False, default_factory=dict)  # the newest, by event id

    def __post_init__(self) -> None:
        # half a write's timeout: the writes after one that timed out (its record handed over a
        # moment after it was submitted) are refused at once, not held for a timeout of their own
        timeout = self.producer.write_timeout_s
        stalled = min(STALLED_S, timeout / 2) if timeout is not None else STALLED_S
        self.intake = Intake(lambda: self.pipeline, self.producer, limit=self.queue_limit, stalled_s=stalled)

    @property
    def pipeline(self) -> Pipeline:
        """The way from a write to the bytes the log holds, with this process's keys and embedder."""
        return Pipeline(self.stores.knowledge, self.stores.keys, self.embedder)

    async def current(self, tenant: str) -> TenantGraph | None:
        """The tenant's graph once it has what this process last appended for it (read-your-writes,
        at most ``wait_timeout_s``), or None for a tenant with no events yet."""
        pos = self.recent.get(tenant)
        if pos is not None and self.in_flight(tenant):
            await self.progress.wait_for(pos[0], pos[1], self.wait_timeout_s)
        return self.stores.get(tenant)

    async def searchable(self, tenant: str) -> TenantGraph | None:
        """``current``, and also searchable: the indexes commit a moment after the graph."""
        graph = await self.current(tenant)
        pos = self.recent.get(tenant)
        if pos is not None and self.indexed.last_offset.get(pos[0], -1) < pos[1]:
            await self.indexed.wait_for(pos[0], pos[1], self.wait_timeout_s)
        return graph

    async def submit(
        self, tenant: str, event_type: str, payload: Mapping[str, Any], by: Attribution, *, wait: bool
    ) -> Accepted:
        event = self.drafted(by.envelope(event_type, tenant, payload))
        return await self.append(event, wait=wait, teams=by.teams)

    async def append(
        self, item: Framed | Event, *, wait: bool, teams: frozenset[str] | None = None
    ) -> Accepted:
        """Pre-check, append and answer one write (``teams``: the token's, if any). An ``Event`` is
        a draft (``drafted``), decided before it is embedded, keyed or sealed: a refused write costs
        neither; a ``Framed`` is appended as framed."""
        event = item.event if isinstance(item, Framed) else item
        tenant = event.tenant
        await self.settle_earlier(event)
        graph = self.stores.get(tenant)
        if not isinstance(item, Framed) and graph is not None and graph.applied_digest(event.event_id):
            item = await self.finished(item)  # a retry: decided as the bytes it was then
            event = item.event
        try:
            await self.decide(event, teams)
        except AlreadyApplied:
            graph = self.stores.get(tenant)
            assert graph is not None
            return _answer_retry(event, graph)
        except PLAN_ERRORS as exc:
            raise refused(exc) from exc
        try:
            pos = await self._appended(item)
        except InvalidEvent as exc:  # what framing refused (413, 422): nothing was appended
            raise _invalid(exc) from exc
        except KafkaError as exc:
            log.error("append failed: %s", exc)
            raise LogUnavailable(  # the id first: a long reason is cut at errors.MAX_TEXT
                f"event {event.event_id} not confirmed, the event log is unavailable ({exc}); it may "
                "still be appended: retry with the same Idempotency-Key or event_id, it is applied once"
            ) from exc
        self.recent.note(tenant, pos.partition, pos.offset)
        accepted = Accepted(event.event_id, _memory_id(event), pos.partition, pos.offset, applied=False)
        if not wait:
            return accepted
        await self._wait(event, pos)
        return Accepted(event.event_id, accepted.memory_id, pos.partition, pos.offset, applied=True)

    async def _appended(self, item: Framed | Event) -> Position:
        """``item`` through the intake (finished in a batch, then produced), within the write
        timeout; past it the record may still reach the log, and a retry waits for it."""
        event_id = (item.event if isinstance(item, Framed) else item).event_id
        position = self.intake.submit(item)
        self._on_the_way[event_id] = position

        def arrived(done: asyncio.Future[Position]) -> None:
            if self._on_the_way.get(event_id) is done:
                del self._on_the_way[event_id]
            if not done.cancelled() and done.exception() is None:
                self._landed[event_id] = done.result()  # until applied, a retry waits for it there
                while len(self._landed) > LANDED_KEPT:
                    self._landed.pop(next(iter(self._landed)))

        position.add_done_callback(arrived)
        timeout = self.producer.write_timeout_s
        try:
            async with asyncio.timeout(timeout):
                return await asyncio.shield(position)
        except TimeoutError as exc:
            raise KafkaTimeoutError(
                f"the log did not take the event within {timeout:g}s (ENGRAM_WRITE_TIMEOUT_S)"
            ) from exc

    async def settle_earlier(self, event: Event) -> None:
        """A retry of a write this process appended, or is still appending (its first answer timed
        out, the record still in the producer's buffer), waits for that record and for it to be
        applied, so it is answered as the original, never appended twice; still on its way, or in
        the log but not applied, after ``wait_timeout_s``: refused (503), nothing appended."""
        earlier = self._on_the_way.get(event.event_id)
        if earlier is not None:
            try:
                async with asyncio.timeout(self.wait_timeout_s):
                    pos = await asyncio.shield(earlier)
            except TimeoutError as exc:
                raise LogUnavailable(
                    f"event {event.event_id} is still on its way to the log from an earlier request; "
                    "nothing more was appended: retry later with the same Idempotency-Key"
                ) from exc
            except Exception:  # the earlier attempt failed: this one is decided afresh
                return
        elif (landed := self._landed.get(event.event_id)) is not None:
            pos = landed
        else:
            return
        if self.progress.last_offset.get(pos.partition, -1) >= pos.offset:
            return  # applied: decided as a retry of an applied event
        if await self.progress.wait_for(pos.partition, pos.offset, self.wait_timeout_s) is None:
            raise LogUnavailable(
                f"event {event.event_id} is in the log at {pos.partition}:{pos.offset} from an earlier "
                "request and not applied yet; nothing more was appended: retry later with the same "
                "Idempotency-Key"
            )

    async def finished(self, event: Event) -> Framed:
        """One draft embedded, sealed and encoded off the event loop (a retry's, decided as bytes)."""
        (done,) = await asyncio.to_thread(self.pipeline.finish_many, [event])
        if isinstance(done, InvalidEvent):
            raise _invalid(done)
        return done

    async def decide(self, event: Event, teams: frozenset[str] | None = None) -> None:
        """Decide ``event`` as the projection will, against the tenant's facts now; if it is refused
        while this process has a write to the tenant still in flight (a revision of a memory just
        remembered), decide again once that write is applied: a valid write does not wait here
        (``remember`` and ``restore`` wait in ``current`` first, to see conflicts)."""
        graph = self.stores.get(event.tenant)
        try:
            self.pipeline.precheck(event, graph, teams)
        except (AlreadyApplied, Conflict):
            raise
        except PLAN_ERRORS:
            if not self.in_flight(event.tenant):
                raise
            self.pipeline.precheck(event, await self.current(event.tenant), teams)

    def in_flight(self, tenant: str) -> bool:
        pos = self.recent.get(tenant)
        return pos is not None and self.progress.last_offset.get(pos[0], -1) < pos[1]

    def drafted(self, envelope: dict[str, Any]) -> Event:
        """The write checked (the domain rules, the reserved names) as the event the projector will
        read, not yet embedded, sealed or encoded: what is decided before anything costly is done
        (``streams.pipeline``); the intake finishes it once it is decided."""
        try:
            return self.pipeline.draft(envelope)
        except InvalidEvent as exc:
            raise _invalid(exc) from exc

    async def _wait(self, event: Event, pos: Position) -> None:
        timeout = self.wait_timeout_s
        handled = await self.progress.wait_for(pos.partition, pos.offset, timeout)
        if handled is None:
            raise NotInTime(f"accepted at {pos.partition}:{pos.offset} but not applied within {timeout}s")
        if handled.outcome.status is Status.REJECTED:
            raise Conflicting(f"rejected by the projection: {handled.outcome.reason}")
        if reindexes(event) and await self.indexed.wait_for(pos.partition, pos.offset, timeout) is None:
            raise NotInTime(f"applied at {pos.partition}:{pos.offset} but not searchable within {timeout}s")


def _invalid(exc: InvalidEvent) -> Refused:
    return (TooLarge if isinstance(exc, EventTooLarge) else Invalid)(str(exc))


def _memory_id(event: Event) -> str | None:
    return event.payload.memory_id if isinstance(event.payload, ev.MemoryEvent) else None


def _answer_retry(event: Event, graph: TenantGraph) -> Accepted:
    """The answer the original write got: where the log holds it, applied."""
    pos = graph.applied_position(event.event_id)
    return Accepted(
        event.event_id,
        _memory_id(event),
        pos.partition if pos else -1,
        pos.offset if pos else -1,
        applied=True,
    )
