"""The default extractor: regular expressions over what people said, no model and no network.

Capture must not cost an LLM call per message (issue #25), so the default reads the typed memories
of the ontology straight out of the words: a target on a metric the ontology defines, a spend cap
on an ad platform, the recruiting classes, and "always/never/prefer" rules and durable "our/we"
statements as plain preferences and facts. It is deliberately cautious: a question, a hypothetical,
a past or retracted statement, chit-chat and anything an assistant said yields nothing, since a
missed memory can be said again but a wrong one is acted on. Its figures on the labelled set
(tests/extraction/utterances.jsonl) are in docs/capture.md.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from engram.projections.knowledge import Knowledge, load_knowledge
from engram.schemas import vocabulary as v
from engram.streams.extraction import lexicon as lx
from engram.streams.extraction.extractor import Candidate, Known, Turn
from engram.streams.extraction.numbers import Amount, amounts
from engram.streams.extraction.scoring import same_memory

_I = re.IGNORECASE


@dataclass(frozen=True)
class _Found:
    memory_class: str
    kind: str
    properties: dict[str, Any]
    label: str
    content: str
    reason: str
    confidence: float = lx.TYPED_CONFIDENCE


def _alternation(names: Iterable[str]) -> str:
    return "|".join(re.escape(n).replace(r"\ ", r"[\s-]+") for n in sorted(set(names), key=len, reverse=True))


class PatternExtractor:
    """Turns → typed candidates by regular expressions compiled once from the ontology's metrics."""

    name = "patterns"

    def __init__(self, knowledge: Knowledge | None = None, *, roles: Sequence[str] = ("user",)) -> None:
        self.knowledge = knowledge or load_knowledge()
        self.roles = frozenset(roles)
        spellings: dict[str, set[str]] = {}
        for t in self.knowledge.ontology.triples:
            if t.predicate.value == lx.METRIC_NAME:
                name = t.object.value
                spellings.setdefault(name, set()).update({name, name.replace("_", " ")})
        for t in self.knowledge.ontology.triples:  # rdfs:label of a metric definition
            if t.predicate.value == lx.RDFS_LABEL:
                for name in spellings:
                    if t.subject.value == v.ENGRAM + name:
                        spellings[name].add(t.object.value.lower())
        for name, extra in lx.METRIC_SPELLINGS.items():
            if name in spellings:
                spellings[name].update(extra)
        self._metric_of = {s.lower(): name for name, ss in spellings.items() for s in ss}
        self._metric = re.compile(rf"\b(?:{_alternation(self._metric_of)})\b", _I)
        self._platform_of = {s: p for p, ss in lx.PLATFORMS.items() for s in ss}
        self._platform = re.compile(rf"\b(?:{_alternation(self._platform_of)})\b", _I)
        self._periods = [(p, re.compile(rx, _I)) for p, rx in lx.PERIODS]
        self._skills = [(s, re.compile(rf"(?<![\w+#])(?:{rx})(?![\w+#])", _I)) for s, rx in lx.SKILLS.items()]

    async def extract(self, turns: Sequence[Turn], known: Sequence[Known]) -> list[Candidate]:
        return self.extract_sync(turns, known)

    def extract_sync(self, turns: Sequence[Turn], known: Sequence[Known]) -> list[Candidate]:
        """The candidates of ``turns`` in order, less those a ``known`` memory already states."""
        out: list[Candidate] = []
        for turn in turns:
            if turn.role not in self.roles:
                continue
            for found in self.find(turn.text):
                memory = {
                    "label": found.label[: v.LABEL_MAX],
                    "content": found.content,
                    "kind": found.kind,
                    "importance": lx.IMPORTANCE[found.kind],
                    "confidence": found.confidence,
                    "memory_class": found.memory_class,
                    "properties": found.properties,
                }
                if any(same_memory(self.knowledge, memory, k) for k in known):
                    continue
                if any(same_memory(self.knowledge, memory, c.memory) for c in out):
                    continue
                out.append(Candidate(memory=memory, evidence=(turn.turn_id,), reason=found.reason))
        return out

    # -- one utterance --------------------------------------------------------------------------
    def find(self, text: str) -> list[_Found]:
        """What one utterance states, sentence by sentence."""
        out: list[_Found] = []
        for raw in lx.SENTENCE.split(text.strip()):
            sentence = lx.LEAD.sub("", raw.strip()).strip()
            if not sentence or lx.QUESTION.search(sentence) or lx.HYPOTHETICAL.search(sentence):
                continue
            if lx.RETRACTED.search(sentence) or (lx.CHITCHAT.search(sentence) and len(sentence.split()) < 6):
                continue
            content = _sentence_case(sentence)
            found = self._assessments(sentence, content)
            if not found and not lx.TENTATIVE.search(sentence):
                found = self._typed(sentence, content)
            if not found and not (lx.TENTATIVE.search(sentence) or lx.PAST.search(sentence)):
                if not lx.ONE_OFF.search(sentence) or lx.RULE_START.match(sentence):
                    found = self._generic(sentence, content)
            elif found:  # "cap TikTok at $10k a month, and never run ads on weekends": the rule too
                clauses = lx.CLAUSE.split(sentence)
                found += [g for c in clauses if not self._typed(c, content) for g in self._rules(c)]
            out.extend(found)
        return out

    def _typed(self, sentence: str, content: str) -> list[_Found]:
        clauses = [c for c in lx.CLAUSE.split(sentence) if c.strip()]
        live = [c for c in clauses if not lx.PAST.search(c)]
        out: list[_Found] = []
        for clause in live:
            consumed: set[int] = set()
            numbers = amounts(clause)
            out.extend(self._targets(clause, content, numbers, consumed))
            out.extend(self._budgets(clause, sentence, content, numbers, consumed))
            out.extend(self._sourcing(clause, content))
        if not out:
            out.extend(self._criteria(sentence, content))
        if not out and lx.BRAND_VOICE.search(sentence) and not lx.PAST.search(sentence):
            out.append(self._domain(sentence, "preference", content, "patterns:brand-voice"))
        return out

    def _targets(self, clause: str, content: str, numbers: list[Amount], consumed: set[int]) -> list[_Found]:
        mentions = list(self._metric.finditer(clause))
        stops = [m.start() for m in mentions[1:]] + [len(clause)] if mentions else []
        out = []
        for mention, stop in zip(mentions, stops, strict=True):
            window = [a for a in numbers if mention.end() <= a.start < stop and a.start not in consumed]
            if not window and mention is mentions[-1]:  # "Btw we want it below $40": the cue after
                window = [a for a in numbers if a.start >= mention.end() and a.start not in consumed]
            if not window:
                continue
            goal = window[0]
            between = clause[mention.end() : goal.start]
            if not lx.TARGET_CUE.search(clause[: goal.start]) or re.search(
                r"\b(?:is at|reached)\b", between, _I
            ):
                continue
            consumed.add(goal.start)
            metric = self._metric_of[re.sub(r"[\s-]+", " ", mention.group(0).lower())]
            out.append(
                _Found(
                    "PerformanceTargetMemory",
                    "objective",
                    {"metric": metric, "goal": goal.number},
                    f"{metric.upper() if len(metric) <= 4 else metric.replace('_', ' ')} target",
                    content,
                    "patterns:performance-target",
                )
            )
        return out

    def _budgets(
        self, clause: str, sentence: str, content: str, numbers: list[Amount], consumed: set[int]
    ) -> list[_Found]:
        platform = self._platform.search(clause) or self._platform.search(sentence)
        if platform is None or not lx.BUDGET_CUE.search(sentence):
            return []
        money = [
            a for a in numbers if a.start not in consumed and not a.percent and (a.scaled or a.value >= 100)
        ]
        if not money:
            return []
        if platform.string is clause:  # the amount nearest the platform's mention
            money.sort(key=lambda a: min(abs(a.start - platform.end()), abs(platform.start() - a.end)))
        amount = money[0]
        consumed.add(amount.start)
        name = self._platform_of[re.sub(r"[\s-]+", " ", platform.group(0).lower())]
        props: dict[str, Any] = {
            "platform": name,
            "amount": amount.number,
            "currency": amount.currency or "USD",
        }
        period = self._period(clause) or self._period(sentence)
        if period:
            props["period"] = period
        title = (
            "Total" if name == "all" else platform.group(0).strip().title() if len(name) > 3 else name.upper()
        )
        label = f"{title} {period + 'ly ' if period and period != 'day' else 'daily ' if period else ''}cap"
        return [_Found("BudgetConstraintMemory", "objective", props, label, content, "patterns:budget-cap")]

    def _period(self, text: str) -> str | None:
        for period, rx in self._periods:
            if rx.search(text):
                return period
        return None

    def _sourcing(self, clause: str, content: str) -> list[_Found]:
        if not lx.RECRUIT_NOUN.search(clause):
            return []
        for rx in lx.SOURCING:
            if m := rx.search(clause):
                channel = re.sub(r"\s+", " ", m.group("channel")).strip(" .").lower()
                channel = re.sub(r"^(?:the|our)\s+", "", channel)
                return [
                    _Found(
                        "SourcingPreferenceMemory",
                        "preference",
                        {"channel": channel},
                        f"Sourcing: {channel}",
                        content,
                        "patterns:sourcing",
                    )
                ]
        return []

    def _criteria(self, sentence: str, content: str) -> list[_Found]:
        if not lx.CRITERIA_CUE.search(sentence):
            return []
        for rx in lx.ROLE_PATTERNS:
            if m := rx.search(sentence):
                role = _role(m.group("role"))
                if not role or role in {"we", "i", "you", "they"}:
                    continue
                rest = sentence[m.end() :]
                skills = [s for s, srx in self._skills if srx.search(rest)]
                if skills:
                    return [
                        _Found(
                            "TechnicalHiringCriteriaMemory",
                            "preference",
                            {"role": role, "skill": s},
                            f"{role.capitalize()}: {s}",
                            content,
                            "patterns:technical-hiring-criteria",
                        )
                        for s in skills
                    ]
                return [
                    _Found(
                        "HiringCriteriaMemory",
                        "preference",
                        {"role": role},
                        f"{role.capitalize()} criteria",
                        content,
                        "patterns:hiring-criteria",
                    )
                ]
        return []

    def _assessments(self, sentence: str, content: str) -> list[_Found]:
        for rx in lx.ASSESSMENTS:
            if m := rx.search(sentence):
                groups = m.groupdict()
                rating = int(groups["r"]) if groups.get("r") else lx.VERBAL_RATING[groups["verbal"].lower()]
                name = m.group("name")
                return [
                    _Found(
                        "CandidateAssessmentMemory",
                        "fact",
                        {"candidate": name, "rating": rating},
                        f"Assessment: {name}",
                        content,
                        "patterns:candidate-assessment",
                    )
                ]
        return []

    def _generic(self, sentence: str, content: str) -> list[_Found]:
        for clause in (c.strip() for c in lx.CLAUSE.split(sentence)):
            if rules := self._rules(clause):
                return rules
            if len(clause.split()) >= 3 and lx.FACT.match(clause) and lx.FACT_VERB.search(clause):
                return [self._domain(clause, "fact", content, "patterns:durable-statement")]
        return []

    def _rules(self, clause: str) -> list[_Found]:
        """An "always/never/prefer" rule: a preference of the most specific class that fits."""
        clause = lx.LEAD.sub("", clause.strip()).strip()
        if len(clause.split()) < 3 or lx.PAST.search(clause):
            return []
        rule = lx.PREFERENCE.match(clause)
        if rule and (rule.group("verb") and lx.NOT_A_RULE.match(rule.group("verb"))):
            rule = None
        if rule and rule.group("weverb") and lx.WE_NOT_HABIT.match(rule.group("weverb")):
            rule = None
        if rule or lx.DURABLE_IMPERATIVE.match(clause):
            return [self._domain(clause, "preference", _sentence_case(clause), "patterns:preference")]
        return []

    def _domain(self, clause: str, kind: str, content: str, reason: str) -> _Found:
        """The most specific class a generic statement fits: brand voice, marketing, recruiting, or Memory."""
        label = _short_label(content)
        if kind == "preference" and re.search(lx.VOICE_WORDS, clause, _I):
            tone = lx.TONE.search(clause)
            props = {"tone": tone.group("tone").strip()} if tone else {}
            return _Found("BrandVoiceMemory", kind, props, label, content, reason, lx.GENERIC_CONFIDENCE)
        if re.search(lx.MARKETING_WORDS, clause, _I) or self._platform.search(clause):
            return _Found("MarketingMemory", kind, {}, label, content, reason, lx.GENERIC_CONFIDENCE)
        if re.search(lx.RECRUITING_WORDS, clause, _I):
            return _Found("RecruitingMemory", kind, {}, label, content, reason, lx.GENERIC_CONFIDENCE)
        return _Found("Memory", kind, {}, label, content, reason, lx.GENERIC_CONFIDENCE)


def _role(text: str) -> str:
    role = re.sub(r"\s+", " ", text).strip().lower()
    role = re.sub(r"^(?:the|our|a|an|for the)\s+", "", role)
    words = role.split()
    if words and words[-1].endswith("s") and not words[-1].endswith(("ss", "ops", "sales")):
        words[-1] = words[-1][:-1]  # "platform engineers" → "platform engineer"
    return " ".join(words)


def _sentence_case(text: str) -> str:
    text = re.sub(r"\s+", " ", text).strip()
    text = text[:1].upper() + text[1:]
    return text if text.endswith((".", "!", "?")) else text + "."


def _short_label(content: str) -> str:
    words = content.rstrip(".!").split()
    return " ".join(words[:6]) + ("…" if len(words) > 6 else "")
