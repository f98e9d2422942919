"""The capture workflow: a conversation's unprocessed tail becomes memories, off the hot path.

A conversation is extracted when it has ``ENGRAM_EXTRACTION_TURNS`` unprocessed turns
(``on_applied``, called as turns are applied) or has been idle ``ENGRAM_EXTRACTION_IDLE_S``
(``sweep``, run periodically). Its tail is read after the durable ``extracted_through``, the
memories the owner already holds that it may restate are looked up (``Known``), and each
candidate is written through ``Commands.remember`` like any write: ``source: extraction``, user
scope for the conversation's owner, confidence below 1, the turns as evidence.

Crash safety comes from the log, not from this process: every write's event id is derived from the
tenant, conversation, evidence turns, class and normalised label, so a re-run after a crash writes
the same events (the projector applies an event id once; ``Commands`` answers a retry of an applied
one as the original), and progress is a ``TurnsExtracted`` record on the conversations topic that
the conversation store reads back. A failed extraction is retried with backoff if it may pass next
time, else dead-lettered with the turn range and reason, and marked extracted with
``failed_reason`` so the range is not tried forever. A refused write (invalid, a conflict) is not a
failure of the range: it is logged and counted.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from engram.commands.answers import Attribution, Refused
from engram.commands.writes import Commands
from engram.projections.read import get_memory
from engram.projections.recall import RecallQuery, recall
from engram.projections.recognize import normalised
from engram.projections.visibility import Principal
from engram.schemas import vocabulary as v
from engram.schemas.events import Actor
from engram.streams.conversations import read_turns as read_sealed_turns
from engram.streams.extraction.extractor import Candidate, ExtractionFailed, Extractor, Known, Turn

log = logging.getLogger(__name__)

EXTRACTION_NAMESPACE = uuid.UUID("2b0f7c1e-4d8a-5b36-9e21-6a7c0d3f5e84")
EXTRACTOR_ACTOR = "extractor"
KNOWN_LIMIT = 20  # related memories handed to the extractor: enough to not repeat, small to read
TAIL_QUERY_CHARS = 2000  # of the tail's text, searched for related memories
AUTO_CONFIDENCE = 0.8  # a candidate that claims 1 (a human's certainty) is capped here


class Conversation(Protocol):
    """What the workflow reads of one conversation (the conversation store's ``info``)."""

    tenant: str
    conversation_id: str
    owner: str | None  # the user whose memories it yields
    last_seq: int  # the last turn applied
    extracted_through: int  # the last turn a TurnsExtracted covers (0: none)
    last_turn_at: datetime  # when the last turn was applied: idleness is measured from it


class Conversations(Protocol):
    """The conversation store, as far as the workflow uses it."""

    def info(self, tenant: str, conversation_id: str) -> Conversation | None: ...

    def pending(self) -> Iterable[Conversation]:
        """Every conversation with turns after ``extracted_through``."""
        ...


class ProgressLog(Protocol):
    """Where the workflow's durable outcomes go: progress on the conversations topic, failures on
    the dead-letter topic (both awaited until the log holds them)."""

    async def extracted(
        self,
        tenant: str,
        conversation_id: str,
        *,
        through_seq: int,
        memory_ids: Sequence[str],
        extractor: str,
        failed_reason: str | None = None,
    ) -> None: ...

    async def dead_letter(
        self, tenant: str, conversation_id: str, first_seq: int, through_seq: int, reason: str
    ) -> None: ...


ReadTurns = Callable[[Any, Any, str, str, int], Sequence[Turn]]


@dataclass(frozen=True)
class ExtractionSettings:
    enabled: bool = True
    turns: int = 6
    idle_s: float = 30.0
    retries: int = 3
    backoff_s: float = 0.5

    @classmethod
    def of(cls, settings: Any) -> ExtractionSettings:
        return cls(
            enabled=settings.extraction,
            turns=settings.extraction_turns,
            idle_s=settings.extraction_idle_s,
            retries=settings.extraction_retries,
            backoff_s=settings.extraction_backoff_s,
        )


@dataclass
class Counters:
    """What the workflow did since it started (logged, and read by tests and the bench)."""

    extractions: int = 0  # tails run through the extractor
    extracted: int = 0  # candidates it proposed
    written: int = 0  # accepted by the command layer
    refused: int = 0  # refused by it (invalid, conflict, not allowed): logged with the reason
    failed: int = 0  # ranges dead-lettered
    retries: int = 0


def event_id(
    tenant: str, conversation_id: str, turn_ids: Sequence[str], memory_class: str, label: str
) -> str:
    """The event id of an extracted memory: the same tail and candidate give the same id, so a
    re-run after a crash appends nothing new.

    >>> a = event_id("t", "c", ["c-1"], "Memory", "Keep ROAS above 3")
    >>> a == event_id("t", "c", ["c-1"], "Memory", " keep roas  above 3")
    True
    """
    name = "\x1f".join([tenant, conversation_id, ",".join(turn_ids), memory_class, normalised(label)])
    return str(uuid.uuid5(EXTRACTION_NAMESPACE, name))


@dataclass
class ExtractionWorkflow:
    commands: Commands
    store: Conversations
    keys: Any
    producer: ProgressLog
    extractor: Extractor
    settings: ExtractionSettings
    read_turns: ReadTurns = read_sealed_turns  # opens the store's sealed turns with their keys
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    # whether this process extracts the tenant's conversations: in a group, only its owner does
    # (every process stores every turn), so a conversation is extracted once wherever it came in
    owns: Callable[[str], bool] = lambda tenant: True
    counters: Counters = field(default_factory=Counters)
    _running: dict[tuple[str, str], asyncio.Task[None]] = field(default_factory=dict)
    _again: set[tuple[str, str]] = field(default_factory=set)
    _done_through: dict[tuple[str, str], int] = field(default_factory=dict)

    # -- triggers ------------------------------------------------------------------------------
    async def on_applied(self, tenant: str, conversation_id: str, applied: object = None) -> None:
        """Turns of a conversation were applied: extract now if it has N unprocessed ones."""
        if not self.settings.enabled:
            return
        info = self.store.info(tenant, conversation_id)
        if info is not None and self._unprocessed(info) >= self.settings.turns:
            self.start(info)

    async def sweep(self, now: datetime | None = None) -> int:
        """Start the extraction of every conversation with N unprocessed turns, or any idle for T
        (after a restart, turns applied before the workflow listened are found here); how many."""
        if not self.settings.enabled:
            return 0
        now = now or datetime.now(UTC)
        started = 0
        for info in list(self.store.pending()):
            idle = (now - info.last_turn_at).total_seconds()
            unprocessed = self._unprocessed(info)
            due = unprocessed >= self.settings.turns or (unprocessed > 0 and idle >= self.settings.idle_s)
            if due and self.start(info):
                started += 1
        return started

    async def sweep_forever(self) -> None:
        """``sweep`` every quarter of T (at least every 5 s, at most 20 times a second)."""
        every = min(5.0, max(0.05, self.settings.idle_s / 4))
        while True:
            await self.sleep(every)
            try:
                await self.sweep()
            except Exception:  # a sweep that fails is tried again at the next tick, never fatal
                log.exception("extraction sweep failed")

    def start(self, info: Conversation) -> bool:
        """Extract ``info``'s tail in a task, unless one is running for it (then once more after)
        or another process owns its tenant (then that one does)."""
        if not self.owns(info.tenant):
            return False
        key = (info.tenant, info.conversation_id)
        if key in self._running:
            self._again.add(key)
            return False
        task = asyncio.create_task(self._run(info.tenant, info.conversation_id))
        self._running[key] = task
        return True

    async def drain(self) -> None:
        """Wait for every extraction in flight (tests, shutdown)."""
        while self._running:
            await asyncio.gather(*list(self._running.values()), return_exceptions=True)

    async def stop(self) -> None:
        for task in list(self._running.values()):
            task.cancel()
        await asyncio.gather(*list(self._running.values()), return_exceptions=True)

    # -- one conversation -----------------------------------------------------------------------
    def _unprocessed(self, info: Conversation) -> int:
        done = max(info.extracted_through, self._done_through.get((info.tenant, info.conversation_id), 0))
        return info.last_seq - done

    async def _run(self, tenant: str, conversation_id: str) -> None:
        key = (tenant, conversation_id)
        try:
            while True:
                self._again.discard(key)
                info = self.store.info(tenant, conversation_id)
                if info is None or self._unprocessed(info) <= 0:
                    break
                await self.extract(info)
                if key not in self._again:
                    break
        except Exception:  # the log unreachable, say: the sweep tries the range again later
            log.exception("extraction of %s/%s stopped", tenant, conversation_id)
        finally:
            self._running.pop(key, None)

    async def extract(self, info: Conversation) -> None:
        """Extract one conversation's unprocessed tail, write what it yields, record the progress."""
        tenant, cid = info.tenant, info.conversation_id
        after = max(info.extracted_through, self._done_through.get((tenant, cid), 0))
        turns = list(self._read(tenant, cid, after))
        if not turns:
            return
        through = turns[-1].seq
        owner = info.owner or next((t.speaker for t in turns if t.role == "user"), None)
        candidates, reason = await self._candidates(tenant, turns, owner)
        if reason is not None:  # dead-lettered
            await self.producer.dead_letter(tenant, cid, turns[0].seq, through, reason)
            await self._progress(tenant, cid, through, [], failed_reason=reason)
            self.counters.failed += 1
            return
        written = [
            m for c in candidates if (m := await self._write(tenant, cid, turns, owner, c)) is not None
        ]
        await self._progress(tenant, cid, through, written)
        log.info(
            "extracted %s/%s turns %d-%d: %d candidates, %d written",
            tenant, cid, turns[0].seq, through, len(candidates), len(written),
        )  # fmt: skip

    async def _candidates(
        self, tenant: str, turns: Sequence[Turn], owner: str | None
    ) -> tuple[list[Candidate], str | None]:
        """The extractor's candidates, retried with backoff while it fails retryably; or the reason
        the range is to be dead-lettered."""
        known = self._known(tenant, turns, owner)
        self.counters.extractions += 1
        for attempt in range(self.settings.retries + 1):
            try:
                found = await self.extractor.extract(turns, known)
            except ExtractionFailed as exc:
                if exc.retryable and attempt < self.settings.retries:
                    self.counters.retries += 1
                    log.warning("extraction failed (%s), retry %d", exc.reason, attempt + 1)
                    await self.sleep(self.settings.backoff_s * 2**attempt)
                    continue
                tries = f" after {attempt + 1} tries" if exc.retryable else ""
                return [], f"{self.extractor.name}: {exc.reason}{tries}"
            except Exception as exc:  # an extractor's bug is this range's failure, not the process's
                return [], f"{self.extractor.name}: {type(exc).__name__}: {exc}"
            self.counters.extracted += len(found)
            return found, None
        raise AssertionError("unreachable: the last attempt returns")

    def _known(self, tenant: str, turns: Sequence[Turn], owner: str | None) -> list[Known]:
        """The memories the owner may see that the tail's words find (BM25): what it may restate."""
        indexes = self.commands.stores.indexes(tenant)
        graph = self.commands.stores.get(tenant)
        if indexes is None or graph is None:
            return []
        text = " ".join(t.text for t in turns)[-TAIL_QUERY_CHARS:]
        who = Principal(user=owner, role="agent", subject=EXTRACTOR_ACTOR)
        query = RecallQuery(q=text, limit=KNOWN_LIMIT, min_importance=1, fusion="bm25")
        try:
            hits = recall(
                indexes, query, who, None, count_tokens=lambda s: len(s) // 4, class_weight=lambda m: 1.0
            )
        except Exception:  # related memories help; a tail is still extracted without them
            log.exception("looking up known memories for %s failed", tenant)
            return []
        known = []
        for hit in hits:
            m = hit.memory
            full = get_memory(graph, m.id)
            known.append(
                Known(
                    memory_id=m.id,
                    label=m.label,
                    content=m.content,
                    memory_class=m.memory_class,
                    properties=full["properties"] if full else {},
                    source=m.source or "agent",
                )
            )
        return known

    async def _write(
        self, tenant: str, cid: str, turns: Sequence[Turn], owner: str | None, c: Candidate
    ) -> str | None:
        """Write one candidate; its memory id, or None if the command layer refused it."""
        ids = {t.turn_id for t in turns}
        evidence = [t for t in c.evidence if t in ids] or [turns[-1].turn_id]
        memory = dict(c.memory)
        label = str(memory.get("label", ""))
        memory_class = str(memory.get("memory_class", "Memory"))
        memory.update(
            scope=v.Scope.USER.value,
            stakeholders={"user_id": owner},
            confidence=min(float(memory.get("confidence", AUTO_CONFIDENCE)), AUTO_CONFIDENCE),
            evidence={"conversation_id": cid, "turn_ids": evidence[: v.EVIDENCE_TURNS_MAX]},
        )
        memory.pop("memory_id", None)  # minted from the event id: the same on a re-run
        by = Attribution(
            source=v.Source.EXTRACTION.value,
            actor=Actor(id=EXTRACTOR_ACTOR, role="agent", on_behalf_of=owner),
            event_id=event_id(tenant, cid, evidence, memory_class, label),
            purpose=f"extracted by {self.extractor.name}: {c.reason}"[:256],
        )
        try:
            accepted = await self.commands.remember(tenant, memory, by, wait=False)
        except Refused as exc:
            self.counters.refused += 1
            log.warning("extracted memory %r refused (%d): %s", label[:80], exc.status, exc.reason)
            return None
        self.counters.written += 1
        return accepted.memory_id

    async def _progress(
        self, tenant: str, cid: str, through: int, memory_ids: list[str], *, failed_reason: str | None = None
    ) -> None:
        await self.producer.extracted(
            tenant,
            cid,
            through_seq=through,
            memory_ids=memory_ids,
            extractor=self.extractor.name,
            failed_reason=failed_reason,
        )
        key = (tenant, cid)
        self._done_through[key] = max(self._done_through.get(key, 0), through)

    def _read(self, tenant: str, cid: str, after: int) -> Sequence[Turn]:
        return self.read_turns(self.store, self.keys, tenant, cid, after)
