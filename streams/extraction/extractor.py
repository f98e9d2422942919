"""What an extractor is given, what it returns, and how it fails.

An extractor reads an unprocessed tail of one conversation, with the memories already known or
related to it (so it does not say them again), and proposes typed memories. It writes nothing:
the workflow validates each candidate by the shapes and writes it through the command layer as
``source: extraction``, with the turns it cites as evidence.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol


@dataclass(frozen=True)
class Turn:
    """One thing said in a conversation, in the order the log holds it (``seq`` from 1)."""

    conversation_id: str
    turn_id: str
    seq: int
    speaker: str
    role: str  # user | assistant | system | other
    text: str
    at: datetime


@dataclass(frozen=True)
class Known:
    """A memory the tenant already holds that the tail may restate or contradict."""

    memory_id: str
    label: str
    content: str
    memory_class: str
    properties: Mapping[str, Any] = field(default_factory=dict)
    source: str = "agent"


@dataclass(frozen=True)
class Candidate:
    """A memory an extractor proposes.

    ``memory`` holds MemoryRemembered's body fields as the HTTP API takes them (``label``,
    ``content``, ``kind``, ``importance``, ``confidence`` below 1, ``memory_class``, ``properties``);
    scope, stakeholders and attribution are the workflow's, not the extractor's. ``evidence`` is
    the turn ids it rests on (at least one); ``reason`` says why it was extracted (the pattern's
    name, or the model's), for the audit of what the extractor did.
    """

    memory: Mapping[str, Any]
    evidence: tuple[str, ...]
    reason: str


class ExtractionFailed(Exception):
    """An extraction that produced nothing usable. ``retryable`` (a timeout, a refused connection)
    is tried again with backoff; otherwise (a malformed completion) it is dead-lettered at once."""

    def __init__(self, reason: str, *, retryable: bool) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retryable = retryable


class Extractor(Protocol):
    """Turns → candidates. ``name`` is recorded with every memory it makes."""

    name: str

    async def extract(self, turns: Sequence[Turn], known: Sequence[Known]) -> list[Candidate]: ...
