"""Every verb as a :class:`Call`: the request it makes and how its answer is read.

The sync and async clients differ only in how they send; building each request once here keeps
the two (and the framework adapters, which build calls too) from drifting apart. A write's call
carries an ``Idempotency-Key`` minted when it is built, so every retry of it names the same event
and the server applies it once (``api/deps/idempotency.py``: the key becomes the event id).
"""

from __future__ import annotations

import base64
import binascii
import email.utils
import hashlib
import json
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar
from urllib.parse import quote

import httpx

from engram_client.models import (
    Accepted,
    AgentAccepted,
    Answer,
    Context,
    DecisionJustification,
    DecisionPage,
    Justification,
    Memory,
    MemoryPage,
    NarrativeItem,
    PlanCheck,
    Recall,
    Recognition,
    Resolution,
    SessionNarrative,
    Summary,
)

T = TypeVar("T")
Kind = Literal["preference", "fact", "objective", "context"]
Scope = Literal["user", "team", "company"]
Source = Literal["agent", "extraction", "operator", "onboarding", "pipeline", "system"]
OnConflict = Literal["ask", "replace", "keep_both"]
Fusion = Literal["default", "bm25", "vector", "rrf", "minmax", "zscore"]
Policy = Literal["prefer_newer", "prefer_higher_confidence", "prefer_more_specific_scope", "prefer_human"]
Relation = Literal["relates_to", "supports", "contradicts", "refines", "depends_on", "caused_by", "part_of"]
Outcome = Literal["ok", "error", "refused", "timeout"]
A = TypeVar("A", bound=Accepted)

RETRY_STATUSES = frozenset({429, 503})
# Errors after which the request may or may not have reached the server: safe to send again only
# because a write carries its idempotency key (a read changes nothing).
RETRY_ERRORS: tuple[type[Exception], ...] = (
    httpx.TimeoutException,
    httpx.NetworkError,
    httpx.RemoteProtocolError,
)


@dataclass(frozen=True)
class Call(Generic[T]):
    """One request and the reader of its answer. ``carries_position``: a context read that waits
    for the client's last write (``after=P:O``) unless the caller named a position."""

    method: str
    path: str
    read: Callable[[Any], T]
    params: list[tuple[str, str]] = field(default_factory=list)
    body: Any = None
    idempotency_key: str | None = None
    carries_position: bool = False
    # the parts of a write's answer that hold positions (default: the answer itself)
    positions: Callable[[Any], list[Any]] | None = None

    @property
    def is_write(self) -> bool:
        return self.idempotency_key is not None

    def headers(self) -> dict[str, str]:
        return {"Idempotency-Key": self.idempotency_key} if self.idempotency_key else {}


@dataclass(frozen=True)
class Retry:
    """How often and how long to retry a request that got no answer, a 503 or a 429.

    The wait is the server's ``Retry-After`` when it sends one (capped at ``max_wait``), else an
    exponential backoff from ``backoff`` seconds."""

    attempts: int = 4
    backoff: float = 0.25
    max_wait: float = 30.0

    def wait(self, attempt: int, response: httpx.Response | None) -> float:
        advised = retry_after(response) if response is not None else None
        if advised is not None:
            return min(advised, self.max_wait)
        return min(self.backoff * 2**attempt, self.max_wait)


def retry_after(response: httpx.Response) -> float | None:
    """The Retry-After header in seconds (delta-seconds or an HTTP date), None if absent or bad."""
    value = response.headers.get("Retry-After")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def tenant_of(token: str) -> str:
    """The ``tenant`` claim of a JWT, read without verifying it: the server verifies; the client
    only needs to know which tenant's routes to call."""
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        tenant = claims["tenant"]
    except (IndexError, ValueError, KeyError, TypeError, binascii.Error) as exc:
        raise ValueError("the token names no tenant (not a JWT with a tenant claim): pass tenant=") from exc
    if not isinstance(tenant, str) or not tenant:
        raise ValueError("the token's tenant claim is not a tenant name: pass tenant=")
    return tenant


def _key(given: str | None) -> str:
    return given if given is not None else str(uuid.uuid4())


def _drop_none(values: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


def _params(values: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Query parameters: None left out, a sequence repeated, booleans as the API spells them."""
    out: list[tuple[str, str]] = []
    for name, value in values.items():
        for one in value if isinstance(value, list | tuple) else [value]:
            if one is None:
                continue
            out.append((name, ("true" if one else "false") if isinstance(one, bool) else str(one)))
    return out


def _id(value: str) -> str:
    return quote(value, safe="")


class Calls:
    """The calls of one tenant's routes. Writes are attributed with ``source`` (the token decides
    the actor) and mint an idempotency key unless given one."""

    def __init__(self, tenant: str, source: Source = "agent") -> None:
        self.tenant = tenant
        self.source = source
        self.root = f"/v1/tenants/{_id(tenant)}"

    def _write(
        self,
        path: str,
        body: Mapping[str, Any],
        *,
        method: str = "POST",
        key: str | None,
        wait: bool,
        source: Source | None,
        purpose: str | None = None,
        correlation_id: str | None = None,
        occurred_at: str | None = None,
        read: Callable[[Any], A] = Accepted.model_validate,  # type: ignore[assignment]
    ) -> Call[A]:
        attribution = {
            "source": source or self.source,
            "purpose": purpose,
            "correlation_id": correlation_id,
            "occurred_at": occurred_at,
        }
        return Call(
            method,
            self.root + path,
            read,
            params=_params({"wait": True if wait else None}),
            body={**_drop_none(attribution), **body},
            idempotency_key=_key(key),
        )

    def _verb(
        self, method: str, path: str, *, body: Any = None, key: str | None = None, **params: Any
    ) -> Call[Answer]:
        """A verb whose answer the client does not model field by field (permissive)."""
        read = Answer.model_validate
        return Call(method, self.root + path, read, params=_params(params), body=body, idempotency_key=key)

    def _read(self, path: str, read: Callable[[Any], T], method: str = "GET", **params: Any) -> Call[T]:
        return Call(method, self.root + path, read, params=_params(params))

    # -- memories -------------------------------------------------------------------------------
    def remember(
        self,
        label: str,
        content: str,
        *,
        kind: Kind = "fact",
        importance: int = 3,
        memory_class: str | None = None,
        properties: Mapping[str, Any] | None = None,
        scope: Scope | None = None,
        user_id: str | None = None,
        team_ids: Sequence[str] | None = None,
        confidence: float | None = None,
        expires_at: str | None = None,
        memory_id: str | None = None,
        replaces: str | None = None,
        on_conflict: OnConflict | None = None,
        source: Source | None = None,
        purpose: str | None = None,
        correlation_id: str | None = None,
        occurred_at: str | None = None,
        wait: bool = False,
        idempotency_key: str | None = None,
    ) -> Call[Accepted]:
        """Remember a memory (``POST …/memories``): 202 with where the log holds it.

        ``importance`` 1 to 5 (Disabled, Low, Medium, High, Critical); ``memory_class`` a class of the
        ontology (``PerformanceTargetMemory``) with its ``properties``; ``on_conflict`` what to do
        if an active memory says otherwise (``ask``: 409 naming it; ``replace``; ``keep_both``)."""
        stakeholders = _drop_none({"user_id": user_id, "team_ids": list(team_ids) if team_ids else None})
        body = _drop_none(
            {
                "label": label,
                "content": content,
                "kind": kind,
                "importance": importance,
                "memory_class": memory_class,
                "properties": dict(properties) if properties else None,
                "scope": scope,
                "stakeholders": stakeholders or None,
                "confidence": confidence,
                "expires_at": expires_at,
                "memory_id": memory_id,
                "replaces": replaces,
                "on_conflict": on_conflict,
            }
        )
        return self._write(
            "/memories",
            body,
            key=idempotency_key,
            wait=wait,
            source=source,
            purpose=purpose,
            correlation_id=correlation_id,
            occurred_at=occurred_at,
        )

    def revise(
        self,
        memory_id: str,
        changes: Mapping[str, Any],
        *,
        source: Source | None = None,
        purpose: str | None = None,
        wait: bool = False,
        idempotency_key: str | None = None,
    ) -> Call[Accepted]:
        """Revise a memory (``PATCH``): a field given is set, ``None`` clears it (``expires_at``, a
        property), a field not named is untouched; ``properties`` likewise per name."""
        return self._write(
            f"/memories/{_id(memory_id)}",
            dict(changes),
            method="PATCH",
            key=idempotency_key,
            wait=wait,
            source=source,
            purpose=purpose,
        )

    def supersede(
        self,
        memory_id: str,
        superseded_by: str,
        *,
        source: Source | None = None,
        purpose: str | None = None,
        wait: bool = False,
        idempotency_key: str | None = None,
    ) -> Call[Accepted]:
        """``superseded_by`` (an existing memory) replaces ``memory_id``, which stays in the history."""
        return self._write(
            f"/memories/{_id(memory_id)}/supersede",
            {"superseded_by": superseded_by},
            key=idempotency_key,
            wait=wait,
            source=source,
            purpose=purpose,
        )

    def restore(
        self,
        memory_id: str,
        *,
        source: Source | None = None,
        wait: bool = False,
        idempotency_key: str | None = None,
    ) -> Call[Accepted]:
        """A superseded memory is active again."""
        return self._write(
            f"/memories/{_id(memory_id)}/restore", {}, key=idempotency_key, wait=wait, source=source
        )

    def forget(
        self,
        memory_id: str,
        *,
        reason: str | None = None,
        source: Source | None = None,
        wait: bool = False,
        idempotency_key: str | None = None,
    ) -> Call[Accepted]:
        """Forget a memory (operators and auditors): its content is erased, its lineage kept."""
        return self._write(
            f"/memories/{_id(memory_id)}/forget",
            _drop_none({"reason": reason}),
            key=idempotency_key,
            wait=wait,
            source=source,
        )

    def get_memory(self, memory_id: str, *, valid_at: str | None = None) -> Call[Memory]:
        """One memory with its lineage, statuses, conflicts and derived facts (404 if not visible)."""
        return Call(
            "GET",
            f"{self.root}/memories/{_id(memory_id)}",
            Memory.model_validate,
            params=_params({"valid_at": valid_at}),
        )

    def list_memories(
        self,
        *,
        kind: Kind | None = None,
        scope: Scope | None = None,
        memory_class: str | None = None,
        active: bool | None = None,
        valid_at: str | None = None,
        limit: int | None = None,
        offset: int | None = None,
    ) -> Call[MemoryPage]:
        """The memories the principal may see, filtered (``limit`` at most 1000)."""
        params = {
            "kind": kind,
            "scope": scope,
            "class": memory_class,
            "active": active,
            "valid_at": valid_at,
            "limit": limit,
            "offset": offset,
        }
        return Call("GET", f"{self.root}/memories", MemoryPage.model_validate, params=_params(params))

    def lineage(self, memory_id: str) -> Call[Answer]:
        """Where a belief came from: source, actor, the supersession chains, every event."""
        return self._verb("GET", f"/memories/{_id(memory_id)}/lineage")

    # -- recall and context ---------------------------------------------------------------------
    def recall(
        self,
        q: str,
        *,
        limit: int | None = None,
        budget_tokens: int | None = None,
        kind: Sequence[Kind] | None = None,
        memory_class: Sequence[str] | None = None,
        min_importance: int | None = None,
        min_confidence: float | None = None,
        valid_at: str | None = None,
        fusion: Fusion | None = None,
    ) -> Call[Recall]:
        """The memories most relevant to ``q``, best first (text and vector search, recency,
        importance); ``budget_tokens`` packs the best into that many tokens."""
        body = _drop_none(
            {
                "q": q,
                "limit": limit,
                "budget_tokens": budget_tokens,
                "kind": list(kind) if kind else None,
                "class": list(memory_class) if memory_class else None,
                "min_importance": min_importance,
                "min_confidence": min_confidence,
                "valid_at": valid_at,
                "fusion": fusion,
            }
        )
        return Call("POST", f"{self.root}/recall", Recall.model_validate, body=body)

    def context(
        self, q: str | None = None, *, valid_at: str | None = None, after: str | None = None
    ) -> Call[Context]:
        """What to pre-load this turn: the top-tier memories, statuses, conflicts, live data and
        the bundle as markdown. It waits for the client's last write unless ``after`` names
        another position (``partition:offset``)."""
        return Call(
            "GET",
            f"{self.root}/context",
            Context.model_validate,
            params=_params({"q": q, "valid_at": valid_at, "after": after}),
            carries_position=after is None,
        )

    def memory_tool(self) -> Call[Answer]:
        """The ontology's typed memory tool: a function-calling definition (name, parameters)."""
        return self._verb("GET", "/memory-tool")

    # -- live data ------------------------------------------------------------------------------
    def observe_kpi(
        self,
        metric: str,
        value: float,
        period: str,
        *,
        source: Source | None = None,
        wait: bool = False,
        idempotency_key: str | None = None,
    ) -> Call[Accepted]:
        """A KPI's value for a calendar period (``2026``, ``2026-Q4``, ``2026-11``, ``2026-W49``…)."""
        body = {"metric": metric, "value": value, "period": period}
        return self._write("/kpis", body, key=idempotency_key, wait=wait, source=source)

    def observe_spend(
        self,
        platform: str,
        amount: float,
        currency: str,
        period: str,
        *,
        source: Source | None = None,
        wait: bool = False,
        idempotency_key: str | None = None,
    ) -> Call[Accepted]:
        """Spend to date on one platform in a period."""
        body = {"platform": platform, "amount": amount, "currency": currency, "period": period}
        return self._write("/spend", body, key=idempotency_key, wait=wait, source=source)

    # -- the verbs around a write: recognize, justify, resolve, summarise -------------------------
    def recognize(
        self,
        label: str,
        *,
        content: str | None = None,
        memory_class: str | None = None,
        scope: Scope | None = None,
        properties: Mapping[str, Any] | None = None,
        limit: int | None = None,
        include_inactive: bool | None = None,
        min_score: float | None = None,
    ) -> Call[Recognition]:
        """Is this already known? (``POST …/recognize``) Ask before writing, with the memory as it
        would be written: matches strongest first, each with its reason (``exact``: the label;
        ``structural``: the rules' conflict key, which needs ``memory_class`` and, for targets and
        budgets, ``properties``' metric or platform; ``similar``: cosine ≥ ``min_score``)."""
        body = _drop_none(
            {
                "label": label,
                "content": content,
                "memory_class": memory_class,
                "scope": scope,
                "properties": dict(properties) if properties else None,
                "limit": limit,
                "include_inactive": include_inactive,
                "min_score": min_score,
            }
        )
        return Call("POST", f"{self.root}/recognize", Recognition.model_validate, body=body)

    def justify(
        self, memory_id: str, *, status: str | None = None, as_of: str | None = None
    ) -> Call[Justification]:
        """Why a memory is believed (``GET …/memories/{id}/justify``): source, actor, purpose, every
        event, the supersession chain, statuses and each derived fact's rule derivation tree.
        ``status`` keeps one derived fact (``budgetStatus``; 404 if it has none); ``as_of`` (a time
        or ``partition:offset``) answers as the system knew it then."""
        return self._read(
            f"/memories/{_id(memory_id)}/justify", Justification.model_validate, status=status, as_of=as_of
        )

    def resolve(
        self,
        policy: Policy,
        *,
        memory_ids: Sequence[str] | None = None,
        apply: bool = False,
        source: Source | None = None,
        purpose: str | None = None,
        wait: bool = False,
        idempotency_key: str | None = None,
    ) -> Call[Resolution]:
        """Settle the conflicts the rules flag (``POST …/conflicts/resolve``) by ``policy``: a dry run
        (nothing written) unless ``apply``, which supersedes each set's losers by its winner (a
        write: it carries an idempotency key, and the client keeps the furthest position)."""
        body = _drop_none(
            {
                "source": source or self.source,
                "purpose": purpose,
                "policy": policy,
                "memory_ids": list(memory_ids) if memory_ids else None,
            }
        )
        return Call(
            "POST",
            f"{self.root}/conflicts/resolve",
            Resolution.model_validate,
            params=_params({"apply": apply, "wait": True if wait else None}),
            body=body,
            idempotency_key=_key(idempotency_key) if apply else None,
            positions=_resolved_events,
        )

    def summarise(self, topic: str | None = None, *, top: int | None = None) -> Call[Summary]:
        """A deterministic, extractive summary (``GET …/summary``, no model) of the active memories
        about ``topic``, or of all of them: counts, statuses, conflicts, the ``top`` most important
        and the same as markdown (``text``)."""
        return self._read("/summary", Summary.model_validate, topic=topic, top=top)

    # -- plans and decisions --------------------------------------------------------------------
    def check_plan(
        self, *, spend: Mapping[str, Any] | None = None, target_change: Mapping[str, Any] | None = None
    ) -> Call[PlanCheck]:
        """Check a proposed action against the active constraints (``POST …/plans/check``), before
        taking it: exactly one of ``spend={"platform", "amount", "currency", "period"}`` or
        ``target_change={"metric", "value"}``. Answers ``ok`` and every constraint it would breach
        or bring near its limit, explained by the rule. Nothing is written."""
        body = _drop_none(
            {
                "spend": dict(spend) if spend is not None else None,
                "target_change": dict(target_change) if target_change is not None else None,
            }
        )
        return Call("POST", f"{self.root}/plans/check", PlanCheck.model_validate, body=body)

    def record_decision(
        self,
        decision: str,
        *,
        relied_on: Sequence[str] | None = None,
        live_data: Sequence[str] | None = None,
        spend: Mapping[str, Any] | None = None,
        target_change: Mapping[str, Any] | None = None,
        session_id: str | None = None,
        episode_id: str | None = None,
        decision_id: str | None = None,
        source: Source | None = None,
        purpose: str | None = None,
        wait: bool = False,
        idempotency_key: str | None = None,
    ) -> Call[AgentAccepted]:
        """Record a decision (``POST …/decisions``): what was decided, the memories (``relied_on``)
        and observations (``live_data``: ``spend:meta:USD:2026-11``, ``kpi:roas:2026-11``) it relied
        on, and the action (``spend`` or ``target_change``), which the rules judge: one that breaches
        an active constraint is flagged ``breached_constraint`` (see :meth:`get_decision`)."""
        body = _drop_none(
            {
                "decision_id": decision_id,
                "session_id": session_id,
                "episode_id": episode_id,
                "decision": decision,
                "relied_on": list(relied_on) if relied_on else None,
                "live_data": list(live_data) if live_data else None,
                "spend": dict(spend) if spend is not None else None,
                "target_change": dict(target_change) if target_change is not None else None,
            }
        )
        return self._agent("/decisions", body, idempotency_key, wait, source, purpose)

    def get_decision(self, decision_id: str) -> Call[NarrativeItem]:
        """One decision with what it relied on, the constraints it breaches and its statuses."""
        return self._read(f"/decisions/{_id(decision_id)}", NarrativeItem.model_validate)

    def justify_decision(self, decision_id: str, *, as_of: str | None = None) -> Call[DecisionJustification]:
        """Why a decision was taken (``GET …/decisions/{id}/justify``): who recorded it and for
        whom, its session and episode, the memories and live data it relied on, every event that
        touched it, and its statuses with their rule derivation trees. ``as_of`` (a time or
        ``partition:offset``) answers as the system knew it then."""
        return self._read(
            f"/decisions/{_id(decision_id)}/justify", DecisionJustification.model_validate, as_of=as_of
        )

    def decisions(self, relied_on: str) -> Call[DecisionPage]:
        """Which decisions relied on this memory (``GET …/decisions?relied_on=``): cited, or
        associated as ``supports``, in log order."""
        return self._read("/decisions", DecisionPage.model_validate, relied_on=relied_on)

    def associate(
        self,
        from_ref: str,
        to_ref: str,
        relation: Relation,
        *,
        association_id: str | None = None,
        source: Source | None = None,
        purpose: str | None = None,
        wait: bool = False,
        idempotency_key: str | None = None,
    ) -> Call[AgentAccepted]:
        """A typed, directed link (``POST …/associations``) from ``from_ref`` to ``to_ref``, each a
        memory id, ``episode:{id}`` or ``decision:{id}``."""
        body = _drop_none(
            {"association_id": association_id, "from": from_ref, "to": to_ref, "relation": relation}
        )
        return self._agent("/associations", body, idempotency_key, wait, source, purpose)

    # -- sessions -------------------------------------------------------------------------------
    def start_session(
        self,
        goal: str | None = None,
        *,
        session_id: str | None = None,
        source: Source | None = None,
        purpose: str | None = None,
        wait: bool = False,
        idempotency_key: str | None = None,
    ) -> Call[AgentAccepted]:
        """Start a session (``POST …/sessions``); ``id`` of the answer names it."""
        body = _drop_none({"session_id": session_id, "goal": goal})
        return self._agent("/sessions", body, idempotency_key, wait, source, purpose)

    def end_session(
        self,
        session_id: str,
        outcome: str | None = None,
        *,
        source: Source | None = None,
        wait: bool = False,
        idempotency_key: str | None = None,
    ) -> Call[AgentAccepted]:
        """End a session (``POST …/sessions/{id}/end``); it takes nothing more (409 after)."""
        body = _drop_none({"outcome": outcome})
        return self._agent(f"/sessions/{_id(session_id)}/end", body, idempotency_key, wait, source, None)

    def record_episode(
        self,
        session_id: str,
        summary: str,
        *,
        episode_id: str | None = None,
        source: Source | None = None,
        wait: bool = False,
        idempotency_key: str | None = None,
    ) -> Call[AgentAccepted]:
        """One step of a session's narrative (``POST …/sessions/{id}/episodes``)."""
        body = _drop_none({"episode_id": episode_id, "summary": summary})
        return self._agent(f"/sessions/{_id(session_id)}/episodes", body, idempotency_key, wait, source, None)

    def record_tool_call(
        self,
        session_id: str,
        tool: str,
        outcome: Outcome,
        *,
        arguments: Any = None,
        arguments_digest: str | None = None,
        episode_id: str | None = None,
        call_id: str | None = None,
        source: Source | None = None,
        wait: bool = False,
        idempotency_key: str | None = None,
    ) -> Call[AgentAccepted]:
        """A tool call in a session (``POST …/sessions/{id}/tool-calls``): the tool, its outcome and a
        digest of its arguments, never the arguments: give ``arguments`` (digested here, SHA-256 of
        their canonical JSON: :func:`digest`) or ``arguments_digest`` (``sha256:`` + 64 hex)."""
        if (arguments is None) == (arguments_digest is None):
            raise ValueError("give exactly one of arguments (digested here) or arguments_digest")
        body = _drop_none(
            {
                "call_id": call_id,
                "episode_id": episode_id,
                "tool": tool,
                "arguments_digest": arguments_digest or digest(arguments),
                "outcome": outcome,
            }
        )
        return self._agent(
            f"/sessions/{_id(session_id)}/tool-calls", body, idempotency_key, wait, source, None
        )

    def episodes_in(self, session_id: str) -> Call[SessionNarrative]:
        """A session's narrative (``GET …/sessions/{id}/episodes``): the session and its episodes,
        tool calls and decisions in log order."""
        return self._read(f"/sessions/{_id(session_id)}/episodes", SessionNarrative.model_validate)

    def _agent(
        self,
        path: str,
        body: Mapping[str, Any],
        key: str | None,
        wait: bool,
        source: Source | None,
        purpose: str | None,
    ) -> Call[AgentAccepted]:
        return self._write(
            path, body, key=key, wait=wait, source=source, purpose=purpose, read=AgentAccepted.model_validate
        )


def digest(arguments: Any) -> str:
    """``sha256:`` and the hex SHA-256 of ``arguments`` as canonical JSON (sorted keys, no spaces):
    what a tool call records instead of its arguments."""
    text = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def _resolved_events(answer: Any) -> list[Any]:
    """The supersessions an applied ``resolve`` appended (each a write's 202)."""
    if not isinstance(answer, dict):
        return []
    return [
        loser["event"]
        for group in answer.get("sets", [])
        for loser in group.get("superseded", [])
        if isinstance(loser, dict) and loser.get("event")
    ]
