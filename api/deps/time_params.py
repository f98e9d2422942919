"""Valid time and system time as query parameters (``valid_at``, ``as_of``), and the replay that
``as_of`` asks for."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from aiokafka.errors import KafkaError
from engram.api.errors import problem
from engram.api.runtime import Runtime
from engram.schemas.checks import InvalidEvent, parse_time
from engram.streams.asof import AsOf, Past, parse_as_of
from fastapi import Depends, Query


def get_valid_at(
    valid_at: Annotated[
        str | None,
        Query(
            max_length=64,
            description="Valid time (ISO-8601; UTC when no offset is given): answer with the "
            "memories that held in the world then, by their validity intervals, superseded or not",
            examples=["2026-06-01T00:00:00Z"],
        ),
    ] = None,
) -> datetime | None:
    if valid_at is None:
        return None
    try:
        return parse_time(valid_at, "valid_at")
    except InvalidEvent as exc:
        raise problem(422, str(exc), ["query", "valid_at"], "datetime_parsing") from exc


ValidAt = Annotated[datetime | None, Depends(get_valid_at)]


def get_as_of(
    as_of: Annotated[
        str | None,
        Query(
            max_length=64,
            description="System time: answer as the system knew it then, from a replay of the "
            "tenant's events up to a log position (partition:offset, that event included) or a time "
            "(every event the log appended at or before it)",
            examples=["2026-06-01T00:00:00Z", "3:1200"],
        ),
    ] = None,
) -> AsOf | None:
    if as_of is None:
        return None
    try:
        return parse_as_of(as_of)
    except ValueError as exc:
        raise problem(422, str(exc), ["query", "as_of"], "as_of") from exc


AsOfParam = Annotated[AsOf | None, Depends(get_as_of)]


async def past_stores(runtime: Runtime, tenant: str, as_of: AsOf) -> Past:
    """The tenant replayed to ``as_of``: 422 for a position off its partition, 503 without a log."""
    assert runtime.past is not None
    try:
        return await runtime.past.at(tenant, as_of)
    except ValueError as exc:
        raise problem(422, str(exc), ["query", "as_of"], "as_of") from exc
    except (KafkaError, LookupError) as exc:  # LookupError: offsets neither Kafka nor the archive hold
        raise problem(503, f"the log cannot be replayed now: {exc}", ["query", "as_of"]) from exc
