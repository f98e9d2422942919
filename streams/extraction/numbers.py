"""Amounts as people write them: "$40k", "40,000", "40 000 EUR", "€5.5k", "1.2m", "12'000 CHF",
"₹8,00,000", "forty thousand dollars", "80 cents".

One regular expression finds a money-or-number mention with its currency on either side; one
function turns the digits into a number, so the extractor and the tests agree on what "40.000"
means (a thousands separator: three digits after a single dot) and what "40.50" means (a decimal).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

SYMBOLS = {"$": "USD", "€": "EUR", "£": "GBP", "¥": "JPY", "₹": "INR"}
CODES = (
    "USD",
    "EUR",
    "GBP",
    "JPY",
    "INR",
    "CAD",
    "AUD",
    "CHF",
    "SEK",
    "NOK",
    "DKK",
    "NZD",
    "SGD",
    "BRL",
    "MXN",
)
WORD_CURRENCIES = {
    "dollar": "USD",
    "dollars": "USD",
    "bucks": "USD",
    "euro": "EUR",
    "euros": "EUR",
    "pound": "GBP",
    "pounds": "GBP",
    "yen": "JPY",
    "rupees": "INR",
}
MULTIPLIERS = {
    "k": 1e3,
    "thousand": 1e3,
    "m": 1e6,
    "mm": 1e6,
    "mn": 1e6,
    "million": 1e6,
    "bn": 1e9,
    "billion": 1e9,
}

_UNIT_WORDS = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen"
)
_UNITS = {w: i for i, w in enumerate(_UNIT_WORDS.split())}
_TEN_WORDS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety"
_TENS = {w: 10 * i for i, w in enumerate(_TEN_WORDS.split()) if i >= 2}
_WORD = "|".join(sorted([*_UNITS, *_TENS, "hundred"], key=len, reverse=True))

_SYM = "[$€£¥₹]"
_CODE = "|".join(CODES)
_CUR_WORD = "|".join(sorted(WORD_CURRENCIES, key=len, reverse=True))
_DIGITS = (
    r"\d{1,3}(?:(?:,|'|\u2019|\u00a0|\u202f| (?=\d{3}\b))\d{3})+(?:\.\d+)?"  # 40,000 40'000 40 000 (1,000.50)
    r"|\d{1,2}(?:,\d{2})+,\d{3}"  # 8,00,000 (lakh grouping)
    r"|\d{1,3}(?:\.\d{3})+(?:,\d+)?(?![\d.])"  # 40.000 40.000,50
    r"|\d+(?:[.,]\d+)?"  # 40000 40000.00 5.5 3,5
)
_WORDS = rf"(?:(?:{_WORD})(?:[ -](?:{_WORD}|and))*)"
AMOUNT = re.compile(
    rf"(?<![\w.])(?:(?P<sym>{_SYM})\s?|(?P<code>{_CODE})\s?)?"
    rf"(?:(?P<digits>{_DIGITS})|(?P<words>{_WORDS}))"
    rf"(?:\s?(?P<mult>k|mm|mn|m|bn|thousand|million|billion)\b)?"
    rf"(?:\s?(?P<sym2>{_SYM})|\s?(?P<code2>{_CODE})\b|\s(?P<word>{_CUR_WORD}|cents?)\b|(?P<pct>\s?%|\s?percent\b))?",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Amount:
    """A number mentioned in text, where it is, and the currency written next to it (if any)."""

    value: float
    currency: str | None
    start: int
    end: int
    percent: bool = False
    scaled: bool = False  # a multiplier (k, m) or a currency was written: a money amount, not a ratio

    @property
    def number(self) -> int | float:
        """The value as an int when it is whole (40000, not 40000.0): what a property holds."""
        return int(self.value) if float(self.value).is_integer() else self.value


def parse_digits(text: str) -> float:
    """Digits with separators as a float: the last of ``,`` and ``.`` is the decimal point when both
    appear; a lone separator followed by exactly three digits groups thousands ("40.000", "40,000"),
    else it is the decimal point ("5.5", "3,5"); spaces and apostrophes always group."""
    s = re.sub(r"[\s'\u2019\u00a0\u202f]", "", text)
    if "," in s and "." in s:
        decimal = "," if s.rfind(",") > s.rfind(".") else "."
        s = s.replace("." if decimal == "," else ",", "").replace(decimal, ".")
    elif "," in s or "." in s:
        sep = "," if "," in s else "."
        parts = s.split(sep)
        s = "".join(parts) if len(parts) > 2 or len(parts[-1]) == 3 else ".".join(parts)
    return float(s)


def parse_words(text: str) -> float | None:
    """'forty thousand', 'two', 'one hundred and twenty' as a number; None if it is not one."""
    total, current = 0, 0
    for word in re.split(r"[\s-]+", text.lower()):
        if word == "and":
            continue
        if word in _UNITS:
            current += _UNITS[word]
        elif word in _TENS:
            current += _TENS[word]
        elif word == "hundred":
            current = max(current, 1) * 100
        else:
            return None
    return float(total + current)


def amounts(text: str) -> list[Amount]:
    """Every number mentioned in ``text``, in order, with its currency and multiplier applied."""
    out = []
    for m in AMOUNT.finditer(text):
        if m.group("digits"):
            value = parse_digits(m.group("digits"))
        else:
            words = parse_words(m.group("words"))
            if words is None:
                continue
            value = words
        mult = (m.group("mult") or "").lower()
        if mult:
            value *= MULTIPLIERS[mult]
        sym = m.group("sym") or m.group("sym2")
        code = (m.group("code") or m.group("code2") or "").upper()
        word = (m.group("word") or "").lower()
        currency = SYMBOLS.get(sym) if sym else code or WORD_CURRENCIES.get(word)
        if word.startswith("cent"):
            value, currency = value / 100, "USD"
        out.append(
            Amount(
                round(value, 6),
                currency,
                m.start(),
                m.end(),
                percent=bool(m.group("pct")),
                scaled=bool(mult or currency),
            )
        )
    return out


def parse_amount(text: str) -> float | None:
    """The first amount in ``text`` (``parse_amount("$40k") == 40000.0``), or None."""
    found = amounts(text)
    return found[0].value if found else None
