"""What a command is given and what it answers: who writes (``Attribution``), where the log put it
(``Accepted``), and the refusals, each a ``Refused`` whose ``status`` is the HTTP status that
names it, so the API maps them one to one."""

from __future__ import annotations

import uuid
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar

from engram.projections.governance import Forbidden, Unseen
from engram.projections.validation import rejection_reason
from engram.schemas.checks import Conflict
from engram.schemas.events import Actor

Loc = tuple[str | int, ...]


class Refused(Exception):
    """A command that was not carried out; ``status`` is the HTTP status that names why, ``loc``
    the input at fault (None: the request as a whole)."""

    status: ClassVar[int] = 422
    retry_after: ClassVar[int | None] = None  # a 503's Retry-After, when not the API's default

    def __init__(self, reason: str, loc: Loc | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.loc = loc


class Invalid(Refused):
    status = 422


class NotAllowed(Refused):
    status = 403


class NotFound(Refused):
    status = 404


class Conflicting(Refused):
    status = 409


class TooLarge(Refused):
    status = 413


class LogUnavailable(Refused):
    status = 503


class NotInTime(Refused):
    status = 504


@dataclass(frozen=True)
class Attribution:
    """Who writes, from where, and with which idempotency key: every write is attributable."""

    source: str
    actor: Actor
    event_id: uuid.UUID | str | None = None
    occurred_at: datetime | str | None = None
    purpose: str | None = None
    correlation_id: str | None = None
    teams: frozenset[str] | None = None  # a bearer token's: a write sees no team memory a read would not

    def envelope(self, event_type: str, tenant: str, payload: Mapping[str, Any]) -> dict[str, Any]:
        optional = {
            "occurred_at": self.occurred_at,
            "purpose": self.purpose,
            "correlation_id": self.correlation_id,
        }
        return {
            "type": event_type,
            "tenant": tenant,
            "source": self.source,
            "actor": self.actor.to_avro(),
            "payload": dict(payload),
            "event_id": str(self.event_id or uuid.uuid4()),
            **{k: value for k, value in optional.items() if value is not None},
        }


@dataclass(frozen=True)
class Accepted:
    """Where the log recorded a write; ``applied`` once the projection has it (``wait``)."""

    event_id: str
    memory_id: str | None
    partition: int
    offset: int
    applied: bool


class RecentWrites:
    """Where this process last appended an event for each tenant, for read-your-writes."""

    def __init__(self, keep: int = 100_000) -> None:
        self.keep = keep
        self._last: OrderedDict[str, tuple[int, int]] = OrderedDict()

    def note(self, tenant: str, partition: int, offset: int) -> None:
        self._last[tenant] = (partition, offset)
        self._last.move_to_end(tenant)
        while len(self._last) > self.keep:
            self._last.popitem(last=False)

    def get(self, tenant: str) -> tuple[int, int] | None:
        return self._last.get(tenant)


PATH_FIELDS = frozenset({"memory_id", "association_id"})  # named by the route's path, not its body


def refused(exc: BaseException) -> Refused:
    """The answer to what the pre-check refused."""
    if isinstance(exc, Unseen):  # worded as for a memory that does not exist: it may be one
        return NotFound(str(exc), ("path",) if exc.field in PATH_FIELDS else ("body", exc.field))
    if isinstance(exc, Forbidden):
        return NotAllowed(str(exc))
    if isinstance(exc, Conflict):
        return Conflicting(str(exc))
    return Invalid(rejection_reason(exc))
