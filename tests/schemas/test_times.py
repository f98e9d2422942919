"""Every time, however it arrives, parses to an instant of years 0001-9999 UTC or is refused with a
reason: the one parser (``schemas.checks.parse_time``), the HTTP models' time fields, the periods,
``engram produce`` lines and raw Avro records. Never another exception."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from engram.api.models import ClockTick, MemoryCreate, MemoryPatch, RecallRequest
from engram.schemas.checks import InvalidEvent, parse_time
from engram.schemas.periods import parse_period
from engram.streams import codec
from engram.streams.pipeline import parse_lines
from fastavro import schemaless_writer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from tests.corpus import times
from tests.factories import envelope

LOW = datetime(1, 1, 1, tzinfo=UTC)
HIGH = datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
TIMES = times()


def outcome(value: Any) -> datetime | str:
    """The parsed instant, or the reason it was refused; any other exception fails the test."""
    try:
        parsed = parse_time(value, "valid_at")
    except InvalidEvent as exc:
        assert str(exc).startswith("valid_at: "), exc
        return str(exc)
    assert parsed.tzinfo is not None and LOW <= parsed.astimezone(UTC) <= HIGH
    assert isinstance(parsed.astimezone(UTC).timestamp(), float)  # and representable as Avro timestamp-millis
    return parsed


def model_outcome(value: Any) -> datetime | str:
    """What every request model with a time field makes of it: the same instant or a 422 reason."""
    seen: set[Any] = set()
    for build in (
        lambda: RecallRequest.model_validate({"q": "x", "valid_at": value}).valid_at,
        lambda: ClockTick.model_validate({"source": "operator", "now": value}).now,
        lambda: MemoryPatch.model_validate({"source": "operator", "expires_at": value}).expires_at,
        lambda: (
            MemoryCreate.model_validate(
                {
                    "source": "operator",
                    "label": "L",
                    "content": "C",
                    "kind": "fact",
                    "importance": 3,
                    "occurred_at": value,
                }
            ).occurred_at
        ),
    ):
        try:
            seen.add(build())
        except ValidationError as exc:
            assert all(e["msg"] for e in exc.errors())
            seen.add("refused")
    assert len(seen) == 1, (value, seen)
    return seen.pop()  # type: ignore[no-any-return]


@pytest.mark.parametrize("text", TIMES, ids=range(len(TIMES)))
def test_every_corpus_time_parses_in_range_or_is_refused(text: str) -> None:
    parsed = outcome(text)
    modelled = model_outcome(text)
    if isinstance(parsed, str):
        assert modelled == "refused", (text, modelled)  # a model never lets past what the events refuse
    else:
        assert modelled == parsed, (text, modelled)


def test_the_reported_instants_are_refused_with_a_reason() -> None:
    for text in ("9999-12-31T23:59:59-23:59", "0001-01-01T00:00:00+14:00"):
        assert "out of range" in str(outcome(text))
        with pytest.raises(ValidationError, match="out of range"):
            RecallRequest.model_validate({"q": "x", "valid_at": text})


offsets = st.timedeltas(
    min_value=-timedelta(hours=23, minutes=59, seconds=59, microseconds=999999),
    max_value=timedelta(hours=23, minutes=59, seconds=59, microseconds=999999),
)


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    local=st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31, 23, 59, 59, 999999)),
    offset=offsets,
    spec=st.sampled_from(["auto", "seconds", "milliseconds", "microseconds", "minutes"]),
)
def test_any_iso_string_parses_in_range_or_is_refused(local: datetime, offset: timedelta, spec: str) -> None:
    text = local.replace(tzinfo=timezone(offset)).isoformat(timespec=spec)
    parsed = outcome(text)
    instant = local - offset  # naive UTC, may be out of range
    if isinstance(parsed, datetime):
        assert (
            parsed.replace(tzinfo=None) == local.replace(microsecond=local.microsecond // 1000 * 1000)
            or spec == "minutes"
            or spec == "seconds"
        )
    else:
        assert instant < datetime(1, 1, 1) + timedelta(0) or instant > datetime(
            9999, 12, 31, 23, 59, 59, 999999
        )
    assert isinstance(model_outcome(text), datetime) == isinstance(parsed, datetime)


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.one_of(st.integers(), st.floats(), st.text(max_size=40)))
def test_any_value_parses_in_range_or_is_refused(value: Any) -> None:
    outcome(value)


@pytest.mark.parametrize("year", [1, 2, 1969, 1970, 2026, 9998, 9999])
def test_periods_at_the_ends_of_time_parse_or_are_refused(year: int) -> None:
    for label in (
        f"{year:04d}",
        f"{year:04d}-Q4",
        f"{year:04d}-12",
        f"{year:04d}-W52",
        f"{year:04d}-12-31",
        f"{year:04d}-01-01",
        f"{year:04d}-W01",
    ):
        try:
            period = parse_period(label, datetime.now(UTC))
        except ValueError as exc:
            assert "period must be" in str(exc)
        else:
            assert period.start < period.end


def test_produce_lines_with_corpus_times_are_events_or_reasons() -> None:
    lines = [
        json.dumps(envelope("ClockTicked", {"now": "2026-01-01T00:00:00Z"}, tenant="acme", occurred_at=t))
        for t in TIMES
    ] + [
        json.dumps(envelope("ClockTicked", {"now": t}, tenant="acme"))
        for t in [*TIMES, 253402300800000, -62135596800001, 1e308, -1e308, 2**63]
    ]
    good, bad = parse_lines(lines)
    assert len(good) + len(bad) == len(lines)
    assert any("9999-12-31T23:59:59-23:59" in reason and "out of range" in reason for _, reason in bad), bad


@pytest.mark.parametrize("ms", [-(2**63), -62135596800001, 253402300800000, 2**63 - 1])
def test_a_raw_record_with_a_time_out_of_range_is_undecodable_with_its_reason(ms: int) -> None:
    schema = json.loads(
        json.dumps(codec.envelope_schema()).replace('"logicalType": "timestamp-millis"', '"x": 0')
    )
    event = codec.decode(codec.encode(_tick()))
    record = event.to_avro()
    record["occurred_at"] = ms
    record["payload"] = (record["payload"][0], {"now": 0})
    out = io.BytesIO()
    schemaless_writer(out, schema, record)
    frame = codec.MAGIC + codec.schema_fingerprint(codec.envelope_schema()) + out.getvalue()
    with pytest.raises(codec.UndecodableEvent, match="out of range"):
        codec.decode(frame)


def _tick() -> Any:
    from engram.schemas.events import event_from_json

    return event_from_json(envelope("ClockTicked", {"now": "2026-01-01T00:00:00Z"}, tenant="acme"))
