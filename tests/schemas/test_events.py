"""Domain validation: bad events are refused with a reason that names the problem."""

from __future__ import annotations

import pytest
from engram.schemas.checks import InvalidEvent
from engram.schemas.events import event_from_json
from engram.schemas.payloads import mint_memory_id
from engram.streams.pipeline import parse_lines

from tests.factories import envelope, remembered


def test_defaults_are_minted_deterministically() -> None:
    obj = envelope("MemoryRemembered", {k: v for k, v in remembered().items() if k != "memory_id"})
    a, b = event_from_json(dict(obj)), event_from_json(dict(obj))
    assert a.event_id == b.event_id
    assert a.payload.memory_id == mint_memory_id(a.event_id)


@pytest.mark.parametrize(
    ("event_type", "payload", "reason"),
    [
        ("MemoryRemembered", remembered(importance=0), "importance must be an integer 1-5"),
        ("MemoryRemembered", remembered(importance=True), "importance must be an integer 1-5"),
        ("MemoryRemembered", remembered(confidence=1.5), "confidence must be a finite number 0-1"),
        ("MemoryRemembered", remembered(kind="rumour"), "kind must be one of"),
        ("MemoryRemembered", remembered(scope="user"), "needs stakeholders.user_id"),
        ("MemoryRemembered", remembered(scope="team"), "needs stakeholders.team_ids"),
        ("MemoryRemembered", remembered(label="  "), "label must be a non-empty string"),
        ("MemoryRemembered", remembered("bad id!"), "memory_id must match"),
        ("MemoryRemembered", remembered(memory_class="lower"), "memory_class must be a class name"),
        ("MemoryRemembered", remembered(properties={"bad key": 1}), "property name"),
        ("MemoryRemembered", remembered(expires_at="tomorrow"), "not an ISO-8601 time"),
        ("MemoryRemembered", remembered(expires_at="9999-12-31T23:00:00-05:00"), "time out of range"),
        ("MemoryRemembered", remembered(memory_class="http://x/%zz"), "memory_class must be a class name"),
        ("MemoryRemembered", remembered(properties={"forgotten": True}), "'forgotten' is reserved"),
        ("MemoryRevised", {"memory_id": "m1", "property_changes": {"memoryClass": None}}, "reserved"),
        ("MemoryRevised", {"memory_id": "m1"}, "must change at least one field"),
        ("MemoryRevised", {"memory_id": "m1", "changes": {"label": None}}, "cannot be cleared"),
        ("MemoryRevised", {"memory_id": "m1", "changes": {"owner": "x"}}, "cannot be revised"),
        ("MemoryRevised", {"memory_id": "m1", "changes": {"importance": 7}}, "importance"),
        ("MemorySuperseded", {"memory_id": "m1", "superseded_by": "m1"}, "cannot supersede itself"),
        ("KpiObserved", {"metric": "ro as", "value": 1.0, "period": "2026-11"}, "metric must match"),
        (
            "SpendObserved",
            {"platform": "meta", "amount": -1, "currency": "USD", "period": "2026-11"},
            "amount",
        ),
        (
            "SpendObserved",
            {"platform": "meta", "amount": 1, "currency": "usd", "period": "2026-11"},
            "currency",
        ),
    ],
)
def test_invalid_payloads_are_refused_with_reasons(event_type: str, payload: dict, reason: str) -> None:
    with pytest.raises(InvalidEvent, match=reason):
        event_from_json(envelope(event_type, payload))


@pytest.mark.parametrize(
    ("obj", "reason"),
    [
        ({"type": "MemoryRemembered"}, "missing envelope field"),
        ({**envelope("Nope", {})}, "unknown event type"),
        ({**envelope("KpiObserved", {}), "tenant": "Acme Inc"}, "tenant must match"),
        ({**envelope("KpiObserved", {}), "source": "rumour"}, "source must be one of"),
        ({**envelope("KpiObserved", {}), "extra": 1}, "unknown envelope fields"),
        ({**envelope("KpiObserved", {}), "actor": "dana"}, "actor must be an object"),
        ({**envelope("KpiObserved", {}), "event_id": "not-a-uuid"}, "event_id must be a UUID"),
    ],
)
def test_invalid_envelopes_are_refused(obj: dict, reason: str) -> None:
    with pytest.raises(InvalidEvent, match=reason):
        event_from_json(obj)


def test_parse_lines_reports_line_numbers_and_keeps_good_lines() -> None:
    import json

    lines = [
        json.dumps(envelope("KpiObserved", {"metric": "roas", "value": 1.0, "period": "2026-11"})),
        "",
        "{not json",
        json.dumps(
            envelope("KpiObserved", {"metric": "roas", "value": 1.0, "period": "2026-11"}, tenant="ACME")
        ),
        json.dumps(envelope("MemoryRemembered", remembered())),
    ]
    good, bad = parse_lines(lines)
    assert [n for n, _ in good] == [1, 5]
    assert [n for n, _ in bad] == [3, 4]
    assert "not JSON" in bad[0][1]
    assert "tenant must match" in bad[1][1]
