"""The codec: single-object framing, every event type round-trips, old writers stay readable."""

from __future__ import annotations

import copy
import json

import pytest
from fastavro.schema import parse_schema

from schemas import vocabulary as v
from schemas.events import Event
from streams import codec
from tests.factories import EXAMPLES, event


@pytest.mark.parametrize("event_type", v.EVENT_TYPES)
def test_every_event_type_round_trips(event_type: str) -> None:
    original = event(event_type, dict(EXAMPLES[event_type]))
    data = codec.encode(original)
    decoded = codec.decode(data)
    assert decoded.type == event_type
    assert decoded.event_id == original.event_id
    assert decoded.occurred_at == original.occurred_at
    assert decoded.actor == original.actor
    for key, value in original.payload.items():
        got = decoded.payload[key]
        if isinstance(value, list) and value and isinstance(value[0], float):
            assert got == pytest.approx(value)  # embeddings are Avro floats (32-bit)
        else:
            assert got == value, key
    assert codec.encode(decoded) == data  # a decoded event encodes to the same bytes


def test_single_object_framing_and_headers() -> None:
    ev = event("KpiObserved", dict(EXAMPLES["KpiObserved"]))
    data = codec.encode(ev)
    assert data[:2] == b"\xc3\x01"
    assert data[2:10] == codec.schema_fingerprint(codec.envelope_schema())
    headers = dict(codec.headers(ev))
    assert headers["event-type"] == b"engram.events.KpiObserved"
    assert headers["schema-fingerprint"] == data[2:10].hex().encode()


def _older_envelope() -> dict:
    """The Envelope as an earlier release wrote it: no correlation_id, a KpiObserved without period,
    and fewer payload types. Built from the current file so the test follows the real schema."""
    raw = json.loads((codec.avro_dir() / "engram.events.Envelope.avsc").read_text())
    raw["fields"] = [f for f in raw["fields"] if f["name"] != "correlation_id"]
    named = {}
    for name in ("Actor", "Source", "KpiObserved", "ClockTicked"):
        named[name] = json.loads((codec.avro_dir() / f"engram.events.{name}.avsc").read_text())
    kpi = copy.deepcopy(named["KpiObserved"])
    kpi["fields"] = [f for f in kpi["fields"] if f["name"] != "period"]
    payload = next(f for f in raw["fields"] if f["name"] == "payload")
    payload["type"] = [kpi, named["ClockTicked"]]
    for f in raw["fields"]:
        if f["type"] == "engram.events.Actor":
            f["type"] = named["Actor"]
        if f["type"] == "engram.events.Source":
            f["type"] = named["Source"]
    return parse_schema(raw)


def test_reader_with_newer_schema_reads_events_written_with_the_old_one() -> None:
    old = _older_envelope()
    written = event("KpiObserved", {"metric": "roas", "value": 2.5, "period": "ignored"})
    record = written.to_avro()
    record.pop("correlation_id")
    name, payload = record["payload"]
    record["payload"] = (name, {k: val for k, val in payload.items() if k != "period"})
    import io

    from fastavro import schemaless_writer

    buf = io.BytesIO()
    buf.write(codec.MAGIC + codec.schema_fingerprint(old))
    schemaless_writer(buf, old, record)
    # Unknown writer: refused with a reason, not a crash.
    with pytest.raises(codec.UndecodableEvent, match="unknown writer schema"):
        codec.decode(buf.getvalue())
    decoded = codec.decode(buf.getvalue(), extra_writers={codec.schema_fingerprint(old): old})
    assert isinstance(decoded, Event)
    assert decoded.type == "KpiObserved"
    assert decoded.payload["value"] == 2.5
    assert decoded.payload["period"] == "unspecified"  # the default the new field declares
    assert decoded.correlation_id is None


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "missing C3 01"),
        (b'{"json": true}', "missing C3 01"),
        (b"\xc3\x01" + b"\x00" * 8 + b"\x01", "unknown writer schema"),
    ],
)
def test_garbage_is_refused_with_a_reason(data: bytes, reason: str) -> None:
    with pytest.raises(codec.UndecodableEvent, match=reason):
        codec.decode(data)


def test_corrupt_body_is_refused() -> None:
    data = codec.encode(event("KpiObserved", dict(EXAMPLES["KpiObserved"])))
    with pytest.raises(codec.UndecodableEvent, match="corrupt"):
        codec.decode(data[:14])
