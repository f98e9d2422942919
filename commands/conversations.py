"""Conversation turns in, read back, erased: the commands behind ``/conversations`` and the import.

A turn is checked and sealed by the pipeline like any write and appended to the conversations
topic (``streams.topics.topic_for``); its event id follows from the tenant, conversation and turn
id, so sending it again is the same event. Before appending, a turn id the store already holds is
compared with what is sent: the same words again are answered as stored (nothing appended), other
words are a 409. Who may see a conversation: its owner (the acting user of its first turn; an
agent acting for them), operators and auditors; to anyone else it is "not found", as one that
does not exist. An erasure is a ``ConversationErased``: the store applying it destroys every turn
key, so the log keeps only ciphertext of what was said.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from aiokafka.errors import KafkaError
from engram.commands.answers import Conflicting, Invalid, LogUnavailable, NotFound, NotInTime, TooLarge
from engram.projections.batch import Status
from engram.projections.conversation_rows import ConversationInfo
from engram.projections.conversations import ConversationStore
from engram.projections.progress import Progress
from engram.projections.seams import Keys
from engram.projections.visibility import Principal
from engram.schemas import payloads as ev
from engram.schemas import vocabulary as v
from engram.schemas.checks import InvalidEvent
from engram.schemas.conversation_payloads import derive_turn_id
from engram.schemas.events import Actor, Event, Position
from engram.streams.conversations import read_turns
from engram.streams.extraction.extractor import Turn
from engram.streams.pipeline import EventTooLarge, Framed, Pipeline, open_event
from engram.streams.producer import EventProducer

log = logging.getLogger(__name__)

TURNS_PER_REQUEST = 1000


@dataclass(frozen=True)
class TurnAccepted:
    turn_id: str
    event_id: str
    stored: bool  # already in the store (a re-send), or applied while the caller waited


@dataclass(frozen=True)
class ConversationRead:
    info: ConversationInfo
    turns: list[Turn]


@dataclass
class ConversationCommands:
    store: ConversationStore
    keys: Keys | None
    producer: EventProducer
    progress: Progress  # records of the conversations topic the store has handled
    wait_timeout_s: float

    def visible(self, tenant: str, conversation_id: str, who: Principal) -> ConversationInfo:
        """The conversation if ``who`` may see it; else (or erased, or unknown) one "not found"."""
        info = self.store.info(tenant, conversation_id)
        if info is None or info.erased or not may_see(who, info):
            raise NotFound(f"conversation {conversation_id} not found", ("path", "conversation_id"))
        return info

    def read(self, tenant: str, conversation_id: str, who: Principal) -> ConversationRead:
        info = self.visible(tenant, conversation_id, who)
        return ConversationRead(info, read_turns(self.store, self.keys, tenant, conversation_id))

    async def add_turns(
        self,
        tenant: str,
        conversation_id: str,
        turns: Sequence[Mapping[str, Any]],
        *,
        actor: Actor,
        source: str,
        who: Principal | None = None,
        wait: bool = False,
    ) -> list[TurnAccepted]:
        """Append ``turns`` (each: speaker, role, text, time, optional turn_id) in order; with
        ``wait``, answer once the store holds every one."""
        if not 0 < len(turns) <= TURNS_PER_REQUEST:
            raise Invalid(f"send 1 to {TURNS_PER_REQUEST} turns at once, not {len(turns)}", ("body", "turns"))
        info = self.store.info(tenant, conversation_id)
        if info is not None and who is not None and not may_see(who, info):
            raise NotFound(f"conversation {conversation_id} not found", ("path", "conversation_id"))
        if info is not None and info.erased:
            raise Conflicting(f"conversation {conversation_id} was erased; start another")
        pipeline = Pipeline(keys=self.keys)
        stored = {s.turn_id: s for s in self.store.turns(tenant, conversation_id)} if info else {}
        framed: list[tuple[int, Framed]] = []
        answers: list[TurnAccepted | None] = []
        seen: dict[str, Event] = {}
        for i, turn in enumerate(turns):
            event = self._frame(pipeline, tenant, conversation_id, turn, actor, source, i)
            p = event.event.payload
            assert isinstance(p, ev.ConversationTurn)
            earlier = seen.get(p.turn_id) or (
                open_event(stored[p.turn_id].event, self.keys) if p.turn_id in stored else None
            )
            if earlier is not None:
                if not same_turn(earlier, event.event):
                    raise Conflicting(
                        f"turn {p.turn_id} of conversation {conversation_id} was sent before with other"
                        " words, speaker, role or time; a turn id names one turn",
                        ("body", "turns", i, "turn_id"),
                    )
                answers.append(TurnAccepted(p.turn_id, event.event.event_id, stored=p.turn_id in stored))
                continue
            seen[p.turn_id] = event.event
            answers.append(None)
            framed.append((i, event))
        positions = await self._append([f for _, f in framed])
        for (i, f), _pos in zip(framed, positions, strict=True):
            p = f.event.payload
            assert isinstance(p, ev.ConversationTurn)
            answers[i] = TurnAccepted(p.turn_id, f.event.event_id, stored=False)
        if wait and positions:
            await self._wait(positions)
            answers = [TurnAccepted(a.turn_id, a.event_id, True) for a in answers if a is not None]
        return [a for a in answers if a is not None]

    async def erase(
        self,
        tenant: str,
        conversation_id: str,
        who: Principal,
        *,
        actor: Actor,
        reason: str | None = None,
        wait: bool = False,
    ) -> str:
        """Append ``ConversationErased`` (its owner, an agent for them, or an operator); its event id."""
        info = self.visible(tenant, conversation_id, who)
        if actor.role not in (v.Role.OPERATOR,) and actor.acting_user != info.owner:
            raise NotFound(f"conversation {conversation_id} not found", ("path", "conversation_id"))
        obj = {
            "type": "ConversationErased",
            "tenant": tenant,
            "source": v.Source.OPERATOR.value if actor.role == v.Role.OPERATOR else v.Source.AGENT.value,
            "actor": actor.to_avro(),
            "payload": {"conversation_id": conversation_id, "reason": reason},
        }
        try:
            framed = Pipeline(keys=self.keys).write(obj)
        except InvalidEvent as exc:
            raise Invalid(str(exc)) from exc
        positions = await self._append([framed])
        if wait:
            await self._wait(positions)
        return framed.event.event_id

    # -- the one path -------------------------------------------------------------------------
    def _frame(
        self,
        pipeline: Pipeline,
        tenant: str,
        cid: str,
        turn: Mapping[str, Any],
        actor: Actor,
        source: str,
        i: int,
    ) -> Framed:
        speaker, role, text, at = turn.get("speaker"), turn.get("role"), turn.get("text"), turn.get("time")
        turn_id = turn.get("turn_id")
        if turn_id is None and at is None:  # said now: a turn of its own, even if its words repeat
            at = datetime.now(UTC).isoformat()
            turn_id = f"t-{uuid.uuid4().hex}"
        if turn_id is None and all(isinstance(x, str) for x in (speaker, role, text)):
            turn_id = derive_turn_id(speaker, role, at, text)  # type: ignore[arg-type]
        obj = {
            "type": "ConversationTurn",
            "tenant": tenant,
            "source": source,
            "actor": actor.to_avro(),
            "payload": {
                "conversation_id": cid,
                "turn_id": turn_id,
                "speaker": speaker,
                "role": role,
                "text": text,
            },
            **({"occurred_at": at} if at is not None else {}),
        }
        try:
            return pipeline.write(obj)
        except EventTooLarge as exc:
            raise TooLarge(f"turn {i}: {exc}", ("body", "turns", i)) from exc
        except InvalidEvent as exc:
            raise Invalid(f"turn {i}: {exc}", ("body", "turns", i)) from exc

    async def _append(self, framed: Sequence[Framed]) -> list[Position]:
        if not framed:
            return []
        try:
            return await self.producer.send_many(framed)
        except KafkaError as exc:
            log.error("append to the conversations topic failed: %s", exc)
            raise LogUnavailable(f"the event log is unavailable: {exc}") from exc

    async def _wait(self, positions: Sequence[Position]) -> None:
        timeout = self.wait_timeout_s
        handled = await asyncio.gather(
            *(self.progress.wait_for(p.partition, p.offset, timeout) for p in positions)
        )
        for pos, h in zip(positions, handled, strict=True):
            if h is None:
                raise NotInTime(f"accepted at {pos.partition}:{pos.offset} but not stored within {timeout}s")
            if h.outcome.status is Status.REJECTED:
                raise Conflicting(f"rejected by the conversation store: {h.outcome.reason}")


def may_see(who: Principal, info: ConversationInfo) -> bool:
    """Its owner (an agent acting for them), operators and auditors."""
    return who.sees_everything or (who.user is not None and who.user == info.owner)


def same_turn(a: Event, b: Event) -> bool:
    """Whether two events say the same turn (a re-send), whoever sent them."""
    pa, pb = a.payload, b.payload
    assert isinstance(pa, ev.ConversationTurn) and isinstance(pb, ev.ConversationTurn)
    return (pa.speaker, pa.role, pa.text) == (pb.speaker, pb.role, pb.text) and (
        a.occurred_at == b.occurred_at or not b.occurred_at_given
    )
