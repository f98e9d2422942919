"""The deterministic extractor: precision and recall per class on the labelled utterances, and its
speed in process.

Quality is scored on ``tests/extraction/utterances.jsonl`` (labelled before the patterns, then
tuned on) and ``tests/extraction/heldout.jsonl`` (written after the tuning, never tuned against);
a found memory matches an expected one when the class and the properties its shapes require agree
(``streams.extraction.scoring``). Speed is every utterance of both sets as user turns, in tails of
``--tail`` turns (what the workflow hands over), ``--rounds`` times, after one warm-up round.
The target is 1,000 turns/s. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from engram.projections.knowledge import load_knowledge
from engram.streams.extraction.extractor import Turn
from engram.streams.extraction.patterns import PatternExtractor
from engram.streams.extraction.scoring import load_labelled, score

SETS = Path(__file__).resolve().parents[1] / "tests" / "extraction"
AT = datetime(2026, 12, 5, tzinfo=UTC)


def quality(extractor: PatternExtractor, path: Path) -> dict[str, Any]:
    rows = []
    for n, row in enumerate(load_labelled(path)):
        turn = Turn("bench", f"t{n}", n + 1, "someone", row["role"], row["text"], AT)
        rows.append((row["text"], row["expected"], [c.memory for c in extractor.extract_sync([turn], [])]))
    return {"utterances": len(rows), **score(extractor.knowledge, rows).as_dict()}


def speed(extractor: PatternExtractor, texts: list[str], rounds: int, tail: int) -> dict[str, Any]:
    turns = [Turn("bench", f"t{n}", n + 1, "someone", "user", t, AT) for n, t in enumerate(texts)]
    tails = [turns[i : i + tail] for i in range(0, len(turns), tail)]
    for t in tails:  # warm up
        extractor.extract_sync(t, [])
    started = time.perf_counter()
    for _ in range(rounds):
        for t in tails:
            extractor.extract_sync(t, [])
    seconds = time.perf_counter() - started
    n = rounds * len(turns)
    return {
        "turns": n,
        "seconds": round(seconds, 3),
        "turns_per_s": round(n / seconds),
        "target_turns_per_s": 1000,
    }


def main(rounds: int, tail: int) -> dict[str, Any]:
    extractor = PatternExtractor(load_knowledge())
    sets = {name: SETS / f"{name}.jsonl" for name in ("utterances", "heldout")}
    texts = [row["text"] for path in sets.values() for row in load_labelled(path)]
    return {
        "extractor": extractor.name,
        **{name: quality(extractor, path) for name, path in sets.items()},
        "speed": speed(extractor, texts, rounds, tail),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--tail", type=int, default=8)
    args = parser.parse_args()
    print(json.dumps(main(args.rounds, args.tail)))
