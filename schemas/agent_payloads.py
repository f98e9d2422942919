"""The payloads of agent work (DESIGN §7): sessions, episodes, tool calls, decisions and
associations, and the references between them. ``schemas.payloads`` imports them (its registry
holds every event type) and re-exports them, so ``payloads.SessionStarted`` is the one name."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from engram.schemas import vocabulary as v
from engram.schemas.checks import Problems, show
from engram.schemas.payloads import EVENT_ID_NAMESPACE
from engram.schemas.periods import UNSPECIFIED
from engram.schemas.records import Payload, Record, _list, _mapping


def mint_id(kind: str, event_id: str) -> str:
    """An agent node's id (a session, episode, tool call, decision, association) follows from its
    event id, as a memory's does, so producing the same event twice is safe."""
    return str(uuid.uuid5(EVENT_ID_NAMESPACE, f"{kind}:{event_id}"))


def parse_ref(ref: str) -> tuple[str, str]:
    """An association's end as (kind, id): ``episode:{id}``, ``decision:{id}``, else a memory id."""
    kind, sep, rest = ref.partition(":")
    return (kind, rest) if sep and kind in v.REF_KINDS else ("memory", ref)


def _check_ref(c: Problems, value: Any, what: str) -> None:
    if not isinstance(value, str):
        c.require(False, f"{what} must be a memory id, episode:{{id}} or decision:{{id}}, got {show(value)}")
        return
    _kind, ref_id = parse_ref(value)
    c.require(
        v.full_match(v.ID_RE, ref_id),
        f"{what} must be a memory id, episode:{{id}} or decision:{{id}}, got {show(value)}",
    )


def _check_cap_period(c: Problems, value: Any, what: str) -> None:
    """A planned period is a calendar period (2026-11, 2026-Q4, 2026-W49, …): what a cap of the same
    kind of period is compared against; ``unspecified`` is no period a cap can be judged on."""
    c.period(value)
    c.require(value != UNSPECIFIED, f"{what} must name a calendar period such as 2026-12")


class AgentEvent(Payload):
    """An event that records agent work (DESIGN §7): its node's id is minted from the event id when
    the producer leaves it out (``id_field``)."""

    id_field: ClassVar[str] = ""

    @classmethod
    def json_defaults(cls, p: Mapping[str, Any], event_id: str) -> dict[str, Any]:
        kind = cls.id_field.removesuffix("_id")
        return {cls.id_field: mint_id(kind, event_id), **p}


@dataclass(frozen=True, kw_only=True)
class SessionStarted(AgentEvent):
    id_field: ClassVar[str] = "session_id"

    session_id: str
    goal: str | None = None

    @classmethod
    def check(cls, p: Mapping[str, Any], c: Problems) -> None:
        c.id(p.get("session_id"), "session_id")
        if p.get("goal") is not None:
            c.text(p["goal"], "goal", v.SUMMARY_MAX)


@dataclass(frozen=True, kw_only=True)
class SessionEnded(Payload):
    session_id: str
    outcome: str | None = None

    @classmethod
    def check(cls, p: Mapping[str, Any], c: Problems) -> None:
        c.id(p.get("session_id"), "session_id")
        if p.get("outcome") is not None:
            c.text(p["outcome"], "outcome", v.SUMMARY_MAX)


@dataclass(frozen=True, kw_only=True)
class EpisodeRecorded(AgentEvent):
    id_field: ClassVar[str] = "episode_id"

    episode_id: str
    session_id: str
    summary: str

    @classmethod
    def check(cls, p: Mapping[str, Any], c: Problems) -> None:
        c.id(p.get("episode_id"), "episode_id")
        c.id(p.get("session_id"), "session_id")
        c.text(p.get("summary"), "summary", v.SUMMARY_MAX)


@dataclass(frozen=True, kw_only=True)
class ToolCalled(AgentEvent):
    id_field: ClassVar[str] = "call_id"

    call_id: str
    session_id: str
    episode_id: str | None = None
    tool: str
    arguments_digest: str
    outcome: str

    @classmethod
    def check(cls, p: Mapping[str, Any], c: Problems) -> None:
        c.id(p.get("call_id"), "call_id")
        c.id(p.get("session_id"), "session_id")
        if p.get("episode_id") is not None:
            c.id(p["episode_id"], "episode_id")
        c.name(p.get("tool"), "tool")
        c.require(
            v.full_match(v.DIGEST_RE, p.get("arguments_digest")),
            "arguments_digest must be sha256: and 64 lowercase hex digits, "
            f"got {show(p.get('arguments_digest'))}",
        )
        c.one_of(p.get("outcome"), v.ToolOutcome, "outcome")


@dataclass(frozen=True, kw_only=True)
class PlannedSpend(Record):
    platform: str
    amount: float
    currency: str
    period: str

    @classmethod
    def check(cls, p: Mapping[str, Any], c: Problems, what: str = "spend") -> None:
        c.name(p.get("platform"), f"{what}.platform")
        c.number(p.get("amount"), f"{what}.amount", 0)
        c.require(
            v.full_match(v.CURRENCY_RE, p.get("currency")),
            f"{what}.currency must be an ISO-4217 code such as USD",
        )
        _check_cap_period(c, p.get("period"), f"{what}.period")


@dataclass(frozen=True, kw_only=True)
class PlannedKpi(Record):
    metric: str
    value: float

    @classmethod
    def check(cls, p: Mapping[str, Any], c: Problems, what: str = "target_change") -> None:
        c.name(p.get("metric"), f"{what}.metric")
        c.number(p.get("value"), f"{what}.value")


@dataclass(frozen=True, kw_only=True)
class DecisionRecorded(AgentEvent):
    id_field: ClassVar[str] = "decision_id"

    decision_id: str
    session_id: str | None = None
    episode_id: str | None = None
    decision: str
    relied_on: tuple[str, ...] = ()
    live_data: tuple[str, ...] = ()
    spend: PlannedSpend | None = None
    target_change: PlannedKpi | None = None

    @classmethod
    def check(cls, p: Mapping[str, Any], c: Problems) -> None:
        c.id(p.get("decision_id"), "decision_id")
        for name in ("session_id", "episode_id"):
            if p.get(name) is not None:
                c.id(p[name], name)
        c.require(
            p.get("episode_id") is None or p.get("session_id") is not None,
            "a decision in an episode names its session_id too",
        )
        c.text(p.get("decision"), "decision", v.DECISION_MAX)
        cited = _list(c, p.get("relied_on"), "relied_on")
        data = _list(c, p.get("live_data"), "live_data")
        c.require(len(cited) <= v.CITED_MAX, f"relied_on names at most {v.CITED_MAX} memories")
        c.require(len(data) <= v.CITED_MAX, f"live_data names at most {v.CITED_MAX} observations")
        for memory_id in cited[: v.CITED_MAX]:
            c.id(memory_id, "relied_on")
        for ref in data[: v.CITED_MAX]:
            c.require(
                isinstance(ref, str) and observation_ref(ref) is not None,
                f"live_data names spend:{{platform}}:{{currency}}:{{period}} or kpi:{{metric}}:{{period}}, "
                f"got {show(ref)}",
            )
        if p.get("spend") is not None:
            PlannedSpend.check(_mapping(c, p, "spend"), c)
        if p.get("target_change") is not None:
            PlannedKpi.check(_mapping(c, p, "target_change"), c)


def observation_ref(ref: str) -> tuple[str, ...] | None:
    """A live-data reference's parts (``spend``, platform, currency, period or ``kpi``, metric,
    period), or None if it is not one; the periods are checked like an observation's."""
    parts = tuple(ref.split(":"))
    names_ok = all(v.full_match(v.NAME_RE, x) for x in parts[1:-1])
    if parts[0] == "spend" and len(parts) == 4:
        ok = names_ok and v.full_match(v.CURRENCY_RE, parts[2])
    elif parts[0] == "kpi" and len(parts) == 3:
        ok = names_ok
    else:
        return None
    probe = Problems()
    probe.period(parts[-1])
    return parts if ok and not probe.reasons else None


@dataclass(frozen=True, kw_only=True)
class MemoriesAssociated(AgentEvent):
    id_field: ClassVar[str] = "association_id"

    association_id: str
    from_ref: str
    to_ref: str
    relation: str

    @classmethod
    def check(cls, p: Mapping[str, Any], c: Problems) -> None:
        c.id(p.get("association_id"), "association_id")
        _check_ref(c, p.get("from_ref"), "from")
        _check_ref(c, p.get("to_ref"), "to")
        c.require(p.get("from_ref") != p.get("to_ref"), "an association links two different things")
        c.one_of(p.get("relation"), v.Relation, "relation")


@dataclass(frozen=True, kw_only=True)
class AssociationRemoved(Payload):
    """An association undone: its node and what the rules derived through it go from the graph."""

    association_id: str
    reason: str | None = None

    @classmethod
    def check(cls, p: Mapping[str, Any], c: Problems) -> None:
        c.id(p.get("association_id"), "association_id")
        if p.get("reason") is not None:
            c.text(p["reason"], "reason", v.REASON_MAX)
