"""The default extractor's contract: what a candidate holds, whose turns it reads, what it skips."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from engram.streams.extraction.extractor import Known, Turn
from engram.streams.extraction.patterns import PatternExtractor

AT = datetime(2026, 12, 5, tzinfo=UTC)


def turn(text: str, role: str = "user", n: int = 1) -> Turn:
    return Turn("conv-1", f"turn-{n}", n, "dana", role, text, AT)


def test_a_cap_becomes_a_budget_constraint_with_its_evidence() -> None:
    [c] = asyncio.run(PatternExtractor().extract([turn("don't let Meta spend go over $40k this month")], []))
    assert c.memory["memory_class"] == "BudgetConstraintMemory"
    assert c.memory["properties"] == {
        "platform": "meta",
        "amount": 40000,
        "currency": "USD",
        "period": "month",
    }
    assert (c.memory["kind"], c.memory["importance"], c.memory["confidence"]) == ("objective", 4, 0.8)
    assert c.evidence == ("turn-1",) and c.reason == "patterns:budget-cap"
    assert c.memory["label"] and c.memory["content"].endswith(".")


def test_assistant_and_system_turns_are_not_mined_unless_asked() -> None:
    said = [
        turn("Got it, I'll keep ROAS above 3.", role="assistant"),
        turn("keep ROAS above 3", role="system", n=2),
    ]
    assert PatternExtractor().extract_sync(said, []) == []
    [c] = PatternExtractor(roles=("assistant",)).extract_sync(said[:1], [])
    assert c.memory["properties"] == {"metric": "roas", "goal": 3}


def test_a_known_memory_with_the_same_key_is_not_repeated_but_a_new_value_is() -> None:
    known = [
        Known(
            "m1",
            "ROAS target",
            "Keep ROAS above 3.",
            "PerformanceTargetMemory",
            {"metric": "roas", "goal": 3.0},
        )
    ]
    extractor = PatternExtractor()
    assert extractor.extract_sync([turn("Keep ROAS above 3 please.")], known) == []
    [c] = extractor.extract_sync([turn("Keep ROAS above 3.5 from now on.")], known)
    assert c.memory["properties"]["goal"] == 3.5


def test_a_restated_preference_is_skipped_by_its_content() -> None:
    known = [Known("m2", "Summaries", "I prefer short bullet-point summaries.", "Memory")]
    assert PatternExtractor().extract_sync([turn("I prefer short bullet-point summaries")], known) == []


def test_the_same_memory_said_twice_in_a_tail_is_proposed_once_citing_the_first_turn() -> None:
    turns = [turn("keep ROAS above 3"), turn("yes, keep ROAS above 3", n=2)]
    [c] = PatternExtractor().extract_sync(turns, [])
    assert c.evidence == ("turn-1",)
