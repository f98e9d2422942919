"""A request as data (:class:`Call`), how it is retried, and the base every group of calls builds
on: the sync and async clients differ only in how they send, so each request is built once. A
write's call carries an ``Idempotency-Key`` minted when it is built, so every retry of it names the
same event and the server applies it once (``api/deps/idempotency.py``: the key becomes the event id).
"""

from __future__ import annotations

import base64
import binascii
import email.utils
import json
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar
from urllib.parse import quote

import httpx

from engram_client.models import (
    Accepted,
    Answer,
)

T = TypeVar("T")
Kind = Literal["preference", "fact", "objective", "context"]
Scope = Literal["user", "team", "company"]
Source = Literal["agent", "extraction", "operator", "onboarding", "pipeline", "system"]
OnConflict = Literal["ask", "replace", "keep_both"]
Fusion = Literal["default", "bm25", "vector", "rrf", "minmax", "zscore"]
Policy = Literal["prefer_newer", "prefer_higher_confidence", "prefer_more_specific_scope", "prefer_human"]
Relation = Literal["relates_to", "supports", "contradicts", "refines", "depends_on", "caused_by", "part_of"]
Outcome = Literal["ok", "error", "refused", "timeout"]
A = TypeVar("A", bound=Accepted)

RETRY_STATUSES = frozenset({429, 503})
# Errors after which the request may or may not have reached the server: safe to send again only
# because a write carries its idempotency key (a read changes nothing).
RETRY_ERRORS: tuple[type[Exception], ...] = (
    httpx.TimeoutException,
    httpx.NetworkError,
    httpx.RemoteProtocolError,
)


@dataclass(frozen=True)
class Call(Generic[T]):
    """One request and the reader of its answer. ``carries_position``: a context read that waits
    for the client's last write (``after=P:O``) unless the caller named a position."""

    method: str
    path: str
    read: Callable[[Any], T]
    params: list[tuple[str, str]] = field(default_factory=list)
    body: Any = None
    idempotency_key: str | None = None
    carries_position: bool = False
    # the parts of a write's answer that hold positions (default: the answer itself)
    positions: Callable[[Any], list[Any]] | None = None
    # a write whose body names its events (each item of a batch its ``event_id``), so no key is needed
    names_events: bool = False

    @property
    def is_write(self) -> bool:
        return self.idempotency_key is not None or self.names_events

    def headers(self) -> dict[str, str]:
        return {"Idempotency-Key": self.idempotency_key} if self.idempotency_key else {}


@dataclass(frozen=True)
class Retry:
    """How often and how long to retry a request that got no answer, a 503 or a 429.

    The wait is the server's ``Retry-After`` when it sends one (capped at ``max_wait``), else an
    exponential backoff from ``backoff`` seconds."""

    attempts: int = 4
    backoff: float = 0.25
    max_wait: float = 30.0

    def wait(self, attempt: int, response: httpx.Response | None) -> float:
        advised = retry_after(response) if response is not None else None
        if advised is not None:
            return min(advised, self.max_wait)
        return min(self.backoff * 2**attempt, self.max_wait)


def retry_after(response: httpx.Response) -> float | None:
    """The Retry-After header in seconds (delta-seconds or an HTTP date), None if absent or bad."""
    value = response.headers.get("Retry-After")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def tenant_of(token: str) -> str:
    """The ``tenant`` claim of a JWT, read without verifying it: the server verifies; the client
    only needs to know which tenant's routes to call."""
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        tenant = claims["tenant"]
    except (IndexError, ValueError, KeyError, TypeError, binascii.Error) as exc:
        raise ValueError("the token names no tenant (not a JWT with a tenant claim): pass tenant=") from exc
    if not isinstance(tenant, str) or not tenant:
        raise ValueError("the token's tenant claim is not a tenant name: pass tenant=")
    return tenant


def _key(given: str | None) -> str:
    return given if given is not None else str(uuid.uuid4())


def _drop_none(values: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


def _params(values: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Query parameters: None left out, a sequence repeated, booleans as the API spells them."""
    out: list[tuple[str, str]] = []
    for name, value in values.items():
        for one in value if isinstance(value, list | tuple) else [value]:
            if one is None:
                continue
            out.append((name, ("true" if one else "false") if isinstance(one, bool) else str(one)))
    return out


def _id(value: str) -> str:
    return quote(value, safe="")


class CallsBase:
    """The calls of one tenant's routes. Writes are attributed with ``source`` (the token decides
    the actor) and mint an idempotency key unless given one."""

    def __init__(self, tenant: str, source: Source = "agent") -> None:
        self.tenant = tenant
        self.source = source
        self.root = f"/v1/tenants/{_id(tenant)}"

    def _write(
        self,
        path: str,
        body: Mapping[str, Any],
        *,
        method: str = "POST",
        key: str | None,
        wait: bool,
        source: Source | None,
        purpose: str | None = None,
        correlation_id: str | None = None,
        occurred_at: str | None = None,
        read: Callable[[Any], A] = Accepted.model_validate,  # type: ignore[assignment]
    ) -> Call[A]:
        attribution = {
            "source": source or self.source,
            "purpose": purpose,
            "correlation_id": correlation_id,
            "occurred_at": occurred_at,
        }
        return Call(
            method,
            self.root + path,
            read,
            params=_params({"wait": True if wait else None}),
            body={**_drop_none(attribution), **body},
            idempotency_key=_key(key),
        )

    def _verb(
        self, method: str, path: str, *, body: Any = None, key: str | None = None, **params: Any
    ) -> Call[Answer]:
        """A verb whose answer the client does not model field by field (permissive)."""
        read = Answer.model_validate
        return Call(method, self.root + path, read, params=_params(params), body=body, idempotency_key=key)

    def _read(self, path: str, read: Callable[[Any], T], method: str = "GET", **params: Any) -> Call[T]:
        return Call(method, self.root + path, read, params=_params(params))
