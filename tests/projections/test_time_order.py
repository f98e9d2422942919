"""Stored times order as times, not as text: the canonical form drops a fraction's trailing zeros,
so "…:12Z" / "…:12.5Z" and "…:12.1Z" / "…:12.15Z" sort the wrong way round as plain strings (a
resolve by ``prefer_newer`` once kept the older of two memories written in the same second)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from engram.projections.terms import time_literal, time_order
from hypothesis import given
from hypothesis import strategies as st

TIMES = st.datetimes(
    min_value=datetime(1970, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)
).map(lambda t: t.replace(microsecond=t.microsecond // 1000 * 1000))


def test_the_canonical_forms_that_sort_wrong_as_text() -> None:
    whole = time_literal(datetime(2026, 12, 5, 8, 3, 12, tzinfo=UTC)).value
    half = time_literal(datetime(2026, 12, 5, 8, 3, 12, 500_000, tzinfo=UTC)).value
    tenth = time_literal(datetime(2026, 12, 5, 8, 3, 12, 100_000, tzinfo=UTC)).value
    later = time_literal(datetime(2026, 12, 5, 8, 3, 12, 150_000, tzinfo=UTC)).value
    assert (whole, half, tenth, later) == (
        "2026-12-05T08:03:12Z",
        "2026-12-05T08:03:12.5Z",
        "2026-12-05T08:03:12.1Z",
        "2026-12-05T08:03:12.15Z",
    )
    assert whole > half and tenth > later  # as text: the wrong way round
    assert time_order(whole) < time_order(half) and time_order(tenth) < time_order(later)
    assert time_order(None) == time_order("") == "" < time_order(whole)


@given(st.lists(TIMES, min_size=2, max_size=20))
def test_sorting_by_time_order_is_sorting_by_time(times: list[datetime]) -> None:
    literals = [time_literal(t).value for t in times]
    assert sorted(literals, key=time_order) == [time_literal(t).value for t in sorted(times)]


@given(TIMES, st.integers(min_value=1, max_value=999))
def test_a_later_millisecond_is_always_later(t: datetime, ms: int) -> None:
    assert time_order(time_literal(t).value) < time_order(time_literal(t + timedelta(milliseconds=ms)).value)
