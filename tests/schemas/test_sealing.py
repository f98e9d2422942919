"""Sealing on real AES-GCM: the wire form holds no plaintext, opens back exactly with the key, and
opens to the erased form without it; digests do not depend on the key or the nonce."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import pytest
from engram.schemas import payloads as ev
from engram.schemas import sealing
from engram.schemas.checks import InvalidEvent
from engram.schemas.events import Event, content_digest, validate
from engram.streams import codec
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.factories import event, remembered

KEY = os.urandom(32)
TEXT = st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=200).filter(str.strip)


def sealed(ev_: Event, key: bytes = KEY) -> Event:
    p = ev_.payload
    assert isinstance(p, ev.MemoryEvent)
    aad = sealing.associated_data(ev_.tenant, ev_.event_id, p.memory_id)
    return dataclasses.replace(ev_, payload=sealing.seal(p, key, aad))


def opened(ev_: Event, key: bytes | None) -> Event:
    p = ev_.payload
    assert isinstance(p, ev.MemoryEvent)
    aad = sealing.associated_data(ev_.tenant, ev_.event_id, p.memory_id)
    return dataclasses.replace(ev_, payload=sealing.unseal(p, key, aad))


def a_memory(label: str, content: str, note: str) -> Event:
    fields: dict[str, Any] = {"label": label, "content": content, "properties": {"note": note, "n": 3}}
    return event("MemoryRemembered", remembered("m1", embedding=[0.25, -1.5], embedding_model="x", **fields))


@settings(max_examples=60, deadline=None)
@given(TEXT, TEXT, TEXT)
def test_a_sealed_memory_round_trips_through_the_log_and_its_bytes_hold_no_plaintext(
    label: str, content: str, note: str
) -> None:
    plain = a_memory(label, content, note)
    data = codec.encode(sealed(plain))
    public = codec.encode(sealed(a_memory("a", "a", "a")))  # the envelope's own words: "Memory", "acme"
    for secret in {label, content, note}:
        # a short text may occur in ciphertext by chance, and "Memo" is in any memory's envelope
        if len(secret.encode()) >= 4 and secret.encode() not in public:
            assert secret.encode() not in data
    back = opened(codec.decode(data), KEY)
    assert dataclasses.replace(back.payload, sealed=None) == dataclasses.replace(plain.payload, sealed=None)


def test_without_its_key_a_memory_opens_erased_and_still_validates() -> None:
    back = opened(codec.decode(codec.encode(sealed(a_memory("secret label", "secret content", "n")))), None)
    p = back.payload
    assert isinstance(p, ev.MemoryRemembered)
    assert (p.label, p.content, dict(p.properties), p.embedding) == (sealing.ERASED, sealing.ERASED, {}, None)
    assert p.memory_class == "Memory"
    validate(back)
    revision = event("MemoryRevised", {"memory_id": "m1", "changes": {"label": "x", "importance": 4}})
    erased = opened(codec.decode(codec.encode(sealed(revision))), None).payload
    assert isinstance(erased, ev.MemoryRevised)
    assert dict(erased.changes) == {"importance": 4} and dict(erased.property_changes) == {}
    validate(dataclasses.replace(revision, payload=erased))  # a sealed revision is a change


def test_a_tampered_or_moved_ciphertext_is_refused() -> None:
    one = sealed(a_memory("l", "c", "n"))
    p = one.payload
    assert isinstance(p, ev.MemoryRemembered) and p.sealed is not None
    flipped = bytes([p.sealed.ciphertext[0] ^ 1]) + p.sealed.ciphertext[1:]
    tampered = dataclasses.replace(p, sealed=dataclasses.replace(p.sealed, ciphertext=flipped))
    with pytest.raises(InvalidEvent, match="does not authenticate"):
        opened(dataclasses.replace(one, payload=tampered), KEY)
    with pytest.raises(InvalidEvent, match="does not authenticate"):
        opened(dataclasses.replace(one, tenant="other"), KEY)
    with pytest.raises(InvalidEvent, match="does not authenticate"):
        opened(one, os.urandom(32))


def test_the_digest_is_the_same_with_or_without_the_key_and_whatever_the_nonce() -> None:
    plain = a_memory("l", "c", "n")
    first, second = codec.decode(codec.encode(sealed(plain))), codec.decode(codec.encode(sealed(plain)))
    assert first.payload != second.payload  # new nonces
    digests = {
        content_digest(x) for x in (first, second, opened(first, KEY), opened(first, None), sealed(plain))
    }
    assert len(digests) == 1
    other = sealed(a_memory("l", "other content", "n"))
    assert content_digest(other) not in digests
