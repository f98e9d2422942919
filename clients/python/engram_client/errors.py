"""Refusals as exceptions, one class per status an agent acts on differently.

The API answers every refusal as ``{"detail": [{"loc", "msg", "type"}]}``; the exception keeps
those items and puts the first ``msg`` in ``reason``, so an agent (or the model behind it) is told
*why* — "memory m1 not found", "only operators and auditors may forget" — not just a number.
"""

from __future__ import annotations

from typing import Any

import httpx


class EngramError(Exception):
    """Any refusal of the API (``status`` is the HTTP status; ``None`` if no answer came)."""

    status: int | None = None

    def __init__(
        self,
        reason: str,
        *,
        status: int | None = None,
        errors: list[dict[str, Any]] | None = None,
        response: httpx.Response | None = None,
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        if status is not None:
            self.status = status
        self.errors: list[dict[str, Any]] = errors or []
        self.response = response

    @property
    def type(self) -> str | None:
        """The API's stable error code of the first item (``not_found``, ``forbidden``, ``missing``…)."""
        return self.errors[0].get("type") if self.errors else None

    def __str__(self) -> str:
        return f"{self.status} {self.reason}" if self.status is not None else self.reason


class BadRequest(EngramError):
    status = 400


class Unauthorized(EngramError):
    """No token, or one the server does not accept (expired, wrong signature, unknown issuer)."""

    status = 401


class Forbidden(EngramError):
    """The token's principal may not make this change; ``reason`` names the rule."""

    status = 403


class NotFound(EngramError):
    """No such memory, or one the principal may not see (the API answers both alike)."""

    status = 404


class Conflict(EngramError):
    """The id is taken, an idempotency key was reused with other content, the write conflicts with
    active memories (ask before overwrite), or the projection rejected it."""

    status = 409


class PayloadTooLarge(EngramError):
    status = 413


class Invalid(EngramError):
    """The request broke a type, a limit, a domain rule or a SHACL shape; ``errors`` has each."""

    status = 422


class RateLimited(EngramError):
    """Over the principal's rate limit after every retry; ``retry_after`` is the server's advice."""

    status = 429

    def __init__(self, reason: str, *, retry_after: float | None = None, **kw: Any) -> None:
        super().__init__(reason, **kw)
        self.retry_after = retry_after


class Unavailable(EngramError):
    """The event log or a tenant's store is unavailable (503) after every retry."""

    status = 503


class NotInTime(EngramError):
    """Accepted but not applied (or a context's ``after`` not reached) within the server's wait."""

    status = 504


class ConnectionFailed(EngramError):
    """No answer at all after every retry (refused, dropped, timed out); ``__cause__`` says how."""


REFUSALS: list[type[EngramError]] = [BadRequest, Unauthorized, Forbidden, NotFound, Conflict, PayloadTooLarge]
REFUSALS += [Invalid, RateLimited, Unavailable, NotInTime]
BY_STATUS: dict[int, type[EngramError]] = {cls.status: cls for cls in REFUSALS}  # type: ignore[misc]


def error_from(response: httpx.Response, retry_after: float | None = None) -> EngramError:
    """The exception for a refusal, with the API's items (tolerant of a body not in its shape)."""
    try:
        detail = response.json().get("detail")
    except (ValueError, AttributeError):
        detail = None
    if isinstance(detail, str):
        detail = [{"loc": [], "msg": detail, "type": None}]
    errors = [d for d in detail if isinstance(d, dict)] if isinstance(detail, list) else []
    reason = "; ".join(str(e.get("msg", "")) for e in errors) or response.reason_phrase or "refused"
    cls = BY_STATUS.get(response.status_code, EngramError)
    kw: dict[str, Any] = {"status": response.status_code, "errors": errors, "response": response}
    if cls is RateLimited:
        return RateLimited(reason, retry_after=retry_after, **kw)
    return cls(reason, **kw)
