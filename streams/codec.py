"""Avro single-object encoding of events: ``C3 01`` + CRC-64-AVRO fingerprint + Avro binary.

Every record names the schema it was written with, so a reader resolves it against the current
``Envelope`` (Avro schema resolution: new fields take their defaults). Writer schemas are found
by fingerprint among the current schema and every schema file under ``avro/history/``, which
``streams.schema_history`` keeps (``engram schema-history`` after a schema change; tests check it).
"""

from __future__ import annotations

import io
import json
from functools import cache
from pathlib import Path
from typing import Any

from engram.schemas import ENVELOPE_FILE, avro_dir, history_dir
from engram.schemas.checks import InvalidEvent
from engram.schemas.events import Event
from fastavro import schemaless_reader, schemaless_writer
from fastavro.schema import fingerprint, load_schema, parse_schema, to_parsing_canonical_form
from fastavro.validation import ValidationError, validate

MAGIC = b"\xc3\x01"
HEADER_EVENT_TYPE = "event-type"
HEADER_FINGERPRINT = "schema-fingerprint"
HEADER_REASON = "dead-letter-reason"


_fingerprints: dict[int, tuple[Any, bytes]] = {}


def schema_fingerprint(schema: Any) -> bytes:
    """The 8 bytes of the single-object header (CRC-64-AVRO, little-endian), memoised per schema."""
    cached = _fingerprints.get(id(schema))
    if cached is None or cached[0] is not schema:
        cached = (schema, bytes.fromhex(fingerprint(to_parsing_canonical_form(schema), "CRC-64-AVRO")))
        _fingerprints[id(schema)] = cached
    return cached[1]


@cache
def envelope_schema() -> Any:
    return load_schema(avro_dir() / ENVELOPE_FILE)


def history_schemas(directory: Path | None = None) -> dict[bytes, Any]:
    """The Envelope versions recorded under ``avro/history/`` (see ``streams.schema_history``), keyed by
    the fingerprint of their content (not their file name)."""
    directory = directory or history_dir()
    known: dict[bytes, Any] = {}
    if directory.is_dir():
        for path in sorted(directory.glob("*.avsc")):
            schema = parse_schema(json.loads(path.read_text()))
            known[schema_fingerprint(schema)] = schema
    return known


def writer_schemas(directory: Path | None = None) -> dict[bytes, Any]:
    """Every schema an event may have been written with, by fingerprint: the history and the current
    Envelope (which wins for its own fingerprint). The package's history is read once; another
    ``directory`` is read afresh on every call."""
    if directory is None:
        return _writer_schemas()
    return {**history_schemas(directory), schema_fingerprint(envelope_schema()): envelope_schema()}


@cache
def _writer_schemas() -> dict[bytes, Any]:
    return {**history_schemas(), schema_fingerprint(envelope_schema()): envelope_schema()}


class UndecodableEvent(ValueError):
    """Bytes that are not an event this codebase can read; the message is the reason."""


def encode(event: Event, schema: Any | None = None) -> bytes:
    """Encode with the current Envelope (or ``schema``, for tests of older writers)."""
    schema = schema or envelope_schema()
    record = event.to_avro()
    try:
        validate(record, schema, raise_errors=True)
    except ValidationError as exc:
        raise InvalidEvent(f"does not match the Avro schema: {str(exc)[:1000]}") from exc
    out = io.BytesIO()
    out.write(MAGIC)
    out.write(schema_fingerprint(schema))
    schemaless_writer(out, schema, record)
    return out.getvalue()


def decode(data: bytes, extra_writers: dict[bytes, Any] | None = None) -> Event:
    if len(data) < 10 or data[:2] != MAGIC:
        raise UndecodableEvent("not Avro single-object encoding (missing C3 01 marker)")
    fp = data[2:10]
    writer = (extra_writers or {}).get(fp) or _writer_schemas().get(fp)
    if writer is None:
        raise UndecodableEvent(f"unknown writer schema fingerprint {fp.hex()}")
    body = io.BytesIO(data[10:])
    try:
        record = schemaless_reader(
            body, writer, envelope_schema(), return_record_name=True, return_record_name_override=True
        )
        event = Event.from_avro(record)  # type: ignore[arg-type]
    except OverflowError as exc:  # a timestamp-millis no datetime holds (years 0001-9999 UTC)
        raise UndecodableEvent(f"corrupt Avro body: a time out of range: {exc}") from exc
    except Exception as exc:  # a corrupt body can fail anywhere in the reader
        raise UndecodableEvent(f"corrupt Avro body: {type(exc).__name__}: {exc}") from exc
    extra = len(data) - 10 - body.tell()
    if extra:  # a frame is one record, consumed exactly; anything after it is not ours to guess at
        raise UndecodableEvent(f"{extra} unexpected bytes after the Avro record")
    return event


def headers(event: Event, schema: Any | None = None) -> list[tuple[str, bytes]]:
    return [
        (HEADER_EVENT_TYPE, event.full_type.encode()),
        (HEADER_FINGERPRINT, schema_fingerprint(schema or envelope_schema()).hex().encode()),
    ]
