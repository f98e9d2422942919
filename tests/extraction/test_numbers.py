"""Amounts as people write them, and the extractor's determinism, by property."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from engram.streams.extraction.extractor import Turn
from engram.streams.extraction.numbers import amounts, parse_amount, parse_digits
from engram.streams.extraction.patterns import PatternExtractor
from hypothesis import given, settings
from hypothesis import strategies as st


@pytest.mark.parametrize(
    "text",
    [
        "$40k",
        "40,000",
        "40000.00",
        "40 k",
        "40 000",
        "40K USD",
        "USD 40000",
        "40.000 €",
        "40'000",
        "$40,000.00",
        "forty thousand",
        "40000$",
        "0.04m",
        "$ 40K",
    ],
)
def test_forty_thousand_in_many_forms(text: str) -> None:
    assert parse_amount(text) == 40000


@pytest.mark.parametrize(
    ("text", "value", "currency"),
    [
        ("€5.5k", 5500, "EUR"),
        ("1.2m", 1_200_000, None),
        ("₹8,00,000", 800_000, "INR"),
        ("CHF 12'000", 12000, "CHF"),
        ("£12,500", 12500, "GBP"),
        ("80 cents", 0.8, "USD"),
        ("$1,000.50", 1000.5, "USD"),
        ("3,5", 3.5, None),
        ("two dollars", 2, "USD"),
        ("¥500,000", 500_000, "JPY"),
    ],
)
def test_amounts_and_currencies(text: str, value: float, currency: str | None) -> None:
    [found] = amounts(text)
    assert (found.value, found.currency) == (value, currency)


@given(st.integers(min_value=1, max_value=999_999_999))
def test_grouped_digits_read_back_as_the_number(n: int) -> None:
    for sep in (",", " ", "'", "."):
        grouped = f"{n:,}".replace(",", sep)
        assert parse_digits(grouped) == n, grouped


@given(st.integers(min_value=1, max_value=999), st.sampled_from(["k", "K", " k", "thousand"]))
def test_a_thousands_suffix_multiplies(n: int, suffix: str) -> None:
    assert parse_amount(f"${n}{suffix}") == n * 1000


@given(st.integers(min_value=0, max_value=99_999), st.integers(min_value=0, max_value=99))
def test_two_decimal_places_are_cents_not_thousands(whole: int, cents: int) -> None:
    assert parse_digits(f"{whole}.{cents:02d}") == pytest.approx(whole + cents / 100)


WORDS = st.sampled_from(
    [
        "keep",
        "ROAS",
        "above",
        "3",
        "never",
        "spend",
        "more",
        "than",
        "$40k",
        "on",
        "Meta",
        "per",
        "month",
        "we",
        "prefer",
        "our",
        "fiscal",
        "year",
        "starts",
        "in",
        "April",
        "lol",
        "?",
        "used",
        "to",
        ".",
        "CPA",
        "under",
    ]
)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(WORDS, min_size=1, max_size=14).map(" ".join), min_size=1, max_size=4))
def test_the_same_turns_give_the_same_candidates(texts: list[str]) -> None:
    extractor = PatternExtractor()
    at = datetime(2026, 12, 5, tzinfo=UTC)
    turns = [Turn("c", f"t{n}", n + 1, "dana", "user", text, at) for n, text in enumerate(texts)]
    first = extractor.extract_sync(turns, [])
    assert first == extractor.extract_sync(list(turns), [])
    for c in first:
        assert 0 < c.memory["confidence"] < 1
        assert c.evidence[0] in {t.turn_id for t in turns}
