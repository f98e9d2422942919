"""The one path every write takes: decide it as the projection will, append it, answer, optionally wait.

``commands.writes.Commands`` builds each command's event and hands it here. Kept apart so the
rules of the path (read-your-writes, a retry answered as the original, a refusal never a 5xx, the
log's outage as a prompt 503) are read in one place, whatever the command.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from aiokafka.errors import KafkaError
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


@dataclass
class Appender:
    stores: TenantStores
    producer: EventProducer
    progress: Progress  # records applied to the graph
    indexed: Progress  # records whose memories are also searchable
    embedder: Embedder | None  # embeds a new memory that carries no vector
    wait_timeout_s: float
    recent: RecentWrites = field(default_factory=RecentWrites)

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
        framed = self.validated(by.envelope(event_type, tenant, payload))
        return await self.append(framed, wait=wait, teams=by.teams)

    async def append(
        self, item: Framed | Event, *, wait: bool, teams: frozenset[str] | None = None
    ) -> Accepted:
        """Pre-check, append and answer one validated write (``teams``: the token's, if any). An
        event a command changed after it was framed (a ``replaces`` it chose) is framed again."""
        framed = item if isinstance(item, Framed) else self._framed(item)
        event, tenant = framed.event, framed.event.tenant
        try:
            await self.decide(event, teams)
        except AlreadyApplied:
            graph = self.stores.get(tenant)
            assert graph is not None
            return _answer_retry(event, graph)
        except PLAN_ERRORS as exc:
            raise refused(exc) from exc
        try:
            pos = await self.producer.send(framed)
        except InvalidEvent as exc:  # checked above; kept so a refusal can never become a 5xx
            raise Invalid(str(exc)) from exc
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

    def validated(self, envelope: dict[str, Any]) -> Framed:
        """The write checked, embedded, sealed and encoded once, with the event the projector will
        read back from its bytes (``streams.pipeline``)."""
        try:
            return self.pipeline.write(envelope)
        except InvalidEvent as exc:
            raise _invalid(exc) from exc

    def _framed(self, event: Event) -> Framed:
        try:
            return self.pipeline.frame(event)
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
