"""Conversation turns at the edge: what a caller sends (``TurnsCreate``), and what it reads back."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from engram.api.models.fields import NON_BLANK, EdgeModel, Id, Source, Timestamp, _one_of
from engram.commands.conversations import TURNS_PER_REQUEST
from engram.schemas import vocabulary as v
from pydantic import BaseModel, Field, StrictStr

TurnRole = _one_of(v.TurnRole)


class TurnIn(EdgeModel):
    """One thing said. Without ``turn_id`` one is derived from the speaker, role, time and text, so
    the same turn sent twice is stored once; without ``time`` it is now (and a re-send is new)."""

    turn_id: Id | None = Field(None, description="Unique in the conversation; derived if absent.")
    speaker: StrictStr = Field(min_length=1, max_length=v.SPEAKER_MAX, pattern=NON_BLANK)
    role: TurnRole = "user"  # type: ignore[valid-type]
    text: StrictStr = Field(min_length=1, max_length=v.TURN_TEXT_MAX, pattern=NON_BLANK)
    time: Timestamp | None = Field(None, description="When it was said; defaults to now.")

    def as_turn(self) -> dict[str, Any]:
        return {
            "turn_id": self.turn_id,
            "speaker": self.speaker,
            "role": self.role,
            "text": self.text,
            "time": self.time.isoformat() if self.time else None,
        }


class TurnsCreate(EdgeModel):
    turns: list[TurnIn] = Field(min_length=1, max_length=TURNS_PER_REQUEST)
    source: Source = "agent"  # type: ignore[valid-type]


class TurnAccepted(BaseModel):
    turn_id: str
    event_id: str
    stored: bool = Field(description="Already stored (a re-send), or stored while the caller waited.")


class TurnsAccepted(BaseModel):
    conversation_id: str
    turns: list[TurnAccepted]


class TurnOut(BaseModel):
    turn_id: str
    seq: int
    speaker: str
    role: str
    text: str
    time: datetime


class ConversationPublic(BaseModel):
    conversation_id: str
    owner: str | None
    turns: list[TurnOut]
    extracted_through: int = Field(description="The last seq extraction covered (0: none yet).")
    memory_ids: list[str] = Field(description="The memories extracted from it.")
    failed_reason: str | None = Field(
        None,
        description="Why its last extraction was given up on (the range is dead-lettered); null when it"
        " succeeded.",
    )
    last_turn_at: datetime | None


class ConversationErase(EdgeModel):
    reason: StrictStr | None = Field(None, max_length=1024)


class ErasureAccepted(BaseModel):
    conversation_id: str
    event_id: str
    erased: bool = Field(description="The store has applied it (its turn keys are destroyed).")
