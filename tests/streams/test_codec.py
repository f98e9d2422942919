"""The codec: single-object framing, every event type round-trips, old writers stay readable."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest
from engram.schemas import ENVELOPE_FILE, avro_dir, history_dir, payloads
from engram.schemas.events import Event
from engram.streams import codec, schema_history
from fastavro.schema import load_schema, parse_schema

from tests.factories import EXAMPLES, event


def _branches(envelope: dict) -> dict[str, dict]:
    """An Envelope's payload records by event type (short name)."""
    (union,) = (f["type"] for f in envelope["fields"] if f["name"] == "payload")
    return {b["name"].rsplit(".", 1)[-1]: b for b in union}


EVENT_TYPES = payloads.EVENT_TYPES  # the branches of the current Envelope's payload union


@pytest.mark.parametrize("event_type", EVENT_TYPES)
def test_every_event_type_round_trips(event_type: str) -> None:
    original = event(event_type, dict(EXAMPLES[event_type]))
    data = codec.encode(original)
    decoded = codec.decode(data)
    assert decoded.type == event_type
    assert decoded.event_id == original.event_id
    assert decoded.occurred_at == original.occurred_at
    assert decoded.actor == original.actor
    # Compared as Avro records: the same whether a payload is a mapping or a payload class.
    got_payload, want_payload = decoded.to_avro()["payload"][1], original.to_avro()["payload"][1]
    for key, value in want_payload.items():
        got = got_payload[key]
        if isinstance(value, list | tuple) and value and isinstance(value[0], float):
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
    raw = json.loads((avro_dir() / ENVELOPE_FILE).read_text())
    raw["fields"] = [f for f in raw["fields"] if f["name"] != "correlation_id"]
    named = {}
    for name in ("Actor", "Source", "KpiObserved", "ClockTicked"):
        named[name] = json.loads((avro_dir() / f"engram.events.{name}.avsc").read_text())
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
    written = event("KpiObserved", {"metric": "roas", "value": 2.5, "period": "2026-11"})
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
    payload = decoded.to_avro()["payload"][1]
    assert payload["value"] == 2.5
    assert payload["period"] == "unspecified"  # the default the new field declares
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


# Schema history: every Envelope version ever released stays readable (streams/schema_history.py).

HISTORY_FIX = "run `engram schema-history` and commit schemas/avro/history/"


def _history_files() -> list[Path]:
    return sorted(history_dir().glob("*.avsc"))


def _assert_same_record(decoded: Event, original: Event, writer: dict) -> None:
    """What ``writer`` carried of ``original`` came back (fields it lacks took the reader's defaults)."""
    got, want = decoded.to_avro(), original.to_avro()
    assert got["payload"][0] == want["payload"][0]
    top = {f["name"] for f in writer["fields"]} - {"payload"}
    inner = {f["name"] for f in _branches(writer)[decoded.type]["fields"]}
    for fields, g, w in ((top, got, want), (inner, got["payload"][1], want["payload"][1])):
        for key in fields & set(w):  # a field the writer added has no counterpart in the event
            value = w[key]
            if isinstance(value, list | tuple) and value and isinstance(value[0], float):
                assert g[key] == pytest.approx(value), key  # embeddings are Avro floats (32-bit)
            else:
                assert g[key] == value, key  # incl. occurred_at: the writer's logicalType survived


def test_the_current_envelope_is_in_the_schema_history() -> None:
    current = codec.schema_fingerprint(codec.envelope_schema())
    assert current in codec.history_schemas(), HISTORY_FIX
    assert schema_history.missing() == [], HISTORY_FIX
    # The current Envelope, not its history copy, reads current records: writer is reader, the fast path.
    assert codec.writer_schemas()[current] is codec.envelope_schema()


def test_every_history_file_is_named_by_its_fingerprint_and_parses() -> None:
    files = _history_files()
    assert files, HISTORY_FIX
    for path in files:
        schema = parse_schema(json.loads(path.read_text()))  # self-contained: no sibling files needed
        assert path.name == f"{codec.schema_fingerprint(schema).hex()}.avsc"
        assert schema["name"] == "engram.events.Envelope", path.name


@pytest.mark.parametrize("path", _history_files(), ids=lambda p: p.stem)
def test_records_from_every_historical_writer_decode_with_the_current_reader(path: Path) -> None:
    writer = parse_schema(json.loads(path.read_text()))
    written = [t for t in _branches(writer) if t in EVENT_TYPES]  # a type since removed cannot be read
    assert written, path.name
    for event_type in written:
        original = event(event_type, dict(EXAMPLES[event_type]))
        data = codec.encode(original, writer)
        assert data[2:10].hex() == path.stem
        _assert_same_record(codec.decode(data), original, writer)


def test_an_evolved_envelope_is_readable_only_once_recorded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Add an optional field to the Envelope: the new writer's records are unknown to a reader until
    `record()` puts the new version in the history, and recording is idempotent."""
    schemas, history = tmp_path / "avro", tmp_path / "avro" / "history"
    schemas.mkdir()
    for src in avro_dir().glob("*.avsc"):
        shutil.copy(src, schemas / src.name)
    for src in _history_files():  # the history as released
        history.mkdir(exist_ok=True)
        shutil.copy(src, history / src.name)
    raw = json.loads((schemas / ENVELOPE_FILE).read_text())
    raw["fields"].insert(-1, {"name": "trace_id", "type": ["null", "string"], "default": None})
    (schemas / ENVELOPE_FILE).write_text(json.dumps(raw))

    evolved = load_schema(str(schemas / ENVELOPE_FILE))
    fp, text = schema_history.current_entry(schemas)
    assert fp != codec.schema_fingerprint(codec.envelope_schema()).hex()
    original = event("KpiObserved", dict(EXAMPLES["KpiObserved"]))
    data = codec.encode(original, evolved)
    assert data[2:10].hex() == fp

    assert schema_history.missing(history, schemas) == [fp]
    assert schema_history.main(["--check", "--schema-dir", str(schemas), "--history-dir", str(history)]) == 1
    assert "run `engram schema-history` and commit schemas/avro/history/" in capsys.readouterr().err
    with pytest.raises(codec.UndecodableEvent, match="unknown writer schema"):
        codec.decode(data, extra_writers=codec.writer_schemas(history))

    written = schema_history.record(history, schemas)
    assert written == history / f"{fp}.avsc"
    assert written.read_text() == text
    assert schema_history.record(history, schemas) is None  # idempotent
    assert schema_history.missing(history, schemas) == []
    assert schema_history.main(["--check", "--schema-dir", str(schemas), "--history-dir", str(history)]) == 0
    assert len(list(history.glob("*.avsc"))) == len(_history_files()) + 1

    decoded = codec.decode(data, extra_writers=codec.writer_schemas(history))
    _assert_same_record(decoded, original, evolved)
    # The package's own history is untouched and cached as before.
    assert codec.writer_schemas() is codec.writer_schemas()
    assert bytes.fromhex(fp) not in codec.writer_schemas()
