"""The edge's field types and the strict base model every request model inherits.

Requests are strict: JSON types are not coerced (``true`` is not 1, ``"0.5"`` is not a number),
numbers must be finite (no NaN, Infinity or 1e309) and no string may hold a lone surrogate. Those
rules live on :class:`EdgeModel` and the types here.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Annotated, Any, Literal

from engram.schemas import vocabulary as v
from engram.schemas.checks import InvalidEvent, parse_time
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    StrictBool,
    StrictInt,
    StrictStr,
    model_validator,
)
from pydantic_core import PydanticCustomError


def anchored(regex: str) -> str:
    """``regex`` as a full match in every engine that reads it (pydantic's and JSON Schema's)."""
    core = regex.removeprefix("\\A").removeprefix("^")
    for end in ("\\Z", "\\z", "$"):
        core = core.removesuffix(end)
    return f"^(?:{core})$"


def _time_text(value: Any) -> datetime:
    """A time read by the events' own parser, so the edge refuses exactly what an event would
    (an instant past year 9999 or before year 1 in UTC included) with the same reason, as a 422."""
    if not isinstance(value, str | datetime):
        raise PydanticCustomError("datetime_type", "Input should be an ISO-8601 date-time string")
    try:
        return parse_time(value, "time")
    except InvalidEvent as exc:
        raise PydanticCustomError("datetime_parsing", str(exc).removeprefix("time: ")) from None


# IRIs at the edge: no white space, control characters or delimiters, and every % an escape.
# Non-ASCII only where RFC 3987 allows it outside a query: no C1 controls, private use or
# noncharacters, and no code point beyond the BMP.
_IRI_TAIL = (
    r'(?:[^\x00-\x20<>"{}|^`\\%\x7f-\x9f\ue000-\uf8ff\ufdd0-\ufdef\ufff0-\uffff\U00010000-\U0010ffff]'
    r"|%[0-9A-Fa-f]{2})"
)
IRI_PATTERN = rf"^[A-Za-z][A-Za-z0-9+.-]*:{_IRI_TAIL}*$"
CLASS_PATTERN = rf"^(?::?[A-Z][A-Za-z0-9_]{{0,127}}|https?://{_IRI_TAIL}+)$"


def _json_integer(value: Any) -> Any:
    """An integer as JSON Schema means it: 3 or 3.0, never true or "3"."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


Int = Annotated[StrictInt, BeforeValidator(_json_integer)]
Float = Annotated[float, Strict()]  # a JSON number (integers included), never a bool or a string
Timestamp = Annotated[datetime, BeforeValidator(_time_text)]  # a string, never a number of seconds
Id = Annotated[StrictStr, Field(pattern=anchored(v.ID_RE.pattern))]
Long = Annotated[StrictInt, Field(ge=v.LONG_MIN, le=v.LONG_MAX)]  # what Avro's long holds


def _one_of(enum: type[v.StrEnum]) -> Any:
    """The enum's values as a ``Literal``: the wire keeps plain strings (and a ``literal_error``)."""
    return Literal[tuple(member.value for member in enum)]  # type: ignore[valid-type]


Kind = _one_of(v.Kind)
Scope = _one_of(v.Scope)
Source = _one_of(v.Source)
OnConflict = _one_of(v.OnConflict)


def _long_if_integer(value: Any) -> Any:
    """An integer property is a 64-bit long (as ``engram produce`` holds it), not a rounded double."""
    if isinstance(value, int) and not isinstance(value, bool) and not v.LONG_MIN <= value <= v.LONG_MAX:
        raise PydanticCustomError("int_too_big", "integers must fit in 64 bits")
    return value


PropertyValue = Annotated[
    StrictBool | Long | Float | Annotated[StrictStr, Field(max_length=v.PROPERTY_TEXT_MAX)] | None,
    BeforeValidator(_long_if_integer),
]
PropertyName = Annotated[StrictStr, Field(pattern=anchored(v.NAME_RE.pattern))]
StatusValue = StrictInt | float | StrictStr


def _surrogates(value: Any, where: str) -> Iterator[str]:
    """Where ``value`` holds a string with a lone surrogate (not Unicode, cannot be stored)."""
    if isinstance(value, str):
        if any("\ud800" <= ch <= "\udfff" for ch in value):
            yield where or "body"
    elif isinstance(value, dict):
        for key, item in value.items():
            shown = str(key).encode("utf-8", "backslashreplace").decode()[:64]
            yield from _surrogates(key, f"{where}.{shown} (name)".lstrip("."))
            yield from _surrogates(item, f"{where}.{shown}".lstrip("."))
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            yield from _surrogates(item, f"{where}[{i}]")


class EdgeModel(BaseModel):
    """A request body: unknown fields refused, numbers finite, strings valid Unicode."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _valid_unicode(cls, data: Any) -> Any:
        for where in _surrogates(data, ""):
            raise PydanticCustomError(
                "string_unicode", "{where}: text must be valid Unicode (no lone surrogates)", {"where": where}
            )
        return data


# At least one character Python's str.strip() keeps, read the same by pydantic's and JSON Schema's
# regex engines (\x1c-\x1f and \x85 are white space to Python only, \ufeff to ECMAScript only).
NON_BLANK = r"[^\s\x1c-\x1f\x85]|\uFEFF"
