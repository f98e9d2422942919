"""The conversation store as a follower of the conversations topic: turns numbered once per turn
id in log order, kept sealed, read back opened with their keys; a redelivered record skipped;
owners, progress and erasure (every turn key destroyed) decided as the docs say."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from engram.projections.batch import Status
from engram.projections.conversations import ConversationStore
from engram.schemas import sealing
from engram.schemas.events import Event, Position
from engram.streams.conversations import read_turns
from engram.streams.keystore import KeyStore
from engram.streams.pipeline import Pipeline

from tests.factories import envelope

SAM = {"id": "sam", "role": "user"}


def turn(
    turn_id: str, text: str, *, cid: str = "c1", actor: dict[str, str] = SAM, **extra: Any
) -> dict[str, Any]:
    payload = {
        "conversation_id": cid,
        "turn_id": turn_id,
        "speaker": actor["id"],
        "role": "user",
        "text": text,
    }
    return envelope("ConversationTurn", payload, actor=actor, occurred_at="2026-12-01T10:00:00Z", **extra)


class Log:
    """Events framed (sealed) by the pipeline and applied at increasing offsets, as the agent does."""

    def __init__(self, tmp_path: Path) -> None:
        self.keys = KeyStore(tmp_path / "keys")
        self.pipeline = Pipeline(keys=self.keys)
        self.store = ConversationStore(tmp_path / "conversations", self.keys)
        self.offset = 0

    def framed(self, obj: dict[str, Any]) -> Event:
        return self.pipeline.read(self.pipeline.write(obj).value)

    def apply(self, obj: dict[str, Any], *, offset: int | None = None) -> Any:
        pos = Position(0, self.offset if offset is None else offset)
        if offset is None:
            self.offset += 1
        return self.store.apply("acme", self.framed(obj), pos)


def test_turns_are_numbered_once_kept_sealed_and_read_back_opened(tmp_path: Path) -> None:
    log = Log(tmp_path)
    assert log.apply(turn("t1", "keep ROAS above 3")).turns == 1
    again = log.apply(turn("t1", "keep ROAS above 3"))  # a retry: the same turn, no new seq
    assert (again.new, again.turns, again.outcome.status) == (False, 1, Status.APPLIED)
    assert log.apply(turn("t2", "and never spend over $40k")).turns == 2
    info = log.store.info("acme", "c1")
    assert info is not None
    assert (info.owner, info.turns, info.last_seq, info.extracted_through, info.erased) == (
        "sam",
        2,
        2,
        0,
        False,
    )
    stored = log.store.turns("acme", "c1")
    assert [s.seq for s in stored] == [1, 2]
    assert stored[0].event.payload.text == "" and stored[0].event.payload.sealed is not None  # wire form
    turns = read_turns(log.store, log.keys, "acme", "c1")
    assert [(t.seq, t.turn_id, t.text, t.speaker) for t in turns] == [
        (1, "t1", "keep ROAS above 3", "sam"),
        (2, "t2", "and never spend over $40k", "sam"),
    ]
    assert [t.turn_id for t in read_turns(log.store, log.keys, "acme", "c1", after_seq=1)] == ["t2"]
    assert b"ROAS" not in (tmp_path / "conversations" / "acme" / "conversations.sqlite").read_bytes()


def test_a_redelivered_record_is_skipped(tmp_path: Path) -> None:
    log = Log(tmp_path)
    log.apply(turn("t1", "hello"), offset=5)
    redelivered = log.apply(turn("t9", "hello again"), offset=5)
    assert redelivered.outcome.status is Status.SKIPPED
    assert log.store.info("acme", "c1").turns == 1  # type: ignore[union-attr]


def test_another_user_may_not_add_to_a_conversation_an_operator_may(tmp_path: Path) -> None:
    log = Log(tmp_path)
    log.apply(turn("t1", "mine"))
    kim = log.apply(turn("t2", "and mine", actor={"id": "kim", "role": "user"}))
    assert kim.outcome.status is Status.REJECTED and "sam's" in (kim.outcome.reason or "")
    agent = log.apply(turn("t3", "for sam", actor={"id": "bot", "role": "agent", "on_behalf_of": "sam"}))
    dana = log.apply(turn("t4", "imported", actor={"id": "dana", "role": "operator"}))
    assert agent.outcome.status is dana.outcome.status is Status.APPLIED
    assert log.store.info("acme", "c1").turns == 3  # type: ignore[union-attr]


def test_progress_moves_pending_and_comes_from_extraction_only(tmp_path: Path) -> None:
    log = Log(tmp_path)
    for i in range(3):
        log.apply(turn(f"t{i}", f"turn {i}"))
    assert [(i.tenant, i.conversation_id) for i in log.store.pending()] == [("acme", "c1")]
    progress = {"conversation_id": "c1", "through_seq": 3, "through_turn_id": "t2", "extractor": "patterns"}
    pipe = {"id": "extractor", "role": "pipeline"}
    forged = log.apply(
        {**envelope("TurnsExtracted", dict(progress, memory_ids=["m1"]), actor=pipe), "source": "agent"}
    )
    assert forged.outcome.status is Status.REJECTED
    done = log.apply(
        {**envelope("TurnsExtracted", dict(progress, memory_ids=["m1"]), actor=pipe), "source": "extraction"}
    )
    assert done.outcome.status is Status.APPLIED
    info = log.store.info("acme", "c1")
    assert info is not None and (info.extracted_through, info.memory_ids) == (3, ("m1",))
    assert log.store.pending() == []


@pytest.mark.parametrize("who", [{"id": "sam", "role": "user"}, {"id": "dana", "role": "operator"}])
def test_erasure_destroys_every_turn_key_and_the_rows(tmp_path: Path, who: dict[str, str]) -> None:
    log = Log(tmp_path)
    log.apply(turn("t1", "secret one"))
    log.apply(turn("t2", "secret two"))
    kim = log.apply(
        envelope("ConversationErased", {"conversation_id": "c1"}, actor={"id": "kim", "role": "user"})
    )
    assert kim.outcome.status is Status.REJECTED
    erased = log.apply(envelope("ConversationErased", {"conversation_id": "c1"}, actor=who))
    assert (erased.outcome.status, erased.erased_keys) == (Status.APPLIED, 2)
    for tid in ("t1", "t2"):
        assert log.keys.data_key("acme", sealing.turn_key_id("c1", tid)) is None
    info = log.store.info("acme", "c1")
    assert info is not None and info.erased and info.turns == 0
    assert log.store.turns("acme", "c1") == [] and log.store.pending() == []
    with pytest.raises(Exception, match="was erased"):  # the same turn cannot be sealed again
        log.framed(turn("t1", "secret one"))
    late = log.apply(turn("t3", "after the erasure"))
    assert late.outcome.status is Status.REJECTED
    assert log.keys.data_key("acme", sealing.turn_key_id("c1", "t3")) is None
