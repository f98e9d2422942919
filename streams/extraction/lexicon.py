"""The default extractor's vocabulary: the words, cues and patterns it reads memories by.

Kept apart from `patterns.PatternExtractor` so the lexicon (what is recognised) can be read and
tuned without the machinery (how a turn becomes candidates). Metric names come from the ontology at
run time; only the spellings it does not give are here.
"""

from __future__ import annotations

import re

from engram.schemas import vocabulary as v

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
