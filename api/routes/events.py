"""A tenant's events as the log holds them, a page at a time, for operators and auditors.

The log is the truth and the projections are derived from it, so an audit reads the log itself
(``streams.event_log``): every event in log order, with where and when the log recorded it.
"""

from __future__ import annotations

from typing import Annotated

from aiokafka.errors import KafkaError
from engram.api.deps import CurrentPrincipal, CurrentRuntime, TenantId, get_principal
from engram.api.errors import problem, responses
from engram.api.models import EventLogPage, anchored
from engram.schemas.payloads import EVENT_TYPES
from engram.streams import event_log
from fastapi import APIRouter, Depends, Query

router = APIRouter(
    prefix="/v1/tenants/{tenant}",
    tags=["audit"],
    dependencies=[Depends(get_principal)],
    responses=responses(401, 403, 404, 422, 429, 503),
)

BOUND = (
    "An ISO-8601 time, compared with when the log appended each event (UTC if no offset is given; "
    "send '+' as %2B), or a log position partition:offset from an event or a write's 202"
)
EventType = Annotated[str, Query(max_length=64, json_schema_extra={"enum": list(EVENT_TYPES)})]


@router.get("/events", response_model=EventLogPage)
async def list_events(
    tenant: TenantId,
    who: CurrentPrincipal,
    runtime: CurrentRuntime,
    start: Annotated[
        str | None, Query(alias="from", max_length=64, description=f"Inclusive. {BOUND}")
    ] = None,
    end: Annotated[str | None, Query(alias="to", max_length=64, description=f"Exclusive. {BOUND}")] = None,
    types: Annotated[
        list[EventType], Query(alias="type", max_length=32, description="Only these event types (repeat it)")
    ] = [],  # noqa: B006
    limit: Annotated[int, Query(ge=1, le=event_log.MAX_LIMIT)] = event_log.DEFAULT_LIMIT,
    cursor: Annotated[
        str | None,
        Query(
            max_length=32,
            pattern=anchored(event_log.POSITION_RE.pattern),
            description="A page's next: where the next page starts (give the same from, to and type)",
        ),
    ] = None,
) -> EventLogPage:
    """The tenant's events in log order (operators and auditors), memory content unsealed (a
    forgotten memory's reads as erased), embeddings as their dimension. A page may be shorter
    than ``limit``, even empty, while ``next`` is not null: each page scans a bounded stretch of
    the log. A tenant with no events has an empty log."""
    if not who.sees_everything:
        raise problem(
            403, "only an operator or an auditor may read the tenant's event log", ["header", "Authorization"]
        )
    try:
        page = await event_log.read_events(
            runtime.settings,
            tenant,
            start=start,
            end=end,
            types=types,
            limit=limit,
            cursor=cursor,
            keys=runtime.stores.keys,
        )
    except event_log.EventLogQueryError as exc:
        raise problem(422, str(exc), ["query", exc.param]) from exc
    except (KafkaError, LookupError, TimeoutError) as exc:
        unavailable = problem(503, f"the event log is unavailable: {exc}", [], "unavailable")
        unavailable.headers = {"Retry-After": "5"}
        raise unavailable from exc
    return EventLogPage.model_validate({"data": page.events, "next": page.next, "skipped": page.skipped})
