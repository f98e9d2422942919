"""The intake's admission, as logic: past its bound a write is refused at once, and while the log
leaves a record unacknowledged too long; a settled write makes room again. The producer here is a
stand-in that holds deliveries until the test lets them go (the real one is tested with a real
broker in tests/api/test_intake.py and tests/api/test_outage.py)."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
from engram.commands.answers import LogUnavailable
from engram.commands.intake import Busy, Intake
from engram.schemas import sealing
from engram.schemas.checks import InvalidEvent
from engram.schemas.events import Event, event_from_json
from engram.streams.keystore import KeyStore
from engram.streams.pipeline import Framed, Pipeline


class HeldProducer:
    """Takes records at once; each delivery completes when the test says."""

    write_timeout_s = 5.0

    def __init__(self) -> None:
        self.deliveries: list[asyncio.Future[Any]] = []
        self.taken: list[Framed] = []

    async def enqueue(self, framed: Framed) -> asyncio.Future[Any]:
        self.taken.append(framed)
        delivery: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.deliveries.append(delivery)
        return delivery


class Meta:
    def __init__(self, offset: int) -> None:
        self.partition, self.offset, self.timestamp = 0, offset, 0


def kpi(value: float) -> Event:
    envelope = {"type": "KpiObserved", "tenant": "acme", "source": "pipeline", "event_id": str(uuid.uuid4())}
    payload = {"metric": "roas", "value": value, "period": "2026-12"}
    return event_from_json({**envelope, "actor": {"id": "p", "role": "pipeline"}, "payload": payload})


def test_past_its_bound_a_write_is_refused_at_once_and_a_settled_one_makes_room() -> None:
    async def main() -> None:
        producer = HeldProducer()
        intake = Intake(Pipeline, producer, limit=2, stalled_s=60)  # type: ignore[arg-type]
        first, second = intake.submit(kpi(1)), intake.submit(kpi(2))
        with pytest.raises(Busy, match="ENGRAM_WRITE_QUEUE=2"):
            intake.submit(kpi(3))
        while len(producer.deliveries) < 2:
            await asyncio.sleep(0.001)
        producer.deliveries[0].set_result(Meta(7))
        assert (await first).offset == 7
        third = intake.submit(kpi(3))  # room again
        producer.deliveries[1].set_result(Meta(8))
        while len(producer.deliveries) < 3:
            await asyncio.sleep(0.001)
        producer.deliveries[2].set_result(Meta(9))
        assert [(await second).offset, (await third).offset] == [8, 9]
        assert [f.event.payload.value for f in producer.taken] == [1, 2, 3]  # in the order they came

    asyncio.run(main())


def test_while_the_log_leaves_a_record_unacknowledged_new_writes_are_refused() -> None:
    async def main() -> None:
        producer = HeldProducer()
        intake = Intake(Pipeline, producer, limit=100, stalled_s=0.05)  # type: ignore[arg-type]
        held = intake.submit(kpi(1))
        while not producer.deliveries:
            await asyncio.sleep(0.001)
        intake.submit(kpi(2))  # within the bound: taken
        await asyncio.sleep(0.1)
        with pytest.raises(LogUnavailable, match="nothing of this one was written"):
            intake.submit(kpi(3))
        for delivery in producer.deliveries:
            delivery.set_result(Meta(1))
        await held
        await asyncio.sleep(0.01)
        intake.submit(kpi(4))  # acknowledged: taken again
        assert len(producer.taken) == 2

    asyncio.run(main())


def test_a_write_framing_refuses_is_its_own_answer_not_the_batchs(tmp_path: Path) -> None:
    keys = KeyStore(tmp_path / "keys")
    keys.destroy("acme", sealing.key_id("m-forgotten"))  # its memory was forgotten

    async def main() -> tuple[Any, Any]:
        producer = HeldProducer()
        intake = Intake(lambda: Pipeline(None, keys, None), producer, limit=10, stalled_s=60)  # type: ignore[arg-type]
        good = intake.submit(kpi(1))
        bad = intake.submit(forgotten_memory())
        while not producer.deliveries:
            await asyncio.sleep(0.001)
        await asyncio.sleep(0.01)
        for delivery in producer.deliveries:
            delivery.set_result(Meta(3))
        return await asyncio.gather(good, bad, return_exceptions=True)

    good, bad = asyncio.run(main())
    assert good.offset == 3
    assert isinstance(bad, InvalidEvent) and "was forgotten" in str(bad)


def forgotten_memory() -> Event:
    envelope = {
        "type": "MemoryRemembered",
        "tenant": "acme",
        "source": "agent",
        "event_id": str(uuid.uuid4()),
    }
    payload = {"memory_id": "m-forgotten", "label": "again", "content": "said again", "kind": "fact",
               "importance": 3, "scope": "company", "stakeholders": {"user_id": None, "team_ids": []},
               "embedding": [0.5, 0.5], "embedding_model": "test"}  # fmt: skip
    return event_from_json({**envelope, "actor": {"id": "a", "role": "agent"}, "payload": payload})
