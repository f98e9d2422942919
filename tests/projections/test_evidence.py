"""An extracted memory's evidence (the conversation and turns it came from): checked, projected,
kept through a forget, shown by justify, and absent from every event written before it existed."""

from __future__ import annotations

import pytest
from engram.projections.justify import justify
from engram.projections.visibility import everything
from engram.schemas.checks import InvalidEvent
from engram.schemas.payloads import MemoryRemembered
from engram.streams import codec

from tests.factories import event, remembered
from tests.tenant import Tenant

EVIDENCE = {"conversation_id": "conv-7", "turn_ids": ["conv-7-3", "conv-7-1"]}


def test_justify_says_which_conversation_and_turns(tenant: Tenant) -> None:
    tenant.apply("MemoryRemembered", remembered("x1", confidence=0.8, evidence=EVIDENCE), source="extraction")
    why = justify(tenant.graph, "x1", everything)
    assert why is not None and why["source"] == "extraction"
    assert why["evidence"] == {
        "conversation_id": "conv-7",
        "turn_ids": ["conv-7-1", "conv-7-3"],
        "text": "extracted from conversation conv-7, turns conv-7-1, conv-7-3",
    }
    tenant.apply("MemoryRemembered", remembered("h1"))
    assert (justify(tenant.graph, "h1", everything) or {})["evidence"] is None


def test_a_forgotten_memory_keeps_its_evidence_ids(tenant: Tenant) -> None:
    tenant.apply("MemoryRemembered", remembered("x1", evidence=EVIDENCE), source="extraction")
    tenant.apply("MemoryForgotten", {"memory_id": "x1"})
    why = justify(tenant.graph, "x1", everything)
    assert why is not None and why["forgotten"] and why["evidence"]["conversation_id"] == "conv-7"


@pytest.mark.parametrize(
    ("evidence", "reason"),
    [
        ({"conversation_id": "conv-7", "turn_ids": []}, "evidence.turn_ids must name 1 to 64 turns, got 0"),
        ({"conversation_id": "c", "turn_ids": [f"t{i}" for i in range(65)]}, "got 65"),
        ({"conversation_id": "no spaces", "turn_ids": ["t1"]}, "evidence.conversation_id must match"),
        ({"conversation_id": "c", "turn_ids": ["t 1"]}, "evidence.turn_ids must match"),
        ({"conversation_id": "c", "turn_ids": "t1"}, "evidence.turn_ids must be a list"),
        ("c", "evidence must be an object"),
    ],
)
def test_evidence_is_checked(evidence: object, reason: str) -> None:
    with pytest.raises(InvalidEvent, match=reason):
        event("MemoryRemembered", remembered("x1", evidence=evidence))


def test_a_memory_written_before_evidence_existed_still_decodes() -> None:
    old = [s for s in codec.history_schemas().values() if "Evidence" not in str(s)]
    assert old, "the history holds the envelope from before evidence"
    written = codec.encode(event("MemoryRemembered", remembered("m0")), schema=old[-1])
    payload = codec.decode(written).payload
    assert isinstance(payload, MemoryRemembered) and payload.evidence is None
    with_evidence = event("MemoryRemembered", remembered("x1", evidence=EVIDENCE))
    assert codec.decode(codec.encode(with_evidence)).payload == with_evidence.payload
