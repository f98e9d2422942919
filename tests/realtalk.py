"""REALTALK (LoCoMo format) as engram sees it: every turn one memory, every question a recall.

Used by ``bench/recall_quality.py`` and ``bench/recall.py`` (the quality tables) and by the
integration tests (a quality floor). Each chat is one tenant; a turn's memory id is derived from its
``dia_id`` (``D3:12`` → ``D3.12``) and its evidence is its session (``realtalk-1.D3``), as an
extracted memory's is its conversation; the metric, per question, is the fraction of its gold
evidence turns among the top k (and the reciprocal rank of the first), averaged per category.

The chats are split once, here, so the split is reproducible: ranking is tuned on ``DEV`` only and
``HELD_BACK`` is only ever reported (a figure fitted to the data it is measured on says nothing).
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
# Where REALTALK's Chat_*.json files are when no directory is given: ENGRAM_REALTALK_DIR, else the
# checkout's own data directory (``.engram/realtalk``, beside what ./dev keeps; not in git).
DEFAULT_DIR = REPO / ".engram" / "realtalk"


def data_dir(given: Path | None = None) -> Path:
    """The REALTALK directory: ``given``, else ENGRAM_REALTALK_DIR, else ``DEFAULT_DIR``;
    ``FileNotFoundError`` (saying how to point at it) if it holds no chat."""
    path = given or Path(os.environ.get("ENGRAM_REALTALK_DIR") or DEFAULT_DIR)
    if not any(path.glob("Chat_*.json")):
        raise FileNotFoundError(
            f"REALTALK not found in {path}: set ENGRAM_REALTALK_DIR to the directory of its "
            f"Chat_*.json files (or put them in {DEFAULT_DIR})"
        )
    return path


def available() -> bool:
    """Whether REALTALK is where ``data_dir`` looks (the tests that read it skip when not)."""
    try:
        data_dir()
    except FileNotFoundError:
        return False
    return True


DEV: tuple[str, ...] = ("1", "2", "3", "4", "5", "6")  # chat numbers ranking is tuned on
HELD_BACK: tuple[str, ...] = ("7", "8", "9", "10")  # reported, never tuned on
SPLITS: dict[str, tuple[str, ...]] = {"dev": DEV, "held-back": HELD_BACK}
# LoCoMo's question categories (REALTALK uses the first three)
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}

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

    @property
    def session(self) -> str:
        return self.dia_id.split(":", 1)[0]


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
    directory = data_dir(directory)
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
                "evidence": {"conversation_id": f"{chat.tenant}.{t.session}", "turn_ids": [t.memory_id]},
            },
        }
        for t in chat.turns
    ]


def recall_at(ranked: Sequence[str], gold: frozenset[str], k: int) -> float:
    return len(set(ranked[:k]) & gold) / len(gold)


def reciprocal_rank(ranked: Sequence[str], gold: frozenset[str]) -> float:
    return next((1.0 / i for i, memory_id in enumerate(ranked, start=1) if memory_id in gold), 0.0)


def summarise(
    scores: Iterable[tuple[int, list[str], frozenset[str]]], ks: Sequence[int] = (5, 10)
) -> dict[str, Any]:
    """``{"all": {"R@5": …, "R@10": …, "MRR": …, "n": …}, "multi-hop": …}`` from (category,
    ranked, gold); MRR over the ranking given (the top 10 of a default recall)."""
    by: dict[str, list[tuple[list[str], frozenset[str]]]] = defaultdict(list)
    for category, ranked, gold in scores:
        by["all"].append((ranked, gold))
        by[CATEGORIES.get(category, f"category {category}")].append((ranked, gold))
    return {
        name: {
            **{f"R@{k}": round(sum(recall_at(r, g, k) for r, g in rows) / len(rows), 4) for k in ks},
            "MRR": round(sum(reciprocal_rank(r, g) for r, g in rows) / len(rows), 4),
            "n": len(rows),
        }
        for name, rows in sorted(by.items())
    }


def load_split(split: str, directory: Path | None = None) -> list[Chat]:
    """The chats of ``dev`` or ``held-back``."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose one of: {', '.join(SPLITS)}")
    return load_chats(directory, SPLITS[split])
