"""REALTALK (LoCoMo format) as engram sees it: every turn one memory, every question a recall.

Used by ``bench/recall.py`` (the quality table) and by the integration tests (a quality floor).
Each chat is one tenant; a turn's memory id is derived from its ``dia_id`` (``D3:12`` →
``D3.12``); the metric, per question, is the fraction of its gold evidence turns among the top k,
averaged per category.
"""

from __future__ import annotations

import json
import os
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
# Where REALTALK is: ENGRAM_REALTALK_DIR, else beside the checkout (../shared/data/realtalk), else
# the workplace's copy; a clone elsewhere on the same machine still finds it.
CANDIDATES = (REPO.parent / "shared" / "data" / "realtalk", Path("/work/shared/data/realtalk"))


def data_dir() -> Path:
    given = os.environ.get("ENGRAM_REALTALK_DIR")
    for path in ([Path(given)] if given else []) + list(CANDIDATES):
        if any(path.glob("Chat_*.json")):
            return path
    raise FileNotFoundError(
        "REALTALK not found: set ENGRAM_REALTALK_DIR to the directory of its Chat_*.json files "
        f"(looked in {', '.join(str(p) for p in CANDIDATES)})"
    )


EVIDENCE = re.compile(r"D(\d+):(\d+)")


@dataclass(frozen=True)
class Turn:
    dia_id: str
    speaker: str
    text: str
    when: datetime

    @property
    def memory_id(self) -> str:
        return self.dia_id.replace(":", ".")


@dataclass(frozen=True)
class Question:
    text: str
    category: int
    evidence: frozenset[str]  # memory ids


@dataclass(frozen=True)
class Chat:
    tenant: str
    turns: tuple[Turn, ...]
    questions: tuple[Question, ...]


def _when(text: str) -> datetime:
    return datetime.strptime(text, "%d.%m.%Y, %H:%M:%S").replace(tzinfo=UTC)


def evidence_ids(items: Iterable[str], known: set[str]) -> frozenset[str]:
    """Gold turn ids as memory ids; the data writes some as ranges (``D12:3-D12:5``) or lists."""
    out: set[str] = set()
    for item in items:
        for part in re.split(r"[;,]\s*|\s+", item):
            found = EVIDENCE.findall(part)
            if "-" in part and len(found) == 2 and found[0][0] == found[1][0]:
                session, lo, hi = found[0][0], int(found[0][1]), int(found[1][1])
                out |= {f"D{session}.{n}" for n in range(lo, hi + 1)}
            else:
                out |= {f"D{s}.{n}" for s, n in found}
    return frozenset(out & known)


def load_chat(path: Path, tenant: str) -> Chat:
    data = json.loads(path.read_text())
    turns = []
    for key, value in data.items():
        if re.fullmatch(r"session_\d+", key) and isinstance(value, list):
            for t in value:
                text = (t.get("clean_text") or t.get("text") or "").strip()
                if text:
                    turns.append(Turn(t["dia_id"], t["speaker"], text, _when(t["date_time"])))
    known = {t.memory_id for t in turns}
    questions = []
    for qa in data.get("qa", []):
        gold = evidence_ids(qa.get("evidence", []), known)
        if gold and qa.get("question"):
            questions.append(Question(qa["question"], int(qa.get("category", 0)), gold))
    return Chat(tenant, tuple(turns), tuple(questions))


def load_chats(directory: Path | None = None, names: Sequence[str] | None = None) -> list[Chat]:
    directory = directory or data_dir()
    files = sorted(directory.glob("Chat_*.json"), key=lambda p: int(p.name.split("_")[1]))
    chats = []
    for path in files:
        number = path.name.split("_")[1]
        if names is None or path.name in names or number in names:
            chats.append(load_chat(path, f"realtalk-{number}"))
    return chats


def remember_lines(chat: Chat) -> list[dict[str, Any]]:
    """One MemoryRemembered per turn, as ``engram produce`` reads them; valid time is the turn's."""
    return [
        {
            "type": "MemoryRemembered",
            "tenant": chat.tenant,
            "source": "extraction",
            "actor": {"id": "realtalk-import", "role": "operator"},
            "occurred_at": t.when.isoformat(),
            "payload": {
                "memory_id": t.memory_id,
                "label": f"{t.speaker} on {t.when:%d %B %Y}",
                "content": t.text,
                "kind": "fact",
                "scope": "company",
                "importance": 3,
                "confidence": 1.0,
            },
        }
        for t in chat.turns
    ]


def recall_at(ranked: Sequence[str], gold: frozenset[str], k: int) -> float:
    return len(set(ranked[:k]) & gold) / len(gold)


def summarise(
    scores: Iterable[tuple[int, list[str], frozenset[str]]], ks: Sequence[int] = (5, 10)
) -> dict[str, Any]:
    """``{"all": {"R@5": …, "R@10": …, "n": …}, "category 1": …}`` from (category, ranked, gold)."""
    by: dict[str, list[tuple[list[str], frozenset[str]]]] = defaultdict(list)
    for category, ranked, gold in scores:
        by["all"].append((ranked, gold))
        by[f"category {category}"].append((ranked, gold))
    return {
        name: {
            **{f"R@{k}": round(sum(recall_at(r, g, k) for r, g in rows) / len(rows), 4) for k in ks},
            "n": len(rows),
        }
        for name, rows in sorted(by.items())
    }
