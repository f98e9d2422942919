"""The event log, as the audit route pages through it."""

from __future__ import annotations

from typing import Any

from pydantic import (
    BaseModel,
    Field,
)


# -- the event log ------------------------------------------------------------------------------
class LogActor(BaseModel):
    id: str
    role: str
    on_behalf_of: str | None = Field(None, description="An agent's: the user it acted for")


class LogEvent(BaseModel):
    """One event as the log holds it, its memory content unsealed (or erased, once forgotten)."""

    position: str = Field(description="partition:offset, usable as from, to or cursor")
    partition: int
    offset: int
    recorded_at: str = Field(description="System time: when the log appended it (UTC, ms)")
    event_id: str
    type: str
    tenant: str
    occurred_at: str = Field(description="Valid time, as the writer gave it (else when it was written)")
    actor: LogActor
    source: str
    purpose: str | None
    correlation_id: str | None
    payload: dict[str, Any] = Field(description="The payload's fields; an embedding as embedding_dim")


class EventLogPage(BaseModel):
    data: list[LogEvent]
    next: str | None = Field(
        description="Pass as cursor (with the same filters) for the next page; null: no more"
    )
    skipped: int = Field(
        description="Records of the tenant in this page's range that are not readable events"
    )
