"""Crypto-shredding: a memory event's personal parts travel encrypted, under a key off the log.

A conversation turn's speaker and text are sealed the same way, each turn under its own key
(:func:`turn_key_id`), so erasing a conversation or a memory extracted from some of its turns
destroys exactly those turns' words.

The log is kept forever, so forgetting cannot delete what it holds; it can make it unreadable.
Each memory has its own 256-bit data key (``key_id``) in a key store beside the log. A memory
event is *sealed* at the edge: its label, content, class, class properties and embedding are encrypted
with AES-GCM (bound to the tenant, event and memory ids) into :class:`~schemas.payloads.Sealed`,
and the wire form carries placeholders in their place. The projector *unseals* with the key;
once the memory is forgotten the key is destroyed, and the same event unseals to the erased form
(:data:`ERASED`, no properties, no vector, the plain ``Memory`` class), which is what forgetting
leaves in the live graph too, so a replay after erasure equals the live graph.

In memory an event keeps both its plaintext and its seal; only :func:`wire` drops the plaintext,
and ``Event.to_avro`` (so the codec and the content digest) always applies it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import struct
import types
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, TypeVar

import orjson
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from engram.schemas.checks import InvalidEvent
from engram.schemas.payloads import ConversationTurn, MemoryRemembered, MemoryRevised, Payload, Sealed

ERASED = "(erased)"
SEALED_CHANGES = ("label", "content")  # the revisable shared fields that are personal
SealablePayload = MemoryRemembered | MemoryRevised | ConversationTurn
P = TypeVar("P", bound=Payload)


def key_id(memory_id: str) -> str:
    """The data key of a memory: every event about it is sealed with the same one."""
    return f"memory/{memory_id}"


def turn_key_id(conversation_id: str, turn_id: str) -> str:
    """The data key of one conversation turn: erasing the conversation (or a memory extracted from
    the turn) destroys it, and only it."""
    return f"turn/{conversation_id}/{turn_id}"


def key_of(payload: SealablePayload) -> str:
    """The key a sealable payload is sealed under."""
    if isinstance(payload, ConversationTurn):
        return turn_key_id(payload.conversation_id, payload.turn_id)
    return key_id(payload.memory_id)


def sealable(payload: Payload) -> bool:
    return isinstance(payload, SealablePayload)


def associated_data(tenant: str, event_id: str, *names: str) -> bytes:
    """What a ciphertext is bound to: it cannot be moved to another event, memory (or conversation
    and turn) or tenant."""
    return "\x00".join((tenant, event_id, *names)).encode()


def aad_of(tenant: str, event_id: str, payload: SealablePayload) -> bytes:
    """``associated_data`` for a sealable payload: a memory's id, or a turn's conversation and id."""
    if isinstance(payload, ConversationTurn):
        return associated_data(tenant, event_id, payload.conversation_id, payload.turn_id)
    return associated_data(tenant, event_id, payload.memory_id)


def _personal(p: SealablePayload) -> dict[str, Any]:
    if isinstance(p, ConversationTurn):
        return {"speaker": p.speaker, "text": p.text}
    if isinstance(p, MemoryRemembered):
        return {
            "label": p.label,
            "content": p.content,
            "memory_class": p.memory_class,
            "properties": dict(p.properties),
            "embedding": list(float32s(p.embedding)) if p.embedding is not None else None,
        }
    return {
        "changes": {k: p.changes[k] for k in SEALED_CHANGES if k in p.changes},
        "property_changes": dict(p.property_changes),
    }


def float32s(xs: Sequence[float]) -> tuple[float, ...]:
    """Components as an Avro float holds them, as an unsealed event's would be (the whole vector
    in one pack: a component at a time cost ~0.2 ms per 384-d vector, twice per write)."""
    return struct.unpack(f"<{len(xs)}f", struct.pack(f"<{len(xs)}f", *xs))


def _canonical(value: dict[str, Any]) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def seal(payload: P, data_key: bytes, aad: bytes) -> P:
    """``payload`` with its personal parts also encrypted (a non-memory payload as it is)."""
    if not isinstance(payload, SealablePayload):
        return payload
    plain = _canonical(_personal(payload))
    nonce = os.urandom(12)
    sealed = Sealed(
        key_id=key_of(payload),
        nonce=nonce,
        ciphertext=AESGCM(data_key).encrypt(nonce, plain, aad),
        mac=hmac.new(data_key, plain, hashlib.sha256).digest(),
    )
    return replace(payload, sealed=sealed)  # type: ignore[return-value]


def wire(payload: P) -> P:
    """What the log holds of ``payload``: a sealed one's personal parts as placeholders."""
    if not isinstance(payload, SealablePayload) or payload.sealed is None:
        return payload
    if isinstance(payload, ConversationTurn):
        return replace(payload, speaker="", text="")  # type: ignore[return-value]
    if isinstance(payload, MemoryRemembered):
        empty = types.MappingProxyType({})
        return replace(  # type: ignore[return-value]
            payload, label="", content="", memory_class="Memory", properties=empty, embedding=None
        )
    kept = {k: val for k, val in payload.changes.items() if k not in SEALED_CHANGES}
    return replace(  # type: ignore[return-value]
        payload, changes=types.MappingProxyType(kept), property_changes=types.MappingProxyType({})
    )


def _parse(plain: bytes) -> Any:
    """``json.loads(plain)``, by orjson where it gives the same values (a vector's hundreds of floats
    parse several times faster). What orjson refuses (lone surrogates, NaN, a number beyond a
    double) and what it would read otherwise (an integer beyond 64 bits, as a float) ``json``
    reads as it always did, so the checks after it see the same values and give the same reasons."""
    try:
        parts = orjson.loads(plain)
    except orjson.JSONDecodeError:
        return json.loads(plain)
    return json.loads(plain) if _beyond_long(parts) else parts


_LONG_LIMIT = 2.0**63


def _beyond_long(value: Any) -> bool:
    """Whether ``value`` holds a float of magnitude 2**63 or more: the form orjson gives an integer
    too large for 64 bits (a float that large merely takes the slower parse)."""
    t = type(value)
    if t is float:
        return not abs(value) < _LONG_LIMIT
    if t is dict:
        return any(_beyond_long(item) for item in value.values())
    if t is list:
        if value and set(map(type, value)) == {float}:  # a vector, decided in C
            return not max(map(abs, value)) < _LONG_LIMIT
        return any(_beyond_long(item) for item in value)
    return False


def unseal(payload: P, data_key: bytes | None, aad: bytes) -> P:
    """``payload`` with its personal parts decrypted, or erased when its key is gone (None).

    Raises InvalidEvent when the ciphertext does not authenticate under the key (tampered, or
    moved from another event): that is a bad record, not an erased one.
    """
    if not isinstance(payload, SealablePayload) or payload.sealed is None:
        return payload
    if data_key is None:
        bare = wire(payload)
        if isinstance(bare, ConversationTurn):
            return replace(bare, speaker=ERASED, text=ERASED)  # type: ignore[return-value]
        if isinstance(bare, MemoryRemembered):
            return replace(bare, label=ERASED, content=ERASED)  # type: ignore[return-value]
        return bare
    try:
        plain = AESGCM(data_key).decrypt(payload.sealed.nonce, payload.sealed.ciphertext, aad)
    except (InvalidTag, ValueError) as exc:
        raise InvalidEvent("sealed content does not authenticate with its key") from exc
    if not hmac.compare_digest(hmac.new(data_key, plain, hashlib.sha256).digest(), payload.sealed.mac):
        raise InvalidEvent("sealed content does not match its mac")
    try:
        parts = _parse(plain)
        # every field ``wire`` blanks is set here (a revision's kept changes aside), so the
        # payload is rebuilt once, not blanked and then filled
        if isinstance(payload, ConversationTurn):
            speaker, text = parts["speaker"], parts["text"]
            if not isinstance(speaker, str) or not isinstance(text, str):
                raise TypeError("a turn's speaker and text are strings")
            return replace(payload, speaker=speaker, text=text)  # type: ignore[return-value]
        if isinstance(payload, MemoryRemembered):
            embedding = parts["embedding"]
            return replace(  # type: ignore[return-value]
                payload,
                label=parts["label"],
                content=parts["content"],
                memory_class=parts["memory_class"],
                properties=types.MappingProxyType(dict(parts["properties"])),
                embedding=tuple(map(float, embedding)) if embedding is not None else None,
            )
        kept = {k: val for k, val in payload.changes.items() if k not in SEALED_CHANGES}
        return replace(  # type: ignore[return-value]
            payload,
            changes=types.MappingProxyType({**kept, **parts["changes"]}),
            property_changes=types.MappingProxyType(dict(parts["property_changes"])),
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise InvalidEvent(f"sealed content is not what a sealed memory event holds: {exc}") from exc
