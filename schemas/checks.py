"""How an event is refused: the errors, and the collector that names every broken rule at once.

Shared by the envelope (``schemas.events``) and the payloads (``schemas.payloads``), so a reason
reads the same wherever the event came from (HTTP, ``engram produce``, a raw Kafka record).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

from engram.schemas import vocabulary as v
from engram.schemas.periods import parse_period


class InvalidEvent(ValueError):
    """An event that breaks its contract; the message is the reason shown to the caller."""


class Conflict(InvalidEvent):
    """A valid event that contradicts what the log already holds (an id taken, an id reused)."""


def parse_time(value: Any, what: str) -> datetime:
    """A UTC-aware time at millisecond precision, the precision Avro keeps."""
    parsed = _parse_time(value, what)
    return parsed.replace(microsecond=parsed.microsecond // 1000 * 1000)


def _parse_time(value: Any, what: str) -> datetime:
    try:
        parsed = _parse_any_time(value, what)
        parsed.astimezone(UTC).timestamp()  # representable as UTC and as Avro timestamp-millis
    except InvalidEvent:
        raise
    except (OverflowError, OSError, ValueError) as exc:
        raise InvalidEvent(f"{what}: time out of range: {value!r}") from exc
    return parsed


def _parse_any_time(value: Any, what: str) -> datetime:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return datetime.fromtimestamp(value / 1000, UTC)
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError as exc:
            raise InvalidEvent(f"{what}: not an ISO-8601 time: {value!r}") from exc
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    raise InvalidEvent(f"{what}: expected an ISO-8601 time, got {type(value).__name__}")


def show(value: Any) -> str:
    """A value in a reason, cut short: reasons travel in headers and HTTP bodies."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def hostile_values(value: Any, where: str) -> Iterator[str]:
    """Non-finite numbers, integers Avro's long cannot hold (a union would turn them into doubles)
    and strings that are not valid Unicode (lone surrogates), anywhere. Every event read is checked,
    and nearly all are clean: a quick pass says so, and only a value that fails it is walked for
    its reasons."""
    return iter(()) if _clean(value) else _hostile(value, where)


def _clean(value: Any) -> bool:
    """No hostile value in ``value``: exact types decided here, anything else by ``_hostile``."""
    t = type(value)
    if t is str:
        return value.isascii() or _utf8(value)
    if value is None or t is bool:
        return True
    if t is int:
        return v.LONG_MIN <= value <= v.LONG_MAX
    if t is float:
        return math.isfinite(value)
    if t is dict or t is MappingProxyType:
        # loops, not all(...): a generator's frame per level would halve the nesting that reads
        for key, item in value.items():  # noqa: SIM110
            if not (_clean(key) and _clean(item)):
                return False
        return True
    if t is list or t is tuple:
        if finite_floats(value):
            return True
        for item in value:  # noqa: SIM110
            if not _clean(item):
                return False
        return True
    return next(_hostile(value, ""), None) is None


def finite_floats(values: list[Any] | tuple[Any, ...], limit: float = math.inf) -> bool:
    """Whether ``values`` is a vector: all floats, finite, none of magnitude above ``limit``.

    Decided in C (an embedding has hundreds of components, each checked per event read): False
    means "not shown so", and the caller checks item by item as it would without this.
    A finite sum has no infinity or NaN among its terms (one that overflows only falls back)."""
    return (
        len(values) > 0
        and type(values[0]) is float
        and set(map(type, values)) == _FLOAT
        and math.isfinite(sum(values))
        and max(map(abs, values)) <= limit
    )


_FLOAT = {float}


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _hostile(value: Any, where: str) -> Iterator[str]:
    if isinstance(value, float) and not math.isfinite(value):
        yield f"{where}: numbers must be finite, got {value!r}"
    elif isinstance(value, int) and not isinstance(value, bool) and not v.LONG_MIN <= value <= v.LONG_MAX:
        yield f"{where}: integers must fit in 64 bits, got {show(value)}"
    elif isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            yield f"{where}: text must be valid Unicode (no lone surrogates)"
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _hostile(key, where)
            yield from _hostile(item, f"{where}.{key}" if isinstance(key, str) else where)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _hostile(item, where)


_IMPORTANCE = (min(v.Importance), max(v.Importance))  # checked on every memory event read


class Problems:
    """Every broken rule of one event, so a caller fixes a line once rather than once per rule."""

    def __init__(self) -> None:
        self.reasons: list[str] = []

    def require(self, cond: bool, reason: str) -> bool:
        if not cond:
            self.reasons.append(reason)
        return cond

    def id(self, value: Any, what: str) -> bool:
        return self.require(
            v.full_match(v.ID_RE, value), f"{what} must match {v.ID_RE.pattern}, got {show(value)}"
        )

    def name(self, value: Any, what: str) -> bool:
        return self.require(
            v.full_match(v.NAME_RE, value), f"{what} must match {v.NAME_RE.pattern}, got {show(value)}"
        )

    def one_of(self, value: Any, allowed: type[v.StrEnum], what: str) -> bool:
        return self.require(
            isinstance(value, str) and value in v.values(allowed),
            f"{what} must be one of {', '.join(allowed)}",
        )

    def importance(self, value: Any) -> None:
        self.require(
            isinstance(value, int)
            and not isinstance(value, bool)
            and _IMPORTANCE[0] <= value <= _IMPORTANCE[1],
            f"importance must be an integer 1-5, got {show(value)}",
        )

    def number(self, value: Any, what: str, low: float | None = None, high: float | None = None) -> bool:
        ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        ok = ok and (low is None or value >= low) and (high is None or value <= high)
        bounds = "" if low is None else f" {low:g}-{high:g}" if high is not None else f" >= {low:g}"
        return self.require(ok, f"{what} must be a finite number{bounds}, got {show(value)}")

    def text(self, value: Any, what: str, limit: int) -> None:
        self.require(
            isinstance(value, str) and value.strip() != "" and len(value) <= limit,
            f"{what} must be a non-empty string of at most {limit} characters",
        )

    def time(self, value: Any, what: str) -> None:
        try:
            parse_time(value, what)
        except InvalidEvent as exc:
            self.reasons.append(str(exc))

    def period(self, value: Any) -> None:
        try:
            parse_period(value, datetime.now(UTC))
        except ValueError as exc:
            self.reasons.append(str(exc))

    def raise_if_any(self) -> None:
        if self.reasons:
            raise InvalidEvent("; ".join(dict.fromkeys(self.reasons)))
