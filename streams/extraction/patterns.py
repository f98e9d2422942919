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
from engram.streams.extraction.extractor import Candidate, Known, Turn
from engram.streams.extraction.numbers import Amount, amounts
from engram.streams.extraction.scoring import same_memory

TYPED_CONFIDENCE = 0.8
GENERIC_CONFIDENCE = 0.6
IMPORTANCE = {"objective": 4, "preference": 3, "fact": 2, "context": 2}
METRIC_NAME = v.ENGRAM + "metricName"
RDFS_LABEL = "http://www.w3.org/2000/01/rdf-schema#label"
_I = re.IGNORECASE

# Spellings the ontology's labels do not give, by metricName.
METRIC_SPELLINGS = {
    "roas": ["return on ad spend", "return on advertising spend"],
    "ctr": ["click-through rate", "click through rate", "clickthrough rate"],
    "cpa": ["cost per acquisition", "cost-per-acquisition"],
    "cpc": ["cost per click", "cost-per-click"],
    "cac": ["customer acquisition cost"],
    "conversion_rate": ["conversion rate", "cvr"],
}
PLATFORMS = {
    "meta": ["meta", "facebook", "fb", "instagram"],
    "google": ["google ads", "google", "adwords"],
    "tiktok": ["tiktok", "tik tok"],
    "linkedin": ["linkedin"],
    "snapchat": ["snapchat"],
    "pinterest": ["pinterest"],
    "reddit": ["reddit"],
    "microsoft": ["bing", "microsoft ads"],
    "x": ["twitter", "x ads"],
    "youtube": ["youtube"],
    "amazon": ["amazon ads", "amazon"],
    "all": ["total ad spend", "total spend", "overall ad spend", "all platforms", "all channels"],
}
PERIODS = [
    ("day", r"per day|a day|/day|daily|each day|every day"),
    ("week", r"per week|a week|/w(?:ee)?k|weekly|each week|every week|this week"),
    ("month", r"per month|a month|/mo(?:nth)?\b|monthly|each month|every month|this month|month"),
    ("quarter", r"per quarter|a quarter|quarterly|this quarter|\bq[1-4]\b|quarter"),
    ("year", r"per year|a year|/y(?:ea)?r|yearly|annually|annual|this year|for the year|year"),
]
SKILLS = {
    "python": r"python",
    "go": r"golang|(?-i:\bGo\b)",
    "java": r"java(?!script)",
    "javascript": r"javascript|\bjs\b",
    "typescript": r"typescript",
    "react": r"react",
    "rust": r"rust",
    "swift": r"swift",
    "kotlin": r"kotlin",
    "sql": r"sql(?!ite)",
    "postgresql": r"postgres(?:ql)?",
    "kubernetes": r"kubernetes|k8s",
    "docker": r"docker",
    "terraform": r"terraform",
    "aws": r"aws",
    "gcp": r"gcp",
    "azure": r"azure",
    "spark": r"spark",
    "pytorch": r"pytorch",
    "tensorflow": r"tensorflow",
    "scala": r"scala",
    "ruby": r"ruby",
    "php": r"php",
    "c++": r"c\+\+",
    "kafka": r"kafka",
}
ROLE_NOUN = (
    r"(?:engineers?|developers?|scientists?|analysts?|managers?|leads?|designers?|recruiters?|sre|devops|"
    r"marketers?|representatives?|reps?|executives?|support|architects?|head of \w+|director of \w+)"
)
MARKETING_WORDS = (
    r"\b(?:ads?|advertis\w*|campaigns?|creatives?|bid\w*|keywords?|prospecting|retargeting|audiences?|"
    r"broad match|exact match|impressions|cpm|channel|landing pages?|promos?|promotions?)\b"
)
RECRUITING_WORDS = (
    r"\b(?:candidates?|job posts?|job ads?|jobs?|hir(?:e|es|ing)|interviews?|salary|recruit\w*|"
    r"take-home|applicants?|offers?|live coding)\b"
)
BRAND_VOICE = re.compile(
    r"\b(?:brand voice|tone of voice|our voice|the tone|our tone)\b.*?\b(?:is|be|should|must|keep|stay)\b|"
    r"^keep the tone\b",
    _I,
)
VOICE_WORDS = r"\b(?:brand voice|voice|tone|exclamation marks?|jargon|messaging|second person|copy)\b"

SENTENCE = re.compile(r"(?<=[.!?;])\s+|\n+")
CLAUSE = re.compile(r",?\s+but\s+|,\s+(?:and|also|plus)\s+|\s+and\s+(?=(?:always|never|don't|do not)\b)", _I)
QUESTION = re.compile(
    r"\?\s*$|^(?:what|how|why|when|where|who|which)\b|"
    r"^(?:should|could|would|can|do|does|did|is|are|will|shall)\s+(?:we|you|i|they|it|our|the|a|this|there)\b",
    _I,
)
HYPOTHETICAL = re.compile(r"^(?:what if|imagine|suppose|maybe|perhaps|i wonder|if)\b|\bwhat if\b", _I)
RETRACTED = re.compile(
    r"\b(?:any ?more|no longer|not true|never said|forget (?:the|about)|(?:don't|do not) need to|"
    r"there is no|there's no|scrap the|drop the)\b",
    _I,
)
PAST = re.compile(
    r"\b(?:used to|last (?:year|month|week|quarter|time)|previously|yesterday|was|were|back in|spent|"
    r"hired|ago|had|came in|hit \$?\d)",
    _I,
)
TENTATIVE = re.compile(r"\b(?:probably|might|perhaps|i think|i guess|someday|would be nice|not sure)\b", _I)
ONE_OFF = re.compile(
    r"\b(?:today|tonight|tomorrow|right now|this afternoon|by (?:monday|tuesday|wednesday|thursday|friday)|"
    r"send me|show me|draft|pause the|move \$?\d)",
    _I,
)
CHITCHAT = re.compile(
    r"\b(?:lol|lmao|haha\w*|thanks|thank you|good morning|hi there|hello|have a great|brb)\b|"
    r"^(?:ok|okay|cool|nice|great|sure|yes|no|yep|nope)\b[\s,.!]*$",
    _I,
)
LEAD = re.compile(
    r"^(?:(?:ok(?:ay)?|so|also|and|btw|by the way|please|great work|going forward|from now on|"
    r"for the record|fyi|two things|one thing)\b[\s,:.!-]*)+",
    _I,
)
TARGET_CUE = re.compile(
    r"\b(?:keep|target|goal|aim|hit|must|should|need|needs|want|has to|have to|stay|hold|bar|at least|"
    r"at or above|at or below|at most|above|below|under|over|north of|south of|or better|or less|"
    r"not exceed|drop below|go over)\b|[<>≥≤]",
    _I,
)
BUDGET_CUE = re.compile(
    r"\b(?:spend|spending|budget|cap|capped|max|maximum|limit|ceiling|exceed|go over|go above|"
    r"more than|up to|at most|under|below|gets)\b",
    _I,
)
PREFERENCE = re.compile(
    r"^(?:(?P<rule>always|never|don't ever|do not ever|avoid)\s+(?P<verb>[a-z/-]+)|"
    r"(?P<we>we) (?:always|never) (?P<weverb>[a-z]+)|"
    r"(?:i|we)(?:'d| would)? (?:prefer|rather)\b(?! not to)|(?:my|our) preference is|"
    r"i like (?:my|our|to|it when)|prefer\b)",
    _I,
)
RULE_START = re.compile(r"^(?:always|never|don't ever|do not ever)\b", _I)
NOT_A_RULE = re.compile(r"^(?:mind|again|a|happy|the|so|been|ever|really)$", _I)
WE_NOT_HABIT = re.compile(r"^(?:have|had|get|feel|enjoy|love|hate|seem|forget|know|laugh)$", _I)
DURABLE_IMPERATIVE = re.compile(r"^use\b.*\b(?:in everything|in all|everywhere|always|going forward)\b", _I)
FACT = re.compile(
    r"^(?:our|we(?:'re| are)|we (?:sell|use|have|only|don't sell|do not sell|ship|serve|operate|run)|"
    r"the \w+ team|most of our)\b",
    _I,
)
FACT_VERB = re.compile(
    r"\b(?:is|are|'re|has|have|sell|sells|use|uses|starts?|begins?|ends?|closes?|ship|ships|serve|"
    r"find|finds|operate|run)\b",
    _I,
)
ASSESSMENT_NAME = r"(?P<name>(?-i:[A-Z][a-z]+(?: [A-Z][a-z]+)+))"
ASSESSMENTS = [
    re.compile(
        ASSESSMENT_NAME + r"\W{1,3}(?:was |is |gets |got )?(?:a )?(?P<r>[1-5])\s*(?:/|out of)\s*5", _I
    ),
    re.compile(r"(?:rate|rated|scored?|give|gave)\s+" + ASSESSMENT_NAME + r"\s+(?:an? )?(?P<r>[1-5])\b", _I),
    re.compile(r"rating for " + ASSESSMENT_NAME + r"\W{1,3}(?P<r>[1-5])\b", _I),
    re.compile(
        ASSESSMENT_NAME + r" is an? (?P<verbal>strong hire|strong yes|strong no(?: hire)?|no hire|hire)\b", _I
    ),
]
VERBAL_RATING = {
    "strong hire": 5,
    "strong yes": 5,
    "hire": 4,
    "no hire": 2,
    "strong no": 1,
    "strong no hire": 1,
}
ROLE_PATTERNS = [
    re.compile(r"\bfor (?:the|our|a|an) (?P<role>[\w +/-]+?) (?:role|position|opening|job|hire|req)\b", _I),
    re.compile(
        r"\bthe (?P<role>[\w +/-]+?) (?:role|position|opening|job) (?:requires|needs|must|should)\b", _I
    ),
    re.compile(r"^(?:our )?(?P<role>[\w +/-]+?) (?:candidates|hires|applicants) (?:must|need|should)\b", _I),
    re.compile(rf"^(?:our |the )?(?P<role>(?:[\w+/-]+ ){{0,3}}{ROLE_NOUN}) (?:must|should|needs?)\b", _I),
]
CRITERIA_CUE = re.compile(r"\b(?:need|needs|require|requires|required|must|should|want|is a must)\b", _I)
RECRUIT_NOUN = re.compile(
    r"\b(?:engineers?|developers?|designers?|candidates?|hires?|talent|roles?|jobs?|positions?|openings?)\b",
    _I,
)
CHANNEL = r"(?P<channel>[A-Za-z][\w.]*(?: (?-i:[A-Z])[\w.]*)*|referrals?)"
SOURCING = [
    re.compile(r"\b(?:source|sourcing|find|recruit|get|hire)\b.*?\b(?:from|through|via|on)\s+" + CHANNEL, _I),
    re.compile(
        r"\bpost(?:ing)? (?:[\w-]+ ){0,2}(?:jobs|roles|openings|positions|vacancies) (?:on|to)\s+" + CHANNEL,
        _I,
    ),
    re.compile(r"^use\s+" + CHANNEL + r" for\b.*\b(?:candidates|hires|roles|talent)\b", _I),
    re.compile(
        r"^(?P<channel>[\w ]+?) (?:work|works|are|is) (?:best|great|well) for "
        r"(?:our )?[\w -]*(?:roles|hires|positions)\b",
        _I,
    ),
]
TONE = re.compile(
    r"\b(?:voice|tone)\b(?: (?:is|should (?:always )?be|must be|:))?\s+"
    r"(?P<tone>[a-z][a-z ]*?)(?=,|;|\.| in | no |$)",
    _I,
)


@dataclass(frozen=True)
class _Found:
    memory_class: str
    kind: str
    properties: dict[str, Any]
    label: str
    content: str
    reason: str
    confidence: float = TYPED_CONFIDENCE


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
            if t.predicate.value == METRIC_NAME:
                name = t.object.value
                spellings.setdefault(name, set()).update({name, name.replace("_", " ")})
        for t in self.knowledge.ontology.triples:  # rdfs:label of a metric definition
            if t.predicate.value == RDFS_LABEL:
                for name in spellings:
                    if t.subject.value == v.ENGRAM + name:
                        spellings[name].add(t.object.value.lower())
        for name, extra in METRIC_SPELLINGS.items():
            if name in spellings:
                spellings[name].update(extra)
        self._metric_of = {s.lower(): name for name, ss in spellings.items() for s in ss}
        self._metric = re.compile(rf"\b(?:{_alternation(self._metric_of)})\b", _I)
        self._platform_of = {s: p for p, ss in PLATFORMS.items() for s in ss}
        self._platform = re.compile(rf"\b(?:{_alternation(self._platform_of)})\b", _I)
        self._periods = [(p, re.compile(rx, _I)) for p, rx in PERIODS]
        self._skills = [(s, re.compile(rf"(?<![\w+#])(?:{rx})(?![\w+#])", _I)) for s, rx in SKILLS.items()]

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
                    "importance": IMPORTANCE[found.kind],
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
        for raw in SENTENCE.split(text.strip()):
            sentence = LEAD.sub("", raw.strip()).strip()
            if not sentence or QUESTION.search(sentence) or HYPOTHETICAL.search(sentence):
                continue
            if RETRACTED.search(sentence) or (CHITCHAT.search(sentence) and len(sentence.split()) < 6):
                continue
            content = _sentence_case(sentence)
            found = self._assessments(sentence, content)
            if not found and not TENTATIVE.search(sentence):
                found = self._typed(sentence, content)
            if not found and not (TENTATIVE.search(sentence) or PAST.search(sentence)):
                if not ONE_OFF.search(sentence) or RULE_START.match(sentence):
                    found = self._generic(sentence, content)
            elif found:  # "cap TikTok at $10k a month, and never run ads on weekends": the rule too
                found += [
                    g for c in CLAUSE.split(sentence) if not self._typed(c, content) for g in self._rules(c)
                ]
            out.extend(found)
        return out

    def _typed(self, sentence: str, content: str) -> list[_Found]:
        clauses = [c for c in CLAUSE.split(sentence) if c.strip()]
        live = [c for c in clauses if not PAST.search(c)]
        out: list[_Found] = []
        for clause in live:
            consumed: set[int] = set()
            numbers = amounts(clause)
            out.extend(self._targets(clause, content, numbers, consumed))
            out.extend(self._budgets(clause, sentence, content, numbers, consumed))
            out.extend(self._sourcing(clause, content))
        if not out:
            out.extend(self._criteria(sentence, content))
        if not out and BRAND_VOICE.search(sentence) and not PAST.search(sentence):
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
            if not TARGET_CUE.search(clause[: goal.start]) or re.search(
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
        if platform is None or not BUDGET_CUE.search(sentence):
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
        if not RECRUIT_NOUN.search(clause):
            return []
        for rx in SOURCING:
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
        if not CRITERIA_CUE.search(sentence):
            return []
        for rx in ROLE_PATTERNS:
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
        for rx in ASSESSMENTS:
            if m := rx.search(sentence):
                groups = m.groupdict()
                rating = int(groups["r"]) if groups.get("r") else VERBAL_RATING[groups["verbal"].lower()]
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
        for clause in (c.strip() for c in CLAUSE.split(sentence)):
            if rules := self._rules(clause):
                return rules
            if len(clause.split()) >= 3 and FACT.match(clause) and FACT_VERB.search(clause):
                return [self._domain(clause, "fact", content, "patterns:durable-statement")]
        return []

    def _rules(self, clause: str) -> list[_Found]:
        """An "always/never/prefer" rule: a preference of the most specific class that fits."""
        clause = LEAD.sub("", clause.strip()).strip()
        if len(clause.split()) < 3 or PAST.search(clause):
            return []
        rule = PREFERENCE.match(clause)
        if rule and (rule.group("verb") and NOT_A_RULE.match(rule.group("verb"))):
            rule = None
        if rule and rule.group("weverb") and WE_NOT_HABIT.match(rule.group("weverb")):
            rule = None
        if rule or DURABLE_IMPERATIVE.match(clause):
            return [self._domain(clause, "preference", _sentence_case(clause), "patterns:preference")]
        return []

    def _domain(self, clause: str, kind: str, content: str, reason: str) -> _Found:
        """The most specific class a generic statement fits: brand voice, marketing, recruiting, or Memory."""
        label = _short_label(content)
        if kind == "preference" and re.search(VOICE_WORDS, clause, _I):
            tone = TONE.search(clause)
            props = {"tone": tone.group("tone").strip()} if tone else {}
            return _Found("BrandVoiceMemory", kind, props, label, content, reason, GENERIC_CONFIDENCE)
        if re.search(MARKETING_WORDS, clause, _I) or self._platform.search(clause):
            return _Found("MarketingMemory", kind, {}, label, content, reason, GENERIC_CONFIDENCE)
        if re.search(RECRUITING_WORDS, clause, _I):
            return _Found("RecruitingMemory", kind, {}, label, content, reason, GENERIC_CONFIDENCE)
        return _Found("Memory", kind, {}, label, content, reason, GENERIC_CONFIDENCE)


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
