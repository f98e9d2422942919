"""The calls of the agent verbs: recognize, justify, resolve, summarise, plans, decisions,
associations and sessions."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from engram_client.call import (
    Call,
    CallsBase,
    Outcome,
    Policy,
    Relation,
    Scope,
    Source,
    _drop_none,
    _id,
    _key,
    _params,
)
from engram_client.models import (
    AgentAccepted,
    DecisionJustification,
    DecisionPage,
    Justification,
    NarrativeItem,
    PlanCheck,
    Recognition,
    Resolution,
    SessionNarrative,
    Summary,
)


class VerbCalls(CallsBase):
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

    def summarise(
        self,
        topic: str | None = None,
        *,
        session: str | None = None,
        top: int | None = None,
        as_of: str | None = None,
    ) -> Call[Summary]:
        """A deterministic, extractive summary (``GET …/summary``, no model) of the active memories
        about ``topic``, or of all of them, or of a ``session``'s (those its decisions relied on and
        those associated with its work; with ``topic``, those of them it is about): counts,
        statuses, conflicts, the ``top`` most important and the same as markdown (``text``).
        ``as_of`` (a time or ``partition:offset``): as the system knew them then."""
        return self._read(
            "/summary", Summary.model_validate, topic=topic, session=session, top=top, as_of=as_of
        )

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

    def decisions(
        self, relied_on: str | None = None, *, limit: int | None = None, offset: int | None = None
    ) -> Call[DecisionPage]:
        """Which decisions relied on this memory (``GET …/decisions?relied_on=``): cited, or
        associated as ``supports``, in log order; without ``relied_on``, every decision the
        principal may see (a page: ``limit``, ``offset``)."""
        return self._read(
            "/decisions", DecisionPage.model_validate, relied_on=relied_on, limit=limit, offset=offset
        )

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

    def remove_association(
        self,
        association_id: str,
        *,
        reason: str | None = None,
        source: Source | None = None,
        purpose: str | None = None,
        wait: bool = False,
        idempotency_key: str | None = None,
    ) -> Call[AgentAccepted]:
        """Undo an association (``POST …/associations/{id}/remove``): the link and what the rules
        derived through it go; the log keeps both events."""
        path = f"/associations/{_id(association_id)}/remove"
        return self._agent(path, _drop_none({"reason": reason}), idempotency_key, wait, source, purpose)

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
