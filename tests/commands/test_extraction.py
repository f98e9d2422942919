"""The capture workflow's own logic, with stand-ins for the conversation store, the log and the
command layer (the real ones: tests/api/test_capture.py): when it extracts, what it writes, that a
re-run writes the same events, one extraction per conversation at a time, retries and dead letters."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from engram.commands.answers import Accepted, Attribution, Conflicting
from engram.commands.extraction import ExtractionSettings, ExtractionWorkflow, event_id
from engram.streams.extraction.extractor import Candidate, ExtractionFailed, Known, Turn

T0 = datetime(2026, 12, 5, 9, 0, tzinfo=UTC)


def run(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """An async test run in its own event loop (the suite has no async plugin)."""

    @functools.wraps(test)
    def sync(*args: Any, **kwargs: Any) -> None:
        asyncio.run(test(*args, **kwargs))

    return sync


@dataclass
class Info:
    tenant: str
    conversation_id: str
    owner: str | None
    last_seq: int
    extracted_through: int
    last_turn_at: datetime


@dataclass
class Store:
    """A conversation store: turns by (tenant, conversation); progress as the log would record it."""

    turns: dict[tuple[str, str], list[Turn]] = field(default_factory=dict)
    through: dict[tuple[str, str], int] = field(default_factory=dict)

    def add(self, tenant: str, cid: str, *texts: str, at: datetime = T0) -> None:
        have = self.turns.setdefault((tenant, cid), [])
        for text in texts:
            seq = len(have) + 1
            have.append(Turn(cid, f"{cid}-{seq}", seq, "ana", "user", text, at))

    def info(self, tenant: str, cid: str) -> Info | None:
        turns = self.turns.get((tenant, cid))
        if not turns:
            return None
        return Info(tenant, cid, "ana", turns[-1].seq, self.through.get((tenant, cid), 0), turns[-1].at)

    def pending(self) -> Iterable[Info]:
        for tenant, cid in self.turns:
            info = self.info(tenant, cid)
            if info is not None and info.last_seq > info.extracted_through:
                yield info


def read_turns(store: Store, keys: object, tenant: str, cid: str, after: int) -> list[Turn]:
    return [t for t in store.turns[(tenant, cid)] if t.seq > after]


@dataclass
class Log:
    store: Store
    records: list[dict[str, Any]] = field(default_factory=list)  # TurnsExtracted
    dead: list[tuple[str, str, int, int, str]] = field(default_factory=list)
    durable: bool = True  # False: the process "crashes" before its progress is on the log

    async def extracted(self, tenant: str, cid: str, **record: Any) -> None:
        self.records.append({"tenant": tenant, "conversation_id": cid, **record})
        if self.durable:
            self.store.through[(tenant, cid)] = record["through_seq"]

    async def dead_letter(self, tenant: str, cid: str, first: int, through: int, reason: str) -> None:
        self.dead.append((tenant, cid, first, through, reason))


@dataclass
class NoStores:
    def indexes(self, tenant: str) -> None:
        return None

    def get(self, tenant: str) -> None:
        return None


@dataclass
class Commands:
    """The command layer: records each remember; refuses a label it is told to."""

    stores: NoStores = field(default_factory=NoStores)
    calls: list[tuple[Mapping[str, Any], Attribution]] = field(default_factory=list)
    refuse: set[str] = field(default_factory=set)
    delay_s: float = 0.0

    async def remember(
        self, tenant: str, memory: Mapping[str, Any], by: Attribution, *, wait: bool = False
    ) -> Accepted:
        await asyncio.sleep(self.delay_s)
        if memory["label"] in self.refuse:
            raise Conflicting(f"conflicts with a person's memory: {memory['label']}")
        self.calls.append((memory, by))
        return Accepted(str(by.event_id), f"m-{by.event_id}", 0, len(self.calls), applied=False)


@dataclass
class Patterns:
    """An extractor: one candidate per turn that says 'keep …', citing that turn."""

    name: str = "patterns"
    failures: list[ExtractionFailed | Exception] = field(default_factory=list)
    seen: list[tuple[int, int]] = field(default_factory=list)

    async def extract(self, turns: Sequence[Turn], known: Sequence[Known]) -> list[Candidate]:
        self.seen.append((turns[0].seq, turns[-1].seq))
        if self.failures:
            raise self.failures.pop(0)
        return [
            Candidate(
                {"label": t.text, "content": t.text, "kind": "objective", "importance": 4, "confidence": 1.0},
                (t.turn_id,),
                "keep",
            )
            for t in turns
            if t.text.startswith("keep")
        ]


def workflow(
    store: Store, commands: Commands | None = None, extractor: Patterns | None = None, **settings: Any
) -> tuple[ExtractionWorkflow, Log, Commands, list[float]]:
    slept: list[float] = []

    async def sleep(s: float) -> None:
        slept.append(s)

    log, commands = Log(store), commands or Commands()
    flow = ExtractionWorkflow(
        commands,  # type: ignore[arg-type]
        store,
        None,
        log,
        extractor or Patterns(),
        replace(ExtractionSettings(turns=4, idle_s=30), **settings),
        read_turns=read_turns,
        sleep=sleep,
    )
    return flow, log, commands, slept


SAID = ("hi", "keep ROAS above 3", "ok", "keep Meta under 40k")


@run
async def test_n_unprocessed_turns_start_an_extraction_that_writes_through_the_commands() -> None:
    store = Store()
    flow, log, commands, _ = workflow(store)
    store.add("t1", "c1", *SAID[:3])
    await flow.on_applied("t1", "c1", 3)
    await flow.drain()
    assert commands.calls == [] and log.records == []  # 3 < N
    store.add("t1", "c1", SAID[3])
    await flow.on_applied("t1", "c1", 1)
    await flow.drain()
    assert [m["label"] for m, _ in commands.calls] == ["keep ROAS above 3", "keep Meta under 40k"]
    memory, by = commands.calls[0]
    assert memory["scope"] == "user" and memory["stakeholders"] == {"user_id": "ana"}
    assert memory["confidence"] < 1 and "memory_id" not in memory
    assert memory["evidence"] == {"conversation_id": "c1", "turn_ids": ["c1-2"]}
    assert by.source == "extraction" and (by.actor.id, by.actor.role, by.actor.on_behalf_of) == (
        "extractor",
        "agent",
        "ana",
    )
    assert by.event_id == event_id("t1", "c1", ["c1-2"], "Memory", "keep ROAS above 3")
    (progress,) = log.records
    assert progress["through_seq"] == 4 and progress["failed_reason"] is None
    assert progress["memory_ids"] == [f"m-{by.event_id}" for _, by in commands.calls]
    assert progress["extractor"] == "patterns"
    assert (flow.counters.extracted, flow.counters.written, flow.counters.refused) == (2, 2, 0)


@run
async def test_the_sweep_extracts_a_short_tail_once_it_is_idle_for_t() -> None:
    store = Store()
    flow, log, commands, _ = workflow(store)
    store.add("t1", "c1", "keep CPA under 20")
    await flow.on_applied("t1", "c1", 1)
    assert await flow.sweep(now=T0 + timedelta(seconds=29)) == 0
    assert await flow.sweep(now=T0 + timedelta(seconds=30)) == 1
    await flow.drain()
    assert len(commands.calls) == 1 and log.records[0]["through_seq"] == 1
    assert await flow.sweep(now=T0 + timedelta(hours=1)) == 0  # nothing left unprocessed


@run
async def test_a_rerun_after_a_crash_writes_the_same_events() -> None:
    store = Store()
    store.add("t1", "c1", *SAID)
    first, log, before, _ = workflow(store)
    log.durable = False  # killed before TurnsExtracted reached the log
    await first.on_applied("t1", "c1")
    await first.drain()
    again, _, after, _ = workflow(store)  # the restarted process, same log
    await again.on_applied("t1", "c1")
    await again.drain()
    assert [b.event_id for _, b in before.calls] == [b.event_id for _, b in after.calls]
    assert len({b.event_id for _, b in before.calls}) == 2


@run
async def test_one_extraction_per_conversation_at_a_time_and_no_range_twice() -> None:
    store = Store()
    extractor = Patterns()
    flow, log, _, _ = workflow(store, Commands(delay_s=0.01), extractor)
    store.add("t1", "c1", *SAID)
    await flow.on_applied("t1", "c1")
    await asyncio.sleep(0.005)  # the first tail is being written
    store.add("t1", "c1", *SAID)
    await flow.on_applied("t1", "c1")
    await flow.on_applied("t1", "c1")
    await flow.drain()
    assert extractor.seen == [(1, 4), (5, 8)]
    assert [x["through_seq"] for x in log.records] == [4, 8]


@run
async def test_a_refused_write_is_counted_and_the_rest_go_on() -> None:
    store = Store()
    flow, log, commands, _ = workflow(store, Commands(refuse={"keep ROAS above 3"}))
    store.add("t1", "c1", *SAID)
    await flow.on_applied("t1", "c1")
    await flow.drain()
    assert [m["label"] for m, _ in commands.calls] == ["keep Meta under 40k"]
    assert (flow.counters.written, flow.counters.refused) == (1, 1)
    assert len(log.records[0]["memory_ids"]) == 1 and log.dead == []


@run
async def test_a_retryable_failure_is_retried_with_backoff() -> None:
    store = Store()
    failing = Patterns(failures=[ExtractionFailed("timeout", retryable=True)] * 2)
    flow, log, commands, slept = workflow(store, extractor=failing)
    store.add("t1", "c1", *SAID)
    await flow.on_applied("t1", "c1")
    await flow.drain()
    assert slept == [0.5, 1.0] and flow.counters.retries == 2
    assert len(commands.calls) == 2 and log.dead == []


@pytest.mark.parametrize(
    ("failures", "reason", "slept"),
    [
        (
            [ExtractionFailed("timeout", retryable=True)] * 4,
            "patterns: timeout after 4 tries",
            [0.5, 1.0, 2.0],
        ),
        ([ExtractionFailed("malformed completion", retryable=False)], "patterns: malformed completion", []),
        ([RuntimeError("boom")], "patterns: RuntimeError: boom", []),
    ],
)
@run
async def test_a_failure_dead_letters_the_range_and_marks_it_done(
    failures: list[Exception], reason: str, slept: list[float]
) -> None:
    store = Store()
    flow, log, commands, sleeps = workflow(store, extractor=Patterns(failures=list(failures)))
    store.add("t1", "c1", *SAID)
    await flow.on_applied("t1", "c1")
    await flow.drain()
    assert log.dead == [("t1", "c1", 1, 4, reason)] and sleeps == slept
    assert log.records[0]["failed_reason"] == reason and log.records[0]["through_seq"] == 4
    assert commands.calls == [] and flow.counters.failed == 1
    store.add("t1", "c1", *SAID)  # the conversation goes on past the failed range
    await flow.on_applied("t1", "c1")
    await flow.drain()
    assert len(commands.calls) == 2 and log.records[-1]["through_seq"] == 8


@run
async def test_capture_off_extracts_nothing() -> None:
    store = Store()
    flow, log, commands, _ = workflow(store, enabled=False)
    store.add("t1", "c1", *SAID)
    await flow.on_applied("t1", "c1")
    assert await flow.sweep(now=T0 + timedelta(hours=1)) == 0
    await flow.drain()
    assert commands.calls == [] and log.records == []
