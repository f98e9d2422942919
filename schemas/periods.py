"""The periods a KPI or spend observation is for: a label, its kind, and its UTC interval.

A label names one calendar period: ``2026`` (year), ``2026-Q4`` (quarter), ``2026-11`` (month),
``2026-W49`` (ISO week) or ``2026-11-30`` (day). The interval is half-open, [start, end), in UTC,
so the rules can ask whether the clock is inside it. ``unspecified`` (the Avro default of events
written before observations had periods) is the instant the observation occurred.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Final

UNSPECIFIED: Final = "unspecified"
KINDS: Final = ("day", "week", "month", "quarter", "year")  # a budget cap's :period
FORMS: Final = "2026, 2026-Q4, 2026-11, 2026-W49, 2026-11-30"

_YEAR = re.compile(r"(\d{4})", re.ASCII)
_QUARTER = re.compile(r"(\d{4})-Q([1-4])", re.ASCII)
_MONTH = re.compile(r"(\d{4})-(\d{2})", re.ASCII)
_WEEK = re.compile(r"(\d{4})-W(\d{2})", re.ASCII)
_DAY = re.compile(r"(\d{4})-(\d{2})-(\d{2})", re.ASCII)


@dataclass(frozen=True)
class Period:
    label: str
    kind: str  # one of KINDS, or "unspecified"
    start: datetime
    end: datetime  # exclusive


def _utc(d: date) -> datetime:
    return datetime(d.year, d.month, d.day, tzinfo=UTC)


def _month_start(year: int, month: int) -> date:
    return date(year + (month - 1) // 12, (month - 1) % 12 + 1, 1)


def parse_period(label: str, occurred_at: datetime) -> Period:
    """The period a label names; ValueError (with the accepted forms) for anything else.

    ``occurred_at`` only places an ``unspecified`` observation in time.
    """
    if not isinstance(label, str):
        raise ValueError(f"period must be a string such as {FORMS}")
    if label == UNSPECIFIED:
        return Period(label, UNSPECIFIED, occurred_at, occurred_at)
    try:
        if m := _YEAR.fullmatch(label):
            year = int(m[1])
            return Period(label, "year", _utc(date(year, 1, 1)), _utc(date(year + 1, 1, 1)))
        if m := _QUARTER.fullmatch(label):
            year, q = int(m[1]), int(m[2])
            start = _month_start(year, 3 * q - 2)
            return Period(label, "quarter", _utc(start), _utc(_month_start(year, 3 * q + 1)))
        if m := _MONTH.fullmatch(label):
            year, month = int(m[1]), int(m[2])
            if not 1 <= month <= 12:
                raise ValueError
            return Period(label, "month", _utc(date(year, month, 1)), _utc(_month_start(year, month + 1)))
        if m := _WEEK.fullmatch(label):
            monday = date.fromisocalendar(int(m[1]), int(m[2]), 1)
            return Period(label, "week", _utc(monday), _utc(monday + timedelta(days=7)))
        if m := _DAY.fullmatch(label):
            day = date(int(m[1]), int(m[2]), int(m[3]))
            return Period(label, "day", _utc(day), _utc(day + timedelta(days=1)))
    except (ValueError, OverflowError):  # no such date, or past year 9999
        pass
    raise ValueError(f"period must be a calendar period such as {FORMS} (or {UNSPECIFIED}), got {label!r}")
