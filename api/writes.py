"""Every write: validate, append to the log, and optionally wait for the projection."""

from __future__ import annotations

import logging
from typing import Any

from aiokafka.errors import KafkaError
from fastapi import HTTPException

from api.models import Accepted
from api.runtime import Runtime
from projections.graph import Status, event_violations
from schemas.events import InvalidEvent, event_from_json

log = logging.getLogger(__name__)


async def produce(runtime: Runtime, envelope: dict[str, Any], *, wait: bool) -> Accepted:
    """422 for an invalid event, 503 if the log is unreachable, 504 if ``wait`` times out."""
    try:
        event = event_from_json(envelope)
        violations = event_violations(runtime.stores.knowledge, event, runtime.stores.get(event.tenant))
    except InvalidEvent as exc:
        raise HTTPException(status_code=422, detail=str(exc)) from exc
    if violations:
        raise HTTPException(status_code=422, detail="shape violations: " + "; ".join(violations))
    try:
        pos = await runtime.producer.send(event)
    except InvalidEvent as exc:  # the Avro schema refused it
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
    return accepted.model_copy(update={"applied": True})
