"""``Together``: the calls ready on the loop in one turn are answered by one batch call, each with
its own answer or the batch's error; and the conflict keys derived together equal those derived
one by one."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence

import pytest
from engram.commands.together import Together
from engram.projections.conflicts import keys_of, keys_of_many
from engram.projections.knowledge import load_knowledge
from engram.schemas.events import Event, event_from_json


def test_calls_ready_together_are_one_batch_and_each_gets_its_own_answer() -> None:
    batches: list[list[int]] = []

    def many(items: Sequence[int]) -> list[int]:
        batches.append(list(items))
        return [i * 10 for i in items]

    async def main() -> tuple[list[int], int]:
        together = Together(many)
        answers = await asyncio.gather(*(together(i) for i in range(5)))
        alone = await together(7)
        return list(answers), alone

    answers, alone = asyncio.run(main())
    assert answers == [0, 10, 20, 30, 40] and alone == 70
    assert batches == [[0, 1, 2, 3, 4], [7]]


def test_a_crowd_is_answered_a_bounded_batch_at_a_time() -> None:
    batches: list[int] = []

    def many(items: Sequence[int]) -> list[int]:
        batches.append(len(items))
        return list(items)

    async def main() -> list[int]:
        together = Together(many, most=4)
        return await asyncio.gather(*(together(i) for i in range(10)))

    assert asyncio.run(main()) == list(range(10))
    assert batches == [4, 4, 2]


def test_an_error_of_the_batch_is_each_callers() -> None:
    def many(items: Sequence[int]) -> list[int]:
        raise ValueError("no")

    async def main() -> list[object]:
        together = Together(many)
        return await asyncio.gather(*(together(i) for i in range(3)), return_exceptions=True)

    assert [type(x) for x in asyncio.run(main())] == [ValueError] * 3


def remembered(label: str, memory_id: str | None = None, **payload: object) -> Event:
    body = {"label": label, "content": f"{label}.", "kind": "fact", "importance": 3, "scope": "company"}
    body |= {"stakeholders": {"user_id": None, "team_ids": []}, **payload}
    if memory_id is not None:
        body["memory_id"] = memory_id
    envelope = {"type": "MemoryRemembered", "tenant": "acme", "source": "agent", "payload": body}
    return event_from_json({**envelope, "actor": {"id": "a", "role": "agent"}, "event_id": str(uuid.uuid4())})


@pytest.mark.parametrize("size", [1, 2, 17])
def test_conflict_keys_derived_together_equal_those_derived_alone(size: int) -> None:
    knowledge = load_knowledge()
    kinds = [
        {},
        {"scope": "user", "stakeholders": {"user_id": "sam", "team_ids": []}},
        {
            "memory_class": "BudgetConstraintMemory",
            "properties": {"platform": "meta", "amount": 1.0, "currency": "USD"},
        },
        {"memory_class": "PerformanceTargetMemory", "properties": {"metric": "roas", "target": 3.5}},
    ]
    events = [remembered(f"Note {i % 3}", **kinds[i % len(kinds)]) for i in range(size)]
    if size > 2:
        events.append(remembered("Same id", events[0].payload.memory_id))  # one memory twice
    assert keys_of_many(knowledge, events) == [keys_of(knowledge, e) for e in events]
