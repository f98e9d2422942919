"""The conversation store: what ``engram.conversations`` says, per tenant, for capture and reads.

A projection like the graph: a follower that applies each record of the conversations topic once
(its per-partition checkpoint moves in the same sqlite transaction as the change, so a redelivered
record is skipped) and can be rebuilt from the log. It holds each turn in its *wire* form (speaker
and text only as the sealed ciphertext; ``streams.conversations.read_turns`` opens them with the
keys), numbered 1.. per conversation in log order (a turn id seen before is skipped: one turn, one
seq), the conversation's owner (the acting user of its first turn), when its last turn was said,
how far extraction got (``TurnsExtracted``) and the memories it made, and whether it was erased.

Erasing a conversation destroys every turn key it holds (when the store is given the key store),
then deletes its turns; the conversation stays as a tombstone (``erased``), so a stray turn that
arrives after is refused, and its key destroyed too. One sqlite file (WAL) per tenant under
``root/<tenant>/``, stdlib only.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from engram.projections.batch import Outcome, Status
from engram.projections.conversation_rows import (
    INFO_COLUMNS,
    SCHEMA,
    Applied,
    ConversationInfo,
    StoredTurn,
    info_row,
    millis,
    stored_row,
)
from engram.projections.seams import Keys
from engram.schemas import payloads as ev
from engram.schemas import sealing
from engram.schemas import vocabulary as v
from engram.schemas.events import Event, Position

FILE = "conversations.sqlite"
PRIVILEGED = (v.Role.OPERATOR, v.Role.PIPELINE)  # may add turns to anyone's conversation
PROGRESS_SOURCES = (v.Source.EXTRACTION, v.Source.SYSTEM)


class ConversationStore:
    """Every tenant's conversations, one sqlite file each under ``root/<tenant>/``. ``keys`` (the
    key store) is what an erasure destroys turn keys in; without it an erasure only deletes rows
    (a replay's store: the live one destroyed them)."""

    def __init__(self, root: Path, keys: Keys | None = None) -> None:
        self.root = root
        self.keys = keys
        self._dbs: dict[str, sqlite3.Connection] = {}
        self._lock = threading.RLock()

    # -- storage -------------------------------------------------------------------------------
    def _db(self, tenant: str, *, create: bool) -> sqlite3.Connection | None:
        with self._lock:
            db = self._dbs.get(tenant)
            if db is not None:
                return db
            if not v.full_match(v.TENANT_RE, tenant):
                raise ValueError(f"invalid tenant id {tenant!r}")
            path = self.root / tenant / FILE
            if not path.exists() and not create:
                return None
            path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.executescript(SCHEMA)
            self._dbs[tenant] = db
            return db

    @contextmanager
    def _tx(self, db: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
        with self._lock:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    def tenants(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if (p / FILE).exists())

    def close(self) -> None:
        with self._lock:
            for db in self._dbs.values():
                db.close()
            self._dbs.clear()

    # -- the follower --------------------------------------------------------------------------
    def checkpoint(self, tenant: str, partition: int) -> int:
        """The offset last applied on ``partition`` for ``tenant`` (-1: none)."""
        db = self._db(tenant, create=False)
        if db is None:
            return -1
        row = db.execute("SELECT offset FROM checkpoint WHERE partition = ?", (partition,)).fetchone()
        return row[0] if row else -1

    def advance(self, tenant: str, position: Position) -> None:
        """Move the checkpoint past a record that was refused before it could apply (undecodable,
        not allowed): it is dead-lettered once, as the projector's are."""
        if self.checkpoint(tenant, position.partition) >= position.offset:
            return
        db = self._db(tenant, create=True)
        assert db is not None
        with self._tx(db):
            self._move(db, position)

    def _move(self, db: sqlite3.Connection, position: Position) -> None:
        db.execute(
            "INSERT INTO checkpoint VALUES (?, ?) ON CONFLICT(partition) DO UPDATE SET offset = ?",
            (position.partition, position.offset, position.offset),
        )

    def apply(self, tenant: str, event: Event, position: Position) -> Applied:
        """Apply one event of the conversations topic (``event`` opened or in wire form: the store
        keeps only the wire form). Idempotent: a record at or below the checkpoint is skipped."""
        p = event.payload
        cid = p.conversation_id if isinstance(p, ev.ConversationEvent) else None
        if self.checkpoint(tenant, position.partition) >= position.offset:
            return Applied(cid, self._count(tenant, cid), isinstance(p, ev.ConversationTurn), False, _SKIPPED)
        db = self._db(tenant, create=True)
        assert db is not None
        with self._tx(db):
            applied = self._apply(db, tenant, event, cid)
            self._move(db, position)
        return applied

    def _apply(self, db: sqlite3.Connection, tenant: str, event: Event, cid: str | None) -> Applied:
        p = event.payload
        if cid is None:
            reason = f"{event.type} belongs on engram.events, not the conversations topic"
            return Applied(None, 0, False, False, Outcome(Status.REJECTED, reason))
        row = db.execute(
            "SELECT owner, turns, last_seq, erased FROM conversations WHERE conversation_id = ?", (cid,)
        ).fetchone()
        owner, count, last_seq, erased = row if row else (None, 0, 0, 0)
        if isinstance(p, ev.ConversationTurn):
            return self._turn(db, tenant, event, p, row is not None, owner, count, last_seq, bool(erased))
        if row is None:
            return Applied(cid, 0, False, False, Outcome(Status.REJECTED, f"unknown conversation {cid}"))
        if isinstance(p, ev.TurnsExtracted):
            if event.source not in PROGRESS_SOURCES:
                reason = f"TurnsExtracted comes from extraction or system, not {event.source}"
                return Applied(cid, count, False, False, Outcome(Status.REJECTED, reason))
            ids = json.loads(
                db.execute(
                    "SELECT memory_ids FROM conversations WHERE conversation_id = ?", (cid,)
                ).fetchone()[0]
            )
            ids.extend(m for m in p.memory_ids if m not in ids)
            db.execute(
                "UPDATE conversations SET extracted_through = MAX(extracted_through, ?), memory_ids = ?,"
                " failed_reason = ? WHERE conversation_id = ?",
                (min(p.through_seq, v.LONG_MAX), json.dumps(ids), p.failed_reason, cid),
            )
            return Applied(cid, count, False, True, _APPLIED)
        assert isinstance(p, ev.ConversationErased)
        actor = event.actor
        if actor.role != v.Role.OPERATOR and actor.acting_user != owner:
            reason = f"conversation {cid} is erased by its owner or an operator"
            return Applied(cid, count, False, False, Outcome(Status.REJECTED, reason))
        destroyed = 0
        for (turn_id,) in db.execute(
            "SELECT turn_id FROM turns WHERE conversation_id = ?", (cid,)
        ).fetchall():
            destroyed += self._destroy(tenant, cid, turn_id)  # before the commit: redone, never skipped
        db.execute("DELETE FROM turns WHERE conversation_id = ?", (cid,))
        db.execute(
            "UPDATE conversations SET erased = 1, turns = 0, memory_ids = '[]', failed_reason = NULL"
            " WHERE conversation_id = ?",
            (cid,),
        )
        return Applied(cid, 0, False, True, _APPLIED, erased_keys=destroyed)

    def _turn(
        self,
        db: sqlite3.Connection,
        tenant: str,
        event: Event,
        p: ev.ConversationTurn,
        exists: bool,
        owner: str | None,
        count: int,
        last_seq: int,
        erased: bool,
    ) -> Applied:
        cid, actor = p.conversation_id, event.actor
        if erased:
            self._destroy(tenant, cid, p.turn_id)  # its words were meant to be gone: they are
            reason = f"conversation {cid} was erased; its turns are not kept"
            return Applied(cid, 0, True, False, Outcome(Status.REJECTED, reason))
        if exists and actor.role not in PRIVILEGED and actor.acting_user != owner:
            reason = f"conversation {cid} is {owner}'s: only they (or an agent for them) add turns to it"
            return Applied(cid, count, True, False, Outcome(Status.REJECTED, reason))
        seen = db.execute(
            "SELECT 1 FROM turns WHERE conversation_id = ? AND turn_id = ?", (cid, p.turn_id)
        ).fetchone()
        if seen:  # the same turn again (a retry, a re-import): one turn, one seq
            return Applied(cid, count, True, False, _APPLIED)
        bare = sealing.wire(p)
        sealed = bare.sealed
        seq = last_seq + 1
        at = millis(event.occurred_at)
        db.execute(
            "INSERT INTO turns VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                cid,
                seq,
                p.turn_id,
                event.event_id,
                at,
                p.role.value,
                bare.speaker,
                bare.text,
                sealed.key_id if sealed else None,
                sealed.nonce if sealed else None,
                sealed.ciphertext if sealed else None,
                sealed.mac if sealed else None,
                actor.id,
                actor.role,
                actor.on_behalf_of,
                event.source,
            ),
        )
        if exists:
            db.execute(
                "UPDATE conversations SET turns = turns + 1, last_seq = ?,"
                " last_turn_at = MAX(last_turn_at, ?)"
                " WHERE conversation_id = ?",
                (seq, at, cid),
            )
        else:
            db.execute(
                "INSERT INTO conversations (conversation_id, owner, turns, last_seq, last_turn_at)"
                " VALUES (?, ?, 1, ?, ?)",
                (cid, actor.acting_user, seq, at),
            )
        return Applied(cid, count + 1, True, True, _APPLIED)

    def _destroy(self, tenant: str, cid: str, turn_id: str) -> int:
        if self.keys is None:
            return 0
        return int(self.keys.destroy(tenant, sealing.turn_key_id(cid, turn_id)))

    def _count(self, tenant: str, cid: str | None) -> int:
        info = self.info(tenant, cid) if cid is not None else None
        return info.turns if info is not None else 0

    # -- reads ---------------------------------------------------------------------------------
    def info(self, tenant: str, conversation_id: str) -> ConversationInfo | None:
        """The conversation, erased ones included (``erased``); None if the store never saw it."""
        db = self._db(tenant, create=False)
        if db is None:
            return None
        row = db.execute(
            f"SELECT {INFO_COLUMNS} FROM conversations WHERE conversation_id = ?", (conversation_id,)
        ).fetchone()
        return info_row(tenant, row) if row else None

    def turns(self, tenant: str, conversation_id: str, after_seq: int = 0) -> list[StoredTurn]:
        """The conversation's turns after ``after_seq``, in seq order, in wire form."""
        db = self._db(tenant, create=False)
        if db is None:
            return []
        rows = db.execute(
            "SELECT seq, turn_id, event_id, at, role, speaker, text, key_id, nonce, ciphertext, mac,"
            " actor_id, actor_role, on_behalf_of, source FROM turns WHERE conversation_id = ? AND seq > ?"
            " ORDER BY seq",
            (conversation_id, after_seq),
        ).fetchall()
        return [stored_row(tenant, conversation_id, row) for row in rows]

    def pending(self) -> list[ConversationInfo]:
        """Every conversation (of every tenant) with turns after ``extracted_through``, not erased."""
        out: list[ConversationInfo] = []
        for tenant in self.tenants():
            db = self._db(tenant, create=False)
            if db is None:
                continue
            rows = db.execute(
                f"SELECT {INFO_COLUMNS} FROM conversations WHERE erased = 0 AND last_seq > extracted_through"
                " ORDER BY last_turn_at"
            ).fetchall()
            out.extend(info_row(tenant, row) for row in rows)
        return out


_APPLIED = Outcome(Status.APPLIED)
_SKIPPED = Outcome(Status.SKIPPED)
