"""The pipeline between a write and the log's bytes: what a line may not say (refused with its line
number), the event a frame carries being the one its bytes read back as, and the projector's offline
pre-check in ``engram produce``."""

from __future__ import annotations

import json

from projections.knowledge import load_knowledge
from streams.pipeline import Pipeline, parse_lines
from tests.factories import envelope, remembered


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
