"""The one reading of JSON text the project accepts, for HTTP bodies and ``engram produce`` lines.

RFC 8259: JSON exchanged between systems is UTF-8, without a byte order mark, and an object's
names should be unique. Python's ``json`` reads UTF-16 and UTF-32 bytes, skips a UTF-8 BOM in bytes
and keeps the last of repeated keys, so two readers could see two different documents in one body;
here each of those is refused with its reason instead.
"""

from __future__ import annotations

import json
from typing import Any, Literal

BOMS = {
    b"\xef\xbb\xbf": "UTF-8",
    b"\x00\x00\xfe\xff": "UTF-32",
    b"\xff\xfe\x00\x00": "UTF-32",
    b"\xfe\xff": "UTF-16",
    b"\xff\xfe": "UTF-16",
}


class NotJson(ValueError):
    """Text that is not the JSON this project reads; ``kind`` says why, ``path`` where (a repeated
    key's object, from the top)."""

    def __init__(
        self,
        reason: str,
        kind: Literal["encoding", "syntax", "unreadable", "repeated_key"],
        path: tuple[str | int, ...] = (),
    ) -> None:
        super().__init__(reason)
        self.kind, self.path = kind, path


def loads(data: bytes | str) -> Any:
    """The JSON value of ``data``: UTF-8 without a BOM, one value, no repeated key in any object."""
    if isinstance(data, bytes):
        data = _utf8(data)
    elif data.startswith("\ufeff"):
        raise NotJson("JSON text must not start with a byte order mark (RFC 8259)", "encoding")
    elif any("\udc80" <= ch <= "\udcff" for ch in data):  # bytes a surrogateescape decoding kept
        raise NotJson("JSON text must be UTF-8 (RFC 8259); this is not", "encoding")
    repeated: list[tuple[str, dict[str, Any]]] = []

    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out = dict(pairs)
        if len(out) != len(pairs) and not repeated:
            seen: set[str] = set()
            key = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
            repeated.append((key, out))
        return out

    try:
        value = json.loads(data, object_pairs_hook=unique)
    except json.JSONDecodeError as exc:
        raise NotJson(f"not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}", "syntax") from None
    except RecursionError:
        raise NotJson("not JSON this reads: nested too deeply", "unreadable") from None
    except ValueError as exc:  # a number beyond what Python converts (4,300 digits)
        raise NotJson(f"not JSON this reads: {exc}", "unreadable") from None
    if repeated:
        key, where = repeated[0]
        path = (*_path_to(value, where), key)
        shown = ".".join(str(p) for p in path)
        raise NotJson(
            f"repeated keys in a JSON object: {key[:64]!r} (at {shown[:200]})", "repeated_key", path
        )
    return value


def _utf8(data: bytes) -> str:
    for bom, name in BOMS.items():
        if data.startswith(bom):
            reason = "must not start with a byte order mark" if name == "UTF-8" else f"is {name}, not UTF-8"
            raise NotJson(f"JSON text {reason} (RFC 8259: JSON is UTF-8, without a BOM)", "encoding")
    if b"\x00" in data[:4]:  # JSON text starts with a character NUL is no part of in UTF-8
        raise NotJson("JSON text is UTF-16 or UTF-32, not UTF-8 (RFC 8259: JSON is UTF-8)", "encoding")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise NotJson(
            f"JSON text must be UTF-8 (RFC 8259): invalid byte at offset {exc.start}", "encoding"
        ) from None


def _path_to(value: Any, target: dict[str, Any]) -> tuple[str | int, ...]:
    """Where ``target`` (an object of ``value``, by identity) sits, as keys and indexes."""
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(value, ())]
    while stack:
        node, path = stack.pop()
        if node is target:
            return path
        if isinstance(node, dict):
            stack.extend((v, (*path, k)) for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((v, (*path, i)) for i, v in enumerate(node))
    return ()
