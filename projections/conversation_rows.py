"""The conversation store's sqlite schema, and its rows as immutable values.

``projections.conversations.ConversationStore`` reads and writes them; kept apart so what a
conversation and a stored turn are (and how a row becomes one) is read in one place.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime

from engram.projections.batch import Outcome
from engram.schemas import payloads as ev
from engram.schemas import vocabulary as v
from engram.schemas.events import Actor, Event

SCHEMA = """
CREATE TABLE IF NOT EXISTS conversations (
    conversation_id TEXT PRIMARY KEY,
    owner TEXT,
    turns INTEGER NOT NULL DEFAULT 0,
    last_seq INTEGER NOT NULL DEFAULT 0,
    last_turn_at INTEGER,
    extracted_through INTEGER NOT NULL DEFAULT 0,
    memory_ids TEXT NOT NULL DEFAULT '[]',
    failed_reason TEXT,
    erased INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS turns (
    conversation_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    turn_id TEXT NOT NULL,
    event_id TEXT NOT NULL,
    at INTEGER NOT NULL,
    role TEXT NOT NULL,
    speaker TEXT NOT NULL,
    text TEXT NOT NULL,
    key_id TEXT,
    nonce BLOB,
    ciphertext BLOB,
    mac BLOB,
    actor_id TEXT NOT NULL,
    actor_role TEXT NOT NULL,
    on_behalf_of TEXT,
    source TEXT NOT NULL,
    PRIMARY KEY (conversation_id, seq),
    UNIQUE (conversation_id, turn_id)
);
CREATE TABLE IF NOT EXISTS checkpoint (partition INTEGER PRIMARY KEY, offset INTEGER NOT NULL);
"""


@dataclass(frozen=True)
class ConversationInfo:
    """One conversation as the store holds it. ``last_seq`` is the seq of its last turn (``turns``
    counts them: the two are equal until an erasure); ``extracted_through`` the last seq a
    ``TurnsExtracted`` covers (0: none)."""

    tenant: str
    conversation_id: str
    owner: str | None
    turns: int
    last_seq: int
    extracted_through: int
    last_turn_at: datetime | None
    erased: bool
    memory_ids: tuple[str, ...] = ()  # every memory its extractions made, in order
    failed_reason: str | None = None  # the last extraction's, if it was given up on


@dataclass(frozen=True)
class StoredTurn:
    """A turn as the store holds it: the event it came in, in wire form (sealed), and its seq."""

    seq: int
    event: Event

    @property
    def turn_id(self) -> str:
        assert isinstance(self.event.payload, ev.ConversationTurn)
        return self.event.payload.turn_id

    @property
    def event_id(self) -> str:
        return self.event.event_id


@dataclass(frozen=True)
class Applied:
    """What applying one record changed: ``turn`` (it was a turn), ``new`` (a turn stored, not
    skipped as a repeat), the conversation's turn count after it, and the outcome (skipped at or
    below the checkpoint; rejected with the reason: dead-lettered by the caller)."""

    conversation_id: str | None
    turns: int
    turn: bool
    new: bool
    outcome: Outcome
    erased_keys: int = 0


INFO_COLUMNS = (
    "conversation_id, owner, turns, last_seq, extracted_through, last_turn_at, erased, memory_ids,"
    " failed_reason"
)


def millis(t: datetime) -> int:
    return round(t.timestamp() * 1000)


def time_of(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def info_row(tenant: str, row: tuple) -> ConversationInfo:  # type: ignore[type-arg]
    cid, owner, turns, last_seq, through, last_at, erased, memory_ids, failed = row
    return ConversationInfo(
        tenant=tenant,
        conversation_id=cid,
        owner=owner,
        turns=turns,
        last_seq=last_seq,
        extracted_through=through,
        last_turn_at=time_of(last_at) if last_at is not None else None,
        erased=bool(erased),
        memory_ids=tuple(json.loads(memory_ids)),
        failed_reason=failed,
    )


def stored_row(tenant: str, cid: str, row: tuple) -> StoredTurn:  # type: ignore[type-arg]
    seq, turn_id, event_id, at, role, speaker, text, key_id, nonce, ciphertext, mac = row[:11]
    actor_id, actor_role, on_behalf_of, source = row[11:]
    sealed = (
        ev.Sealed(key_id=key_id, nonce=nonce, ciphertext=ciphertext, mac=mac) if key_id is not None else None
    )
    payload = ev.ConversationTurn(
        conversation_id=cid,
        turn_id=turn_id,
        speaker=speaker,
        role=v.TurnRole(role),
        text=text,
        sealed=sealed,
    )
    event = Event(
        event_id=event_id,
        tenant=tenant,
        occurred_at=time_of(at),
        actor=Actor(actor_id, actor_role, on_behalf_of),
        source=source,
        payload=payload,
        occurred_at_given=True,
    )
    return StoredTurn(seq, event)
