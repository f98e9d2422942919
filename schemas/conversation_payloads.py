"""The payloads of capture (DESIGN §7): conversation turns, the extraction workflow's progress and a
conversation's erasure. They travel on ``engram.conversations``, not ``engram.events``
(:func:`~engram.schemas.conversation_payloads.on_conversations_topic` is the one test of which
topic an event type belongs on). ``schemas.payloads`` imports and re-exports them.

A turn's event id follows from its tenant, conversation and turn id (:func:`turn_event_id`), so
sending a turn again is the same event; a turn sent without an id gets one from what it says
(:func:`derive_turn_id`), so a re-sent history is idempotent too.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from engram.schemas import vocabulary as v
from engram.schemas.checks import Problems
from engram.schemas.payloads import EVENT_ID_NAMESPACE, Sealed
from engram.schemas.records import Payload, _list

MEMORY_IDS_MAX = 1000  # memories one extraction may name in its progress record


def turn_event_id(tenant: str, conversation_id: str, turn_id: str) -> str:
    """The event id of a turn: one turn, one event, however often it is sent.

    >>> turn_event_id("acme", "c1", "t1") == turn_event_id("acme", "c1", "t1")
    True
    """
    return str(uuid.uuid5(EVENT_ID_NAMESPACE, f"turn:{tenant}\x00{conversation_id}\x00{turn_id}"))


def derive_turn_id(speaker: str, role: str, at: datetime | str, text: str) -> str:
    """A turn id from what the turn says and when (for a writer that names none): the same turn
    sent twice gets the same id, so it is stored once.

    >>> derive_turn_id("sam", "user", "2026-12-01T10:00:00Z", "hi")[:2]
    't-'
    """
    when = at.isoformat() if isinstance(at, datetime) else str(at)
    digest = hashlib.sha256("\x00".join((speaker, role, when, text)).encode("utf-8", "surrogatepass"))
    return "t-" + digest.hexdigest()[:32]


@dataclass(frozen=True, kw_only=True)
class ConversationEvent(Payload):
    """An event about one conversation: it belongs on the conversations topic."""

    conversation_id: str

    @classmethod
    def check(cls, p: Mapping[str, Any], c: Problems) -> None:
        c.id(p.get("conversation_id"), "conversation_id")


@dataclass(frozen=True, kw_only=True)
class ConversationTurn(ConversationEvent):
    """One thing said; ``speaker`` and ``text`` are sealed on the log (``schemas.sealing``)."""

    turn_id: str
    speaker: str
    role: v.TurnRole
    text: str
    sealed: Sealed | None = None

    @classmethod
    def check(cls, p: Mapping[str, Any], c: Problems) -> None:
        super().check(p, c)
        c.id(p.get("turn_id"), "turn_id")
        c.one_of(p.get("role"), v.TurnRole, "role")
        if p.get("sealed") is None:  # a sealed turn's clear fields are placeholders
            c.text(p.get("speaker"), "speaker", v.SPEAKER_MAX)
            c.text(p.get("text"), "text", v.TURN_TEXT_MAX)


@dataclass(frozen=True, kw_only=True)
class TurnsExtracted(ConversationEvent):
    """The extraction workflow's progress: turns 1..``through_seq`` are done (or given up on)."""

    through_seq: int
    through_turn_id: str
    memory_ids: tuple[str, ...] = ()
    extractor: str
    failed_reason: str | None = None

    @classmethod
    def check(cls, p: Mapping[str, Any], c: Problems) -> None:
        super().check(p, c)
        seq = p.get("through_seq")
        c.require(
            isinstance(seq, int) and not isinstance(seq, bool) and 1 <= seq <= v.LONG_MAX,
            "through_seq must be a positive integer",
        )
        c.id(p.get("through_turn_id"), "through_turn_id")
        ids = _list(c, p.get("memory_ids"), "memory_ids")
        c.require(len(ids) <= MEMORY_IDS_MAX, f"memory_ids must name at most {MEMORY_IDS_MAX} memories")
        for memory_id in ids[:MEMORY_IDS_MAX]:
            c.id(memory_id, "memory_ids")
        c.text(p.get("extractor"), "extractor", 128)
        if p.get("failed_reason") is not None:
            c.text(p.get("failed_reason"), "failed_reason", 4096)


@dataclass(frozen=True, kw_only=True)
class ConversationErased(ConversationEvent):
    """Every turn key of the conversation destroyed; the store forgets it."""

    reason: str | None = None

    @classmethod
    def check(cls, p: Mapping[str, Any], c: Problems) -> None:
        super().check(p, c)
        if p.get("reason") is not None:
            c.text(p.get("reason"), "reason", 1024)


def on_conversations_topic(p: Payload) -> bool:
    """Whether an event of this payload belongs on ``engram.conversations`` (else ``engram.events``)."""
    return isinstance(p, ConversationEvent)


def natural_event_id(tenant: Any, p: Mapping[str, Any], event_type: str) -> str | None:
    """The event id an event of ``event_type`` has by its nature, if any (a turn's; see above)."""
    if event_type != "ConversationTurn":
        return None
    cid, tid = p.get("conversation_id"), p.get("turn_id")
    if isinstance(tenant, str) and isinstance(cid, str) and isinstance(tid, str):
        return turn_event_id(tenant, cid, tid)
    return None
