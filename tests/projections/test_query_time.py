"""Query-side time expressions and pseudo-relevance feedback: pure functions of the query."""

from __future__ import annotations

from datetime import UTC, datetime

from engram.projections.feedback import feedback
from engram.projections.query_time import boost, intervals
from engram.projections.recall import DEFAULT_RANKING

CLOCK = datetime(2024, 2, 1, 15, 0, tzinfo=UTC)


def _days(q: str) -> list[tuple[str, str]]:
    return [(a.date().isoformat(), b.date().isoformat()) for a, b in intervals(q, CLOCK)]


def test_absolute_dates_name_one_day_month_or_year() -> None:
    assert _days("What pasta did Kate make on 29 Dec 2023?") == [("2023-12-29", "2023-12-30")]
    assert _days("lunch on 21.01.2024") == [("2024-01-21", "2024-01-22")]
    assert _days("before 5th of January 2024") == [("2024-01-05", "2024-01-06")]
    assert _days("on January 5, 2024") == [("2024-01-05", "2024-01-06")]
    assert _days("what happened in March 2023") == [("2023-03-01", "2023-04-01")]
    assert _days("a match in 2017") == [("2017-01-01", "2018-01-01")]
    assert _days("on 31.02.2024 or 12.13.2024") == []  # no such day, no such month: no interval
    assert _days("What are Kate's hobbies?") == []


def test_relative_expressions_read_against_the_tenants_clock() -> None:
    assert _days("where was she in May?") == [("2023-05-01", "2023-06-01")]  # the last May before the clock
    assert _days("in January") == [("2024-01-01", "2024-02-01")]
    assert _days("what did we decide yesterday") == [("2024-01-31", "2024-02-01")]
    assert _days("last week") == [("2024-01-18", "2024-01-26")]
    [(start, end)] = intervals("3 weeks ago", CLOCK)
    assert start < datetime(2024, 1, 11, tzinfo=UTC) < end <= CLOCK


def test_boost_is_full_inside_and_falls_to_zero_at_the_slack() -> None:
    day = 86_400.0
    spans = [(10 * day, 11 * day)]
    assert boost(10.5 * day, spans, 3 * day) == 1.0
    assert boost(12.5 * day, spans, 3 * day) == 0.5
    assert boost(20 * day, spans, 3 * day) == 0.0
    assert boost(None, spans, 3 * day) == 0.0 and boost(10.5 * day, [], 3 * day) == 0.0


def test_feedback_adds_the_best_hits_rare_words_not_the_querys_nor_stopwords() -> None:
    texts = [("We hiked the Galveston dunes and the Galveston pier", 1.0), ("Galveston beach was sunny", 0.5)]
    common = {"beach": 90, "sunni": 50}  # in most memories: rarely worth adding

    def doc_freq(words: list[str]) -> list[int]:
        return [common.get(w, 1) for w in words]

    added = feedback("Where did Elise hike?", texts, doc_freq, 100, DEFAULT_RANKING)
    assert max(added, key=added.__getitem__) == "galveston"
    assert abs(added["galveston"] - DEFAULT_RANKING.feedback_weight) < 1e-9
    assert "hike" not in added and "the" not in added and "and" not in added  # the query's, stopwords
    assert added.get("beach", 0.0) < added["dune"]
    assert feedback("anything", [], doc_freq, 100, DEFAULT_RANKING) == {}
