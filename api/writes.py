"""Every write: validate, decide as the projection would, append to the log, optionally wait.

The answers: 202 accepted (``applied`` once the projection has it), 409 for a memory id that is
taken or an event id reused for different content, 413 for an event the log cannot hold, 422
for an invalid event, 503 if the log is unreachable, 504 if ``wait`` times out. A retry of a
write that was applied (same event id, same content) is answered as the original, not produced
again.
"""

from __future__ import annotations

import logging
from typing import Any

from aiokafka.errors import KafkaError
from fastapi import HTTPException

from api.models import Accepted
from api.runtime import Runtime
from projections.graph import (
    PLAN_ERRORS,
    AlreadyApplied,
    Status,
    TenantGraph,
    precheck,
    rejection_reason,
)
from schemas.events import Conflict, Event, InvalidEvent, event_from_json
from streams import codec
from streams.producer import EventTooLarge, encode_checked
from streams.projector import INDEXED_EVENTS

log = logging.getLogger(__name__)


async def produce(runtime: Runtime, envelope: dict[str, Any], *, wait: bool) -> Accepted:
    try:
        # decided on as the projector will see it: decoded from its bytes, Avro defaults filled in
        event = codec.decode(encode_checked(event_from_json(envelope)))
    except EventTooLarge as exc:
        raise HTTPException(status_code=413, detail=str(exc)) from exc
    except (InvalidEvent, codec.UndecodableEvent) as exc:
        raise HTTPException(status_code=422, detail=str(exc)) from exc
    graph = runtime.stores.get(event.tenant)
    try:
        precheck(runtime.stores.knowledge, event, graph)
    except AlreadyApplied:
        assert graph is not None
        return _answer_retry(event, graph)
    except Conflict as exc:
        raise HTTPException(status_code=409, detail=str(exc)) from exc
    except PLAN_ERRORS as exc:
        raise HTTPException(status_code=422, detail=rejection_reason(exc)) from exc
    try:
        pos = await runtime.producer.send(event)
    except InvalidEvent as exc:  # checked above; kept so a refusal can never become a 5xx
        raise HTTPException(status_code=422, detail=str(exc)) from exc
    except KafkaError as exc:
        log.error("append failed: %s", exc)
        raise HTTPException(status_code=503, detail=f"the event log is unavailable: {exc}") from exc
    accepted = Accepted(
        event_id=event.event_id,
        memory_id=event.payload.get("memory_id"),
        partition=pos.partition,
        offset=pos.offset,
        applied=False,
    )
    if not wait:
        return accepted
    timeout = runtime.settings.wait_timeout_s
    handled = await runtime.progress.wait_for(pos.partition, pos.offset, timeout)
    if handled is None:
        raise HTTPException(
            status_code=504,
            detail=f"accepted at {pos.partition}:{pos.offset} but not applied within {timeout}s",
        )
    if handled.outcome.status is Status.REJECTED:
        raise HTTPException(status_code=409, detail=f"rejected by the projection: {handled.outcome.reason}")
    if (
        event.type in INDEXED_EVENTS
        and await runtime.indexed.wait_for(pos.partition, pos.offset, timeout) is None
    ):
        raise HTTPException(
            status_code=504,
            detail=f"applied at {pos.partition}:{pos.offset} but not searchable within {timeout}s",
        )
    return accepted.model_copy(update={"applied": True})


def _answer_retry(event: Event, graph: TenantGraph) -> Accepted:
    """The answer the original write got: where the log holds it, applied."""
    pos = graph.applied_position(event.event_id)
    return Accepted(
        event_id=event.event_id,
        memory_id=event.payload.get("memory_id"),
        partition=pos.partition if pos else -1,
        offset=pos.offset if pos else -1,
        applied=True,
    )
