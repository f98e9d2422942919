"""The base of every payload class: a frozen record built from, and checked against, the mapping
an Avro record or a JSON payload reads as (``Record.check``/``from_mapping``), and the helpers the
payload classes check their fields with. ``schemas.payloads`` re-exports them."""

from __future__ import annotations

import types
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import MISSING, Field, dataclass, fields
from datetime import datetime
from enum import StrEnum
from functools import cache
from typing import Any, ClassVar, Self

from engram.schemas import vocabulary as v
from engram.schemas.checks import InvalidEvent, Problems, parse_time


class Record:
    """A frozen Avro record: built from its record (defaults filled, values frozen) and back."""

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Self:
        """Build from an Avro record (or a checked JSON object): defaults filled, values frozen."""
        names, freezers, required = _plan(cls)
        if not names.issuperset(record):
            unknown = set(record) - names
            raise InvalidEvent(f"unknown {cls.__name__} fields: {', '.join(sorted(map(str, unknown)))}")
        values = {}
        for name, freeze in freezers:
            if name in record:
                value = record[name]
                values[name] = value if value is None or freeze is None else freeze(value)
        try:
            return cls(**values)
        except TypeError as exc:  # a required field is absent
            missing = [name for name in required if name not in values]
            raise InvalidEvent(f"{cls.__name__} needs {', '.join(missing)}") from exc

    def to_record(self) -> dict[str, Any]:
        """The Avro record (plain dicts and lists), as the codec writes it and a digest reads it."""
        return {
            name: value if type(value := getattr(self, name)) in _PLAIN else thaw(value)
            for name, _ in _plan(type(self))[1]
        }


class Payload(Record):
    """An event's payload; its class name is the event type (a branch of the Envelope's union)."""

    @classmethod
    def check(cls, p: Mapping[str, Any], c: Problems) -> None:
        """Add every domain rule ``p`` breaks to ``c``; ``p`` may hold anything (untrusted JSON)."""

    @classmethod
    def json_defaults(cls, p: Mapping[str, Any], event_id: str) -> dict[str, Any]:
        """``p`` (the JSON form) with what a producer may leave out filled in; Avro's defaults aside."""
        return dict(p)


@dataclass(frozen=True, kw_only=True)
class MemoryEvent(Payload):
    """An event about one memory. What the projection does beside planning it is said here, once:
    ``reshapes`` (it sets the memory's fields, so its shapes are checked), ``reindexes`` (it changes
    what the search indexes hold of it)."""

    memory_id: str
    reshapes: ClassVar[bool] = False
    reindexes: ClassVar[bool] = False

    def property_names(self) -> Iterable[str]:
        """The class properties this event writes (each must be a name engram does not reserve)."""
        return ()

    @classmethod
    def check(cls, p: Mapping[str, Any], c: Problems) -> None:
        c.id(p.get("memory_id"), "memory_id")


def _required(f: Field[Any]) -> bool:
    return f.default is MISSING and f.default_factory is MISSING


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


Freezer = Callable[[Any], Any]


@cache
def _plan(cls: type) -> tuple[frozenset[str], tuple[tuple[str, Freezer | None], ...], tuple[str, ...]]:
    """A record class's field names, each field's freezer (None: kept as it is) and its required
    fields, worked out once per class rather than once per value read."""
    hints = _hints(cls)
    freezers = tuple((f.name, _freezer(hints[f.name], f.name)) for f in fields(cls))
    required = tuple(f.name for f in fields(cls) if _required(f))
    return frozenset(name for name, _ in freezers), freezers, required


def _freezer(hint: Any, name: str) -> Freezer | None:
    """How a non-None value becomes what the field's type holds: enums, nested records, tuples,
    read-only maps (None: as it is)."""
    options = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    kind = next((t for t in options if t is not type(None)), hint)
    origin = typing.get_origin(kind) or kind
    if isinstance(origin, type) and issubclass(origin, StrEnum):
        return origin
    if origin is float:
        return _as_float
    if origin is datetime:
        return lambda value: parse_time(value, name)
    if isinstance(origin, type) and issubclass(origin, Record):
        return origin.from_record
    if origin is tuple:
        return tuple
    if origin is Mapping or origin is typing.Mapping:
        return lambda value: types.MappingProxyType(dict(value))
    return None


def _as_float(value: Any) -> Any:
    if isinstance(value, int) and not isinstance(value, bool):
        return float(value)  # one canonical form: 3 and 3.0 are the same double
    return value


_PLAIN = frozenset({str, int, float, bool, type(None), bytes})


def thaw(value: Any) -> Any:
    """A frozen value in its plain Avro form: enums as text, tuples as lists, maps as dicts."""
    if type(value) in _PLAIN:  # the common case, without the isinstance checks (an enum is a subclass)
        return value
    if isinstance(value, StrEnum):
        return value.value
    if isinstance(value, Record):
        return value.to_record()
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, Mapping):
        return dict(value)
    return value


def _mapping(c: Problems, p: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    """``p[name]`` if it is an object (absent is an empty one); else a reason, and nothing to check."""
    value = p.get(name)
    if value is None:
        return {}
    c.require(isinstance(value, Mapping), f"{name} must be an object")
    return value if isinstance(value, Mapping) else {}


def _list(c: Problems, value: Any, what: str) -> list[Any]:
    if value is None:
        return []
    c.require(isinstance(value, list | tuple), f"{what} must be a list")
    return list(value) if isinstance(value, list | tuple) else []


def _check_properties(c: Problems, props: Mapping[str, Any]) -> None:
    for key, value in props.items():
        if c.name(key, "property name"):
            c.require(key not in v.MEMORY_PREDICATES, f"property name {key!r} is reserved by engram")
        if isinstance(value, str):
            c.require(
                len(value) <= v.PROPERTY_TEXT_MAX,
                f"property {key!r} must be at most {v.PROPERTY_TEXT_MAX} characters",
            )
        else:
            c.require(
                value is None or isinstance(value, bool | int | float),
                f"property {str(key)[:100]!r} must be a string, number, boolean or null, "
                f"not a {type(value).__name__}",
            )
