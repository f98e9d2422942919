"""Time expressions in a recall query ("on 5 Jan 2024", "21.01.2024", "in May", "last week"), as
valid-time intervals to boost the memories that were valid then.

Relative expressions are read against the tenant's clock (the same clock recency uses), so an old
history is asked about as it was when it was current. Pure functions: no graph, no index.
"""

from __future__ import annotations

import calendar
import re
from datetime import UTC, datetime, timedelta

MONTHS = {name.lower(): i for i, name in enumerate(calendar.month_name) if name}
MONTHS |= {name.lower(): i for i, name in enumerate(calendar.month_abbr) if name}
MONTHS["sept"] = 9
_MONTH = r"(?P<month>" + "|".join(sorted(MONTHS, key=len, reverse=True)) + r")\.?"
_DAY = r"(?P<day>\d{1,2})(?:st|nd|rd|th)?"
_YEAR = r"(?P<year>(?:19|20)\d\d)"
PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (grain, re.compile(rf"\b{p}\b", re.IGNORECASE))
    for grain, p in (
        ("day", rf"{_DAY}(?:\s+of)?\s+{_MONTH},?\s+{_YEAR}"),  # 5 January 2024, 5th of Jan, 2024
        ("day", rf"{_MONTH}\s+{_DAY},?\s+{_YEAR}"),  # January 5, 2024
        ("day", rf"{_DAY}[./]{{1}}(?P<mnum>\d{{1,2}})[./]{_YEAR}"),  # 21.01.2024, 21/01/2024
        ("day", rf"{_YEAR}-(?P<mnum>\d{{2}})-{_DAY}"),  # 2024-01-21
        ("month", rf"{_MONTH},?\s+(?:of\s+)?{_YEAR}"),  # May 2023
        ("month", rf"(?:in|during|since|last)\s+{_MONTH}"),  # in May (the last May before the clock)
        ("year", rf"(?:in|of|during|since)\s+{_YEAR}"),  # in 2017
    )
)
RELATIVE: tuple[tuple[re.Pattern[str], int, int], ...] = tuple(
    (re.compile(rf"\b{p}\b", re.IGNORECASE), back, span)  # days back from the clock, days long
    for p, back, span in (
        (r"today|tonight|this morning", 0, 1),
        (r"yesterday|last night", 1, 1),
        (r"this week", 7, 8),
        (r"last week|a week ago", 14, 8),
        (r"this month", 31, 32),
        (r"last month|a month ago", 62, 32),
        (r"this year", 365, 366),
        (r"last year|a year ago", 730, 366),
    )
)
AGO = re.compile(r"\b(?P<n>\d+|a|one|two|three|four|five|six|few)\s+(?P<unit>day|week|month)s?\s+ago\b", re.I)
_NUMBERS = {"a": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "few": 3}
_UNIT_DAYS = {"day": 1, "week": 7, "month": 30}


def _interval(grain: str, year: int, month: int, day: int) -> tuple[datetime, datetime] | None:
    try:
        start = datetime(year, month, day if grain == "day" else 1, tzinfo=UTC)
    except ValueError:
        return None
    if grain == "day":
        return start, start + timedelta(days=1)
    if grain == "month":
        return start, datetime(year + month // 12, month % 12 + 1, 1, tzinfo=UTC)
    return datetime(year, 1, 1, tzinfo=UTC), datetime(year + 1, 1, 1, tzinfo=UTC)


def intervals(q: str, now: datetime) -> list[tuple[datetime, datetime]]:
    """The valid-time intervals ``q`` names, [start, end) in UTC; empty when it names none."""
    out: list[tuple[datetime, datetime]] = []
    taken: list[tuple[int, int]] = []
    for grain, pattern in PATTERNS:
        for m in pattern.finditer(q):
            if any(a < m.end() and m.start() < b for a, b in taken):
                continue  # "5 May 2024" is a day, not also a month and a year
            parts = m.groupdict()
            month = MONTHS[parts["month"].lower()] if parts.get("month") else int(parts.get("mnum") or 1)
            if not 1 <= month <= 12:
                continue
            year = int(parts["year"]) if parts.get("year") else now.year - (month > now.month)
            found = _interval(grain, year, month, int(parts.get("day") or 1))
            if found is not None:
                out.append(found)
                taken.append(m.span())
    today = datetime(now.year, now.month, now.day, tzinfo=UTC)
    for pattern, back, span in RELATIVE:
        if pattern.search(q):
            start = today - timedelta(days=back)
            out.append((start, start + timedelta(days=span)))
    for m in AGO.finditer(q):
        n = int(m["n"]) if m["n"].isdigit() else _NUMBERS[m["n"].lower()]
        days = n * _UNIT_DAYS[m["unit"].lower()]
        start = today - timedelta(days=days + max(1, days // 2))  # "3 weeks ago": give or take
        out.append((start, today - timedelta(days=max(0, days - max(1, days // 2))) + timedelta(days=1)))
    return out


def boost(when_s: float | None, spans: list[tuple[float, float]], slack_s: float) -> float:
    """1 for a valid time inside one of ``spans`` (epoch seconds), falling linearly to 0 at
    ``slack_s`` outside it; 0 for a memory with no valid time."""
    if when_s is None or not spans:
        return 0.0
    best = 0.0
    for start, end in spans:
        gap = max(start - when_s, when_s - end, 0.0)
        best = max(best, 1.0 - gap / slack_s if slack_s > 0 else float(gap == 0))
    return max(0.0, best)
