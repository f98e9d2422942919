"""The pipeline between a write and the log's bytes: what a line may not say (refused with its line
number), the event a frame carries being the one its bytes read back as, and the projector's offline
pre-check in ``engram produce``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from engram.projections.knowledge import load_knowledge
from engram.schemas import payloads
from engram.streams import codec
from engram.streams.keystore import KeyStore
from engram.streams.pipeline import Pipeline, parse_lines

from tests.factories import EXAMPLES, envelope, remembered


def lines(*payloads: dict) -> list[str]:
    return [json.dumps(envelope("MemoryRemembered", p)) for p in payloads]


def test_property_names_the_rules_conclude_are_refused_before_anything_is_sent() -> None:
    text = lines(
        remembered("ok", properties={"goal": 3.0}),
        remembered("bad", properties={"targetStatus": "met", "liveRank": 1}),
    )
    good, bad = parse_lines(text, Pipeline(load_knowledge()))
    assert [n for n, _ in good] == [1]
    assert bad == [
        (
            2,
            "property name 'targetStatus' is reserved by engram; "
            "property name 'liveRank' is reserved by engram",
        )
    ]


def test_unknown_fields_are_refused_not_dropped() -> None:
    typo = {**remembered("a"), "imporance": 5}
    nested = remembered("b", scope="user", stakeholders={"user_id": "sam", "teams": ["growth"]})
    good, bad = parse_lines(lines(typo, nested))
    assert good == []
    assert bad == [
        (1, "unknown MemoryRemembered fields: imporance"),
        (2, "unknown Stakeholders fields: teams"),
    ]


@pytest.mark.parametrize("event_type", payloads.EVENT_TYPES)
@pytest.mark.parametrize("sealed", [False, True])
def test_a_frames_event_is_the_one_its_bytes_read_back_as(
    event_type: str, sealed: bool, tmp_path: Path
) -> None:
    """Why a write is encoded once and never decoded on its way: the event a frame carries (what
    the API decides on) equals what the projector reads back from the frame's bytes, for every
    event type, sealed or not, with a time in another offset and below a millisecond and a vector
    a float32 cannot hold exactly."""
    pipeline = Pipeline(load_knowledge(), KeyStore(tmp_path) if sealed else None)
    payload = dict(EXAMPLES[event_type])
    if event_type == "MemoryRemembered":
        payload.update(embedding=[0.1, 1 / 3, 2.0e-7], expires_at="2027-01-01T01:02:03.456789+02:00")
    if event_type == "ClockTicked":
        payload["now"] = "2026-12-01T00:00:00.123456-05:00"
    framed = pipeline.write(envelope(event_type, payload, occurred_at="2026-11-30T23:59:59.999999+01:00"))
    back = pipeline.read(framed.value)
    assert framed.event == back
    assert framed.event.occurred_at.tzinfo == back.occurred_at.tzinfo
    assert framed.value == codec.encode(framed.event)  # the bytes are the event's, sealed once


def test_produce_refuses_what_the_projector_would_refuse_whatever_the_facts() -> None:
    """The README's own example line was produced and then dead-lettered: a pipeline's memory."""
    pipeline = Pipeline(load_knowledge())
    pipe = {"id": "etl", "role": "pipeline"}
    text = [
        json.dumps(envelope("MemoryRemembered", remembered("a"), actor=pipe)),
        json.dumps(envelope("KpiObserved", dict(EXAMPLES["KpiObserved"]), actor=pipe)),
        json.dumps(envelope("MemoryRemembered", remembered("b"), actor={"id": "sam", "role": "user"})),
        json.dumps(envelope("MemoryRevised", dict(EXAMPLES["MemoryRevised"]))),  # needs the facts: sent
    ]
    good, bad = parse_lines(text, pipeline, offline_check=True)
    assert [n for n, _ in good] == [2, 4]
    assert bad == [
        (
            1,
            (
                "a pipeline may only emit KpiObserved, SpendObserved, ClockTicked, "
                "ConversationTurn and TurnsExtracted"
            ),
        ),
        (3, "company memories are written by an operator, not a user"),
    ]
    assert [n for n, _ in parse_lines(text, pipeline)[0]] == [1, 2, 3, 4]  # the checks of the line alone
