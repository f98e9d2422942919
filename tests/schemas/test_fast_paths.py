"""The decode path's shortcuts decide exactly what the slow paths they stand in front of decide.

Every event read is unsealed (a sealed payload's JSON, by orjson unless it would read otherwise
than ``json``), checked for hostile values (a quick pass, then reasons) and its vector checked as
float32 components (at once, then one by one): a hostile record must be refused with the same
reasons as before the shortcuts, and a valid one read to the same values.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
import math
import os
import types
from typing import Any

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from engram.schemas import payloads as ev
from engram.schemas import sealing
from engram.schemas import vocabulary as v
from engram.schemas.checks import InvalidEvent, _hostile, finite_floats, hostile_values
from engram.schemas.events import Event, validate
from engram.schemas.payloads import FLOAT32_MAX
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.factories import event, remembered

NUMBERS = (
    st.floats()  # NaN and the infinities included
    | st.integers()  # beyond 64 bits included
    | st.integers(min_value=v.LONG_MIN - 3, max_value=v.LONG_MIN + 3)
    | st.integers(min_value=v.LONG_MAX - 3, max_value=v.LONG_MAX + 3)
    | st.integers(min_value=2**64 - 3, max_value=2**64 + 3)
)
SCALARS = NUMBERS | st.booleans() | st.none() | st.text() | st.sampled_from(list(v.Kind))
VECTORS = st.lists(st.floats(width=32) | st.floats(), min_size=1, max_size=40)
VALUES = st.recursive(
    SCALARS | VECTORS,
    lambda inner: (
        st.lists(inner, max_size=5)
        | st.lists(inner, max_size=5).map(tuple)
        | st.dictionaries(st.text(max_size=5) | st.integers(), inner, max_size=5)
        | st.dictionaries(st.text(max_size=5), inner, max_size=5).map(types.MappingProxyType)
    ),
    max_leaves=30,
)
JSON = st.recursive(
    NUMBERS | st.booleans() | st.none() | st.text() | VECTORS,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=5), inner, max_size=5),
    max_leaves=30,
)


@settings(max_examples=400, deadline=None)
@given(VALUES)
def test_hostile_values_gives_the_reasons_of_the_full_walk(value: Any) -> None:
    assert list(hostile_values(value, "payload")) == list(_hostile(value, "payload"))


@settings(max_examples=400, deadline=None)
@given(VECTORS | st.lists(NUMBERS | st.booleans() | st.text(), min_size=1, max_size=20))
def test_a_vector_decided_at_once_passes_the_item_by_item_check(values: list[Any]) -> None:
    def one_by_one(limit: float) -> bool:
        return all(isinstance(x, int | float) and math.isfinite(x) and abs(x) <= limit for x in values)

    for limit in (FLOAT32_MAX, math.inf):
        if finite_floats(values, limit):
            assert one_by_one(limit)
        elif all(type(x) is float for x in values) and one_by_one(limit) and math.isfinite(sum(values)):
            pytest.fail("a vector of finite floats within the limit was not decided at once")


@settings(max_examples=400, deadline=None)
@given(JSON)
def test_a_sealed_payloads_json_reads_as_json_reads_it(value: Any) -> None:
    plain = json.dumps(value, ensure_ascii=False, allow_nan=True).encode("utf-8", "surrogatepass")
    try:
        expected = json.loads(plain)
    except ValueError:  # bytes json cannot read (a lone surrogate encoded): refused either way
        with pytest.raises(ValueError):
            sealing._parse(plain)
        return
    got = sealing._parse(plain)
    assert repr(got) == repr(expected)  # the same values of the same types (3 is not 3.0)


KEY = os.urandom(32)


def sealed_with(plain: bytes, base: Event) -> Event:
    """``base`` sealed over ``plain`` as given: sealed content only a writer holding the key makes."""
    p = base.payload
    assert isinstance(p, ev.MemoryRemembered)
    nonce = os.urandom(12)
    aad = sealing.associated_data(base.tenant, base.event_id, p.memory_id)
    seal = ev.Sealed(
        key_id=sealing.key_id(p.memory_id),
        nonce=nonce,
        ciphertext=AESGCM(KEY).encrypt(nonce, plain, aad),
        mac=hmac.new(KEY, plain, hashlib.sha256).digest(),
    )
    return dataclasses.replace(base, payload=sealing.wire(dataclasses.replace(p, sealed=seal)))


def opened(e: Event) -> Event:
    p = e.payload
    assert isinstance(p, ev.MemoryRemembered)
    aad = sealing.associated_data(e.tenant, e.event_id, p.memory_id)
    return dataclasses.replace(e, payload=sealing.unseal(p, KEY, aad))


@pytest.mark.parametrize(
    ("personal", "reason"),
    [
        ('"properties": {"n": 18446744073709551616}', "payload.properties.n: integers must fit in 64 bits"),
        ('"properties": {"n": -9223372036854775809}', "payload.properties.n: integers must fit in 64 bits"),
        ('"properties": {"n": NaN}', "payload.properties.n: numbers must be finite"),
        ('"properties": {"n": 1e400}', "payload.properties.n: numbers must be finite"),
        ('"properties": {"\\ud800": 1}', "payload.properties: text must be valid Unicode"),
        ('"properties": {}, "label": "\\udc00"', "payload.label: text must be valid Unicode"),
    ],
)
def test_hostile_sealed_content_is_refused_with_its_reason(personal: str, reason: str) -> None:
    base = event("MemoryRemembered", remembered("m1"))
    parts = {"label": "l", "content": "c", "memory_class": "Memory", "embedding": None}
    text = json.dumps(parts)[:-1] + ", " + personal + "}"  # the later key wins, as in json
    back = opened(sealed_with(text.encode(), base))
    with pytest.raises(InvalidEvent, match=reason.replace(".", r"\.")):
        validate(back)


def test_a_sealed_vector_reads_back_as_float32_components() -> None:
    vector = [0.1, -0.25, 3, 1e-7]
    base = event("MemoryRemembered", remembered("m1", embedding=vector, embedding_model="x"))
    parts = {"label": "l", "content": "c", "memory_class": "Memory", "properties": {}, "embedding": vector}
    back = opened(sealed_with(json.dumps(parts).encode(), base)).payload
    assert isinstance(back, ev.MemoryRemembered)
    assert back.embedding == (0.1, -0.25, 3.0, 1e-7) and all(type(x) is float for x in back.embedding)
