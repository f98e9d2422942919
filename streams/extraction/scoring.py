"""When two memories say the same thing, and how well an extractor does against a labelled set.

"The same" is decided by the shapes, not by a list kept here: two memories of one class agree
when every property the class requires (sh:minCount >= 1 on the class or a superclass, e.g.
metric and goal of a target) is equal, numbers as numbers and text case-blind. A class that
requires no property (Memory, MarketingMemory, BrandVoiceMemory...) has no key, so its kind is
compared when scoring (a preference is not a fact) and its content when looking for a repeat.
The extractor uses :func:`same_memory` to skip what a known memory already says; the labelled-set
test and ``bench/extraction_quality.py`` use :func:`score`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engram.projections.knowledge import Knowledge
from engram.schemas import vocabulary as v
from engram.streams.extraction.extractor import Known

_KEYS: dict[tuple[str, str], tuple[str, ...]] = {}  # (knowledge digest, class) -> keys: a pure cache


def _keys(knowledge: Knowledge, memory_class: str) -> tuple[str, ...]:
    cls = v.class_iri(memory_class or "Memory")
    names: set[str] = set()
    for target in knowledge.ontology.superclasses.get(cls, {cls}):
        for node in knowledge.shapes.by_class.get(target, []):
            for prop in node.properties:
                local = prop.path.removeprefix(v.ENGRAM)
                if prop.min_count >= 1 and local != prop.path and not knowledge.reserved(local):
                    names.add(local)
    return tuple(sorted(names))


def key_properties(knowledge: Knowledge, memory_class: str) -> tuple[str, ...]:
    """The properties that identify a memory of ``memory_class``: the ones its shapes require."""
    key = (knowledge.digest, memory_class)
    if key not in _KEYS:
        _KEYS[key] = _keys(knowledge, memory_class)
    return _KEYS[key]


def same_value(a: Any, b: Any) -> bool:
    """Numbers as numbers (3 == 3.0), text without case or surrounding space."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return abs(float(a) - float(b)) <= 1e-9 * max(1.0, abs(float(a)))
    if isinstance(a, str) and isinstance(b, str):
        return _norm(a) == _norm(b)
    return bool(a == b)


def _norm(text: str) -> str:
    return re.sub(r"[\W_]+", " ", text.casefold()).strip()


def _class(memory: Mapping[str, Any] | Known) -> str:
    name = memory.memory_class if isinstance(memory, Known) else memory.get("memory_class")
    return (name or "Memory").removeprefix(v.ENGRAM)


def _get(memory: Mapping[str, Any] | Known, name: str) -> Any:
    return getattr(memory, name) if isinstance(memory, Known) else memory.get(name)


def same_key(knowledge: Knowledge, a: Mapping[str, Any] | Known, b: Mapping[str, Any] | Known) -> bool:
    """Same class and same required properties; for a class with none, the same kind."""
    if _class(a) != _class(b):
        return False
    keys = key_properties(knowledge, _class(a))
    if not keys:
        ka = None if isinstance(a, Known) else a.get("kind")
        kb = None if isinstance(b, Known) else b.get("kind")
        return ka is None or kb is None or ka == kb
    pa, pb = _get(a, "properties") or {}, _get(b, "properties") or {}
    return all(k in pa and k in pb and same_value(pa[k], pb[k]) for k in keys)


def same_memory(knowledge: Knowledge, a: Mapping[str, Any] | Known, b: Mapping[str, Any] | Known) -> bool:
    """Whether ``a`` restates ``b``: the same key, and for a class without one the same content."""
    if not same_key(knowledge, a, b):
        return False
    if key_properties(knowledge, _class(a)):
        return True
    return _norm(str(_get(a, "content") or "")) == _norm(str(_get(b, "content") or ""))


@dataclass
class ClassScore:
    true_positives: int = 0
    false_positives: int = 0
    false_negatives: int = 0

    @property
    def support(self) -> int:
        return self.true_positives + self.false_negatives

    @property
    def precision(self) -> float:
        found = self.true_positives + self.false_positives
        return self.true_positives / found if found else 1.0

    @property
    def recall(self) -> float:
        return self.true_positives / self.support if self.support else 1.0


@dataclass
class Score:
    """Per-class counts, and the misses for a reader to look at."""

    by_class: dict[str, ClassScore] = field(default_factory=dict)
    misses: list[dict[str, Any]] = field(default_factory=list)

    def _row(self, name: str) -> ClassScore:
        return self.by_class.setdefault(name, ClassScore())

    @property
    def micro(self) -> ClassScore:
        total = ClassScore()
        for s in self.by_class.values():
            total.true_positives += s.true_positives
            total.false_positives += s.false_positives
            total.false_negatives += s.false_negatives
        return total

    def as_dict(self) -> dict[str, Any]:
        def row(s: ClassScore) -> dict[str, Any]:
            return {
                "precision": round(s.precision, 3),
                "recall": round(s.recall, 3),
                "support": s.support,
                "tp": s.true_positives,
                "fp": s.false_positives,
                "fn": s.false_negatives,
            }

        return {
            "per_class": {name: row(s) for name, s in sorted(self.by_class.items())},
            "micro": row(self.micro),
        }

    def table(self) -> str:
        lines = [f"{'class':34} {'precision':>9} {'recall':>7} {'support':>7} {'fp':>4} {'fn':>4}"]
        for name, s in [*sorted(self.by_class.items()), ("micro", self.micro)]:
            lines.append(
                f"{name:34} {s.precision:9.3f} {s.recall:7.3f} {s.support:7d} "
                f"{s.false_positives:4d} {s.false_negatives:4d}"
            )
        return "\n".join(lines)


def score(
    knowledge: Knowledge, rows: Iterable[tuple[str, Sequence[Mapping[str, Any]], Sequence[Mapping[str, Any]]]]
) -> Score:
    """Precision and recall per class over (text, expected, found) rows: each expected memory is
    matched by at most one found memory of the same class and key (``same_key``)."""
    out = Score()
    for text, expected, found in rows:
        left = list(found)
        for exp in expected:
            hit = next((f for f in left if same_key(knowledge, exp, f)), None)
            if hit is not None:
                left.remove(hit)
                out._row(_class(exp)).true_positives += 1
            else:
                out._row(_class(exp)).false_negatives += 1
                out.misses.append({"text": text, "missed": dict(exp)})
        for f in left:
            out._row(_class(f)).false_positives += 1
            out.misses.append(
                {"text": text, "spurious": {k: f.get(k) for k in ("memory_class", "kind", "properties")}}
            )
    return out


def load_labelled(path: Path) -> list[dict[str, Any]]:
    """The labelled set: one JSON object a line (text, role, expected)."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
