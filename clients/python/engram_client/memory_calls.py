"""The calls of memories and live data: remember (one, or many in chunks), revise, supersede,
restore, forget, reads, proposals (list, accept, reject), recall and context, KPI and spend
observations."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from itertools import islice
from typing import Any

from pydantic import BaseModel, ConfigDict

from engram_client.call import (
    Call,
    CallsBase,
    Fusion,
    Kind,
    OnConflict,
    Scope,
    Source,
    _drop_none,
    _id,
    _key,
    _params,
)
from engram_client.models import (
    Accepted,
    Answer,
    Context,
    ItemAnswer,
    Memory,
    MemoryPage,
    Onboarded,
    OnboardingStatus,
    ProposalPage,
    Recall,
)

MOST_PER_BATCH = 1000  # the server's limit per ``POST …/memories:batch``
KEY_MAX = 255  # the longest Idempotency-Key the server takes


class NewMemory(BaseModel):
    """A memory to write, for :meth:`MemoryCalls.remember_many`: ``remember``'s keyword arguments as
    a model (``NewMemory(label=..., content=..., kind="fact")``). Fields left ``None`` are left out
    of the body, so the server's defaults apply; a field the client does not know yet is passed on."""

    model_config = ConfigDict(extra="allow")

    label: str
    content: str
    kind: Kind = "fact"
    importance: int = 3
    memory_class: str | None = None
    properties: dict[str, Any] | None = None
    scope: Scope | None = None
    user_id: str | None = None
    team_ids: list[str] | None = None
    confidence: float | None = None
    expires_at: str | None = None
    memory_id: str | None = None
    replaces: str | None = None
    on_conflict: OnConflict | None = None
    proposes: str | None = None
    also_proposes: list[str] | None = None
    source: Source | None = None
    purpose: str | None = None
    correlation_id: str | None = None
    occurred_at: str | None = None
    event_id: str | None = None

    def body(self) -> dict[str, Any]:
        """The ``MemoryCreate`` body, as :meth:`MemoryCalls.remember` sends it."""
        body = self.model_dump(mode="json", exclude_none=True)
        stakeholders = {name: body.pop(name) for name in ("user_id", "team_ids") if name in body}
        if stakeholders:
            body["stakeholders"] = stakeholders
        return body


def chunk_key(key: str, number: int) -> str:
    """Chunk ``number``'s Idempotency-Key, from the caller's ``key``: the server derives item i's
    event id from it and i, so the same items resent in the same chunks name the same events. A key
    too long to take a suffix is replaced by its SHA-256 first (the server's limit is 255)."""
    suffix = f" chunk {number}"
    if len(key) + len(suffix) > KEY_MAX:
        key = hashlib.sha256(key.encode()).hexdigest()
    return key + suffix


class MemoryCalls(CallsBase):
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
        proposes: str | None = None,
        also_proposes: Sequence[str] | None = None,
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
        if an active memory says otherwise (``ask``: 409 naming it; ``replace``; ``keep_both``);
        ``proposes`` a memory this would replace once a person accepts it (``proposals``), and
        ``also_proposes`` the others, for a proposal against several (accepting supersedes them all)."""
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
                "proposes": proposes,
                "also_proposes": list(also_proposes) if also_proposes else None,
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

    def remember_many(
        self,
        memories: Iterable[Mapping[str, Any] | BaseModel],
        *,
        source: Source | None = None,
        wait: bool = False,
        idempotency_key: str | None = None,
        chunk: int = MOST_PER_BATCH,
    ) -> Iterator[Call[list[ItemAnswer]]]:
        """Remember many memories (``POST …/memories:batch``), ``chunk`` (at most 1,000) to a
        request: one call per chunk, built as the previous one is sent, each answering its items as
        :class:`ItemAnswer` with ``index`` counted from the first item of ``memories``.

        An item is a ``MemoryCreate`` body: a mapping, a :class:`NewMemory` or any pydantic model
        (dumped without its ``None`` fields); ``source`` (default the client's) fills in an item
        without one. Each item is written at most once: with ``idempotency_key`` every chunk's key
        is derived from it and the chunk's number (:func:`chunk_key`: resend the same items in the
        same chunks and nothing is written twice; an item must then carry no ``event_id`` of its
        own, or the server refuses it, 422); without one, an item without an ``event_id`` is given
        a fresh one, kept across the retries of its chunk."""
        if not 1 <= chunk <= MOST_PER_BATCH:
            raise ValueError(f"chunk is 1 to {MOST_PER_BATCH} items a request, not {chunk}")
        return self._batches(iter(memories), source, wait, idempotency_key, chunk)

    def _batches(
        self,
        memories: Iterator[Mapping[str, Any] | BaseModel],
        source: Source | None,
        wait: bool,
        key: str | None,
        chunk: int,
    ) -> Iterator[Call[list[ItemAnswer]]]:
        start, number = 0, 0
        while part := list(islice(memories, chunk)):
            items = [self._item(memory, source, stamp=key is None) for memory in part]
            yield Call(
                "POST",
                f"{self.root}/memories:batch",
                _renumbered(start),
                params=_params({"wait": True if wait else None}),
                body={"memories": items},
                idempotency_key=None if key is None else chunk_key(key, number),
                positions=_items_accepted,
                names_events=key is None,
            )
            start, number = start + len(part), number + 1

    def _item(
        self, memory: Mapping[str, Any] | BaseModel, source: Source | None, *, stamp: bool
    ) -> dict[str, Any]:
        if isinstance(memory, NewMemory):
            body = memory.body()
        elif isinstance(memory, BaseModel):
            body = memory.model_dump(mode="json", exclude_none=True)
        else:
            body = dict(memory)
        body.setdefault("source", source or self.source)
        if stamp:
            body.setdefault("event_id", str(uuid.uuid4()))
        return body

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

    # -- proposals ------------------------------------------------------------------------------
    def proposals(self, *, limit: int | None = None, offset: int | None = None) -> Call[ProposalPage]:
        """The pending proposals the principal may see: extracted memories that would replace a
        person's, each with the memory it would replace."""
        params = _params({"limit": limit, "offset": offset})
        return Call("GET", f"{self.root}/proposals", ProposalPage.model_validate, params=params)

    def accept_proposal(
        self,
        memory_id: str,
        reason: str | None = None,
        *,
        source: Source | None = None,
        wait: bool = False,
        idempotency_key: str | None = None,
    ) -> Call[Accepted]:
        """Accept a pending proposal: it becomes active and supersedes every memory it would replace
        (409 if already decided or any of them is no longer active: all or none)."""
        return self._decide(memory_id, "accept", reason, source, wait, idempotency_key)

    def reject_proposal(
        self,
        memory_id: str,
        reason: str | None = None,
        *,
        source: Source | None = None,
        wait: bool = False,
        idempotency_key: str | None = None,
    ) -> Call[Accepted]:
        """Reject a pending proposal: it stays inactive, marked rejected (409 if already decided)."""
        return self._decide(memory_id, "reject", reason, source, wait, idempotency_key)

    def _decide(
        self,
        memory_id: str,
        answer: str,
        reason: str | None,
        source: Source | None,
        wait: bool,
        idempotency_key: str | None,
    ) -> Call[Accepted]:
        return self._write(
            f"/proposals/{_id(memory_id)}/{answer}",
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
        min_importance: int | None = None,
        valid_at: str | None = None,
        limit: int | None = None,
        offset: int | None = None,
        explain: bool | None = None,
    ) -> Call[MemoryPage]:
        """The memories the principal may see, filtered (``min_importance``: a tier 1-5 and above;
        ``limit`` at most 1000); ``explain=False`` leaves each memory's ``derived`` out (statuses,
        classes and conflicts kept): far cheaper."""
        params = {
            "kind": kind,
            "scope": scope,
            "class": memory_class,
            "active": active,
            "min_importance": min_importance,
            "valid_at": valid_at,
            "limit": limit,
            "offset": offset,
            "explain": explain,
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

    # -- onboarding (operators) -----------------------------------------------------------------
    def onboard(
        self,
        *,
        objective: Mapping[str, Any] | None = None,
        fact: Mapping[str, Any] | None = None,
        preference: Mapping[str, Any] | None = None,
        occurred_at: str | None = None,
        wait: bool = False,
    ) -> Call[Onboarded]:
        """A new tenant's spine (``POST …/onboarding``, an operator's): any of its first
        ``objective`` (``label``, ``content`` and a ``target={"metric", "goal"}`` or a
        ``budget={"platform", "amount", "currency", "period"}``), one durable ``fact`` and one
        ``preference`` (``label``, ``content``; ``importance`` optional). The server derives the
        event ids from the body, so sending it again writes nothing new."""
        slots = {"objective": objective, "fact": fact, "preference": preference}
        given = {slot: dict(memory) for slot, memory in slots.items() if memory is not None}
        body = _drop_none({**given, "occurred_at": occurred_at})
        return Call(
            "POST",
            f"{self.root}/onboarding",
            Onboarded.model_validate,
            params=_params({"wait": True if wait else None}),
            body=body,
            idempotency_key=_key(None),
            positions=_slots_written,
        )

    def onboarding(self) -> Call[OnboardingStatus]:
        """What the tenant's onboarding holds (memory ids by slot) and what is still ``missing``."""
        return self._read("/onboarding", OnboardingStatus.model_validate)

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


def _renumbered(start: int) -> Callable[[Any], list[ItemAnswer]]:
    """The reader of a chunk's answer: its items, indexed from the caller's first item."""

    def read(answer: Any) -> list[ItemAnswer]:
        return [ItemAnswer.model_validate({**r, "index": start + r["index"]}) for r in answer["results"]]

    return read


def _items_accepted(answer: Any) -> list[Any]:
    """The items of a batch the log accepted (each a 202 with its position)."""
    results = answer.get("results") if isinstance(answer, dict) else None
    return [r for r in results or [] if isinstance(r, dict) and r.get("status") == 202]


def _slots_written(answer: Any) -> list[Any]:
    """The writes an onboarding appended (each slot's 202)."""
    if not isinstance(answer, dict):
        return []
    slots = ("objective", "fact", "preference")
    return [answer[slot] for slot in slots if isinstance(answer.get(slot), dict)]
