"""Every write: validate, decide as the projection would, append to the log, optionally wait.

One method per command (``remember``, ``revise``, ``supersede``, ``restore``, ``decide_proposal``,
``forget``, ``place_hold``, ``release_hold``, ``observe_kpi``, ``observe_spend``, ``tick_clock``,
``change_stakeholder``), all through ``submit`` (``commands.appending``). The answers:
``Accepted`` (``applied`` once the projection has it), or a ``Refused``: 403 for a change the
actor may not make (``projections.governance``), 404 for a memory the actor may not see or that
does not exist (one answer, decided before anything else about it), 409 for a memory id that is
taken, an event id reused for different content, a forget under a legal hold (or an event the
projection rejected while the caller waited), 413 for an event the log cannot hold, 422 for an
invalid event, 503 if the log is unreachable, 504 if ``wait`` times out. A retry of a write that
was applied (same event id, same content) is answered as the original, not produced again.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from engram.commands.answers import (
    Accepted,
    Attribution,
    Conflicting,
    NotFound,
    Refused,
    refused,
)
from engram.commands.appending import Appender
from engram.commands.together import Together
from engram.projections import governance
from engram.projections.batch import Overlay
from engram.projections.conflicts import Keys, keys_of_many, rivals, rivals_of_stored
from engram.projections.plan import GraphState, no_facts
from engram.projections.read import get_memory
from engram.projections.recognize import normalised
from engram.projections.tenant_graph import TenantGraph
from engram.projections.terms import ASSERTED, e, memory_iri
from engram.schemas import payloads as ev
from engram.schemas import vocabulary as v
from engram.schemas.checks import InvalidEvent
from engram.schemas.events import Event, content_digest
from engram.streams.pipeline import Framed
from pyoxigraph import Literal


@dataclass
class Commands(Appender):
    """One method per command; each frames its event and takes the one path (``Appender``)."""

    # the conflict keys of the new memories whose remembers are ready on the loop together, derived
    # in one pass of the rules (``commands.together``)
    conflict_keys: Together[Event, Keys] = field(init=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.conflict_keys = Together(lambda events: keys_of_many(self.stores.knowledge, events))

    # -- memories --------------------------------------------------------------------------
    async def remember(
        self, tenant: str, memory: Mapping[str, Any], by: Attribution, *, wait: bool = False
    ) -> Accepted:
        """A new memory (``memory`` holds MemoryRemembered's fields; ``memory_id`` is minted if absent).
        ``replaces`` names a memory it supersedes in the same event (unknown: refused).

        Ask before overwrite: a new memory that structurally conflicts (``projections.conflicts``)
        with active ones is, by ``on_conflict``: ``ask`` (the default) a re-statement of one with
        the same label, revising it; else, if any rival was entered by a person, refused (409, the
        rivals named); ``replace`` superseding its one rival; ``keep_both`` written beside them.
        Auto-captured memories (source ``extraction``) never ask: they supersede an auto-captured
        rival silently; one that would replace or contradict a person's (any rival not extracted)
        becomes a pending proposal against every such rival (``proposes`` the first by id,
        ``also_proposes`` the others: inactive until a person accepts it, ``decide_proposal``).
        ``proposes`` given: a proposal as sent."""
        event = self.drafted(by.envelope("MemoryRemembered", tenant, memory))
        p = event.payload
        assert isinstance(p, ev.MemoryRemembered)
        await self.settle_earlier(event)
        graph = await self.current(tenant)
        explicit = p.replaces is not None or p.proposes is not None
        if graph is None or explicit or p.on_conflict == v.OnConflict.KEEP_BOTH:
            return await self.append(event, wait=wait, teams=by.teams)
        if graph.applied_digest(event.event_id) is not None:  # a retry: answered by what it did then
            framed = await self.finished(event)
            return await self.append(self._as_applied(framed, graph), wait=wait, teams=by.teams)
        authorise(event, graph, by.teams)  # before the rivals are looked up: they would be named
        found = rivals(self.stores.knowledge, graph, event, await self.conflict_keys(event))
        if not found:
            return await self.append(event, wait=wait, teams=by.teams)
        if event.source == v.Source.EXTRACTION:
            said = next((r for r in found if restates(graph, r.id, p)), None)
            if said is not None:  # heard again: nothing to supersede, nobody to ask
                raise Conflicting(
                    f"already known as memory {said.id} ({said.label!r}): "
                    "a restatement captured from a conversation writes nothing"
                )
            people = [r for r in found if r.source != v.Source.EXTRACTION]
            if people:  # a person's word is never overwritten by a capture: asked, against each of them
                chosen = replace(p, proposes=people[0].id, also_proposes=tuple(r.id for r in people[1:]))
            else:
                chosen = replace(p, replaces=found[0].id) if len(found) == 1 else p
            return await self.append(replace(event, payload=chosen), wait=wait, teams=by.teams)
        if p.on_conflict == v.OnConflict.REPLACE:
            if len(found) > 1:
                names = ", ".join(r.id for r in found)
                raise Conflicting(
                    f"replace supersedes one memory; this conflicts with {names}: name one in replaces"
                )
            chosen = replace(p, replaces=found[0].id)
            return await self.append(replace(event, payload=chosen), wait=wait, teams=by.teams)
        same = [r for r in found if r.label.strip().casefold() == p.label.strip().casefold()]
        if len(same) == 1:  # the same thing said again: a revision of it, not a duplicate
            return await self._restate(event, same[0].id, wait=wait, teams=by.teams)
        named = ", ".join(f"{r.id} ({r.label!r}, {r.source})" for r in found)
        raise Conflicting(
            f"conflicts with active memories {named}: send on_conflict=replace to supersede, or keep_both"
        )

    async def remember_many(
        self, tenant: str, memories: Sequence[tuple[Mapping[str, Any], Attribution]], *, wait: bool = False
    ) -> list[Accepted | Refused]:
        """Many remembers in one call (the bulk route), each answered as it would be alone, in order:
        accepted, or the refusal it got. They are decided side by side against the tenant's memories
        as they stand, not against each other (two of them that conflict are both written and shown
        as conflicting, as two requests at once would be), and go to the log in the same batches. A
        memory id two items name is the first one's: the second is refused (409)."""

        first: dict[str, int] = {}  # a memory id named by an item: the first item naming it

        async def one(i: int, memory: Mapping[str, Any], by: Attribution) -> Accepted | Refused:
            named = memory.get("memory_id")
            if isinstance(named, str) and first.setdefault(named, i) != i:
                return Conflicting(f"memory id {named} is named by an earlier item of this request")
            try:
                return await self.remember(tenant, memory, by, wait=wait)
            except Refused as exc:
                return exc

        return list(await asyncio.gather(*(one(i, memory, by) for i, (memory, by) in enumerate(memories))))

    async def _restate(
        self, event: Event, memory_id: str, *, wait: bool, teams: frozenset[str] | None
    ) -> Accepted:
        return await self.append(self._restatement(event, memory_id), wait=wait, teams=teams)

    def _restatement(self, event: Event, memory_id: str) -> Event:
        """The remember ``event`` as a revision of ``memory_id`` (same event id: one request), drafted."""
        p = event.payload
        assert isinstance(p, ev.MemoryRemembered)
        changes = {
            "content": p.content,
            "kind": p.kind.value,
            "importance": p.importance,
            "confidence": p.confidence,
            "expires_at": p.expires_at.isoformat() if p.expires_at else None,
        }
        revision = {"memory_id": memory_id, "changes": changes, "property_changes": dict(p.properties)}
        when = event.occurred_at if event.occurred_at_given else None  # a retry's "now" may differ
        by = Attribution(event.source, event.actor, event.event_id, when, event.purpose, event.correlation_id)
        return self.drafted(by.envelope("MemoryRevised", event.tenant, revision))

    def _as_applied(self, framed: Framed, graph: TenantGraph) -> Framed | Event:
        """A retried remember as it was applied: as sent, with the ``replaces`` or ``proposes`` the
        conflict check gave it, or as the revision it became."""
        event = framed.event
        p = event.payload
        assert isinstance(p, ev.MemoryRemembered)
        candidates: list[Framed | Event] = [framed]
        for q in graph.store.quads_for_pattern(None, e("supersededBy"), memory_iri(p.memory_id), ASSERTED):
            candidates.append(replace(event, payload=replace(p, replaces=q.subject.value.rsplit(":", 1)[-1])))
        if olds := sorted(
            old.value.rsplit(":", 1)[-1] for old in graph.objects(memory_iri(p.memory_id), e("proposes"))
        ):
            proposed = replace(p, proposes=olds[0], also_proposes=tuple(olds[1:]))  # rivals are by id
            candidates.append(replace(event, payload=proposed))
        for q in graph.store.quads_for_pattern(None, e("changedBy"), Literal(event.event_id), ASSERTED):
            if q.subject != memory_iri(p.memory_id):
                restated = self._restatement(event, q.subject.value.rsplit(":", 1)[-1])
                candidates.append(self.pipeline.frame(restated))  # sealed, as it was applied
        stored = graph.applied_digest(event.event_id)
        return next((c for c in candidates if content_digest(_event(c)) == stored), framed)

    async def revise(
        self,
        tenant: str,
        memory_id: str,
        by: Attribution,
        *,
        changes: Mapping[str, Any] | None = None,
        property_changes: Mapping[str, Any] | None = None,
        wait: bool = False,
    ) -> Accepted:
        payload = {
            "memory_id": memory_id,
            "changes": changes or {},
            "property_changes": property_changes or {},
        }
        return await self.submit(tenant, "MemoryRevised", payload, by, wait=wait)

    async def supersede(
        self, tenant: str, memory_id: str, superseded_by: str, by: Attribution, *, wait: bool = False
    ) -> Accepted:
        payload = {"memory_id": memory_id, "superseded_by": superseded_by}
        return await self.submit(tenant, "MemorySuperseded", payload, by, wait=wait)

    async def restore(self, tenant: str, memory_id: str, by: Attribution, *, wait: bool = False) -> Accepted:
        """A superseded memory active again; refused (409) while an active memory would then
        contradict it (supersede or forget that one first)."""
        event = self.drafted(by.envelope("MemoryRestored", tenant, {"memory_id": memory_id}))
        graph = await self.current(tenant)
        if graph is not None and graph.objects(memory_iri(memory_id), e("supersededBy")):
            authorise(event, graph, by.teams)  # before the rivals are looked up: they would be named
            found = [r for r in rivals_of_stored(graph, memory_id) if r.id != memory_id]
            if found:
                named = ", ".join(f"{r.id} ({r.label!r})" for r in found)
                raise Conflicting(f"restoring {memory_id} would contradict the active {named}")
        return await self.append(event, wait=wait, teams=by.teams)

    async def decide_proposal(
        self,
        tenant: str,
        memory_id: str,
        decision: v.ProposalDecision | str,
        by: Attribution,
        *,
        reason: str | None = None,
        wait: bool = False,
    ) -> Accepted:
        """A person's answer to the pending proposal ``memory_id``: accepted, it supersedes every
        memory it would replace; rejected, it stays inactive. Refused: 404 for a proposal (or a
        memory it would replace) the actor may not see, 403 for one with a memory it may not
        supersede (and for source ``extraction``), 409 if already decided or, for an acceptance,
        any memory it would replace is no longer active (all or none), 422 for a memory that is
        not a proposal."""
        payload = {"memory_id": memory_id, "decision": str(decision), "reason": reason}
        return await self.submit(tenant, "ProposalDecided", payload, by, wait=wait)

    async def forget(
        self, tenant: str, memory_id: str, by: Attribution, *, reason: str | None = None, wait: bool = False
    ) -> Accepted:
        payload = {"memory_id": memory_id, "reason": reason}
        return await self.submit(tenant, "MemoryForgotten", payload, by, wait=wait)

    async def place_hold(
        self, tenant: str, memory_id: str, by: Attribution, *, reason: str | None = None, wait: bool = False
    ) -> Accepted:
        """A legal hold: while it stands the memory may not be forgotten."""
        payload = {"memory_id": memory_id, "reason": reason}
        try:
            return await self.submit(tenant, "LegalHoldPlaced", payload, by, wait=wait)
        except NotFound as exc:  # its memory is named in the body
            raise NotFound(exc.reason, ("body", "memory_id")) from exc

    async def release_hold(
        self, tenant: str, memory_id: str, by: Attribution, *, reason: str | None = None, wait: bool = False
    ) -> Accepted:
        payload = {"memory_id": memory_id, "reason": reason}
        return await self.submit(tenant, "LegalHoldReleased", payload, by, wait=wait)

    # -- live business data ----------------------------------------------------------------
    async def observe_kpi(
        self, tenant: str, metric: str, value: float, period: str, by: Attribution, *, wait: bool = False
    ) -> Accepted:
        payload = {"metric": metric, "value": value, "period": period}
        return await self.submit(tenant, "KpiObserved", payload, by, wait=wait)

    async def observe_spend(
        self,
        tenant: str,
        platform: str,
        amount: float,
        currency: str,
        period: str,
        by: Attribution,
        *,
        wait: bool = False,
    ) -> Accepted:
        payload = {"platform": platform, "amount": amount, "currency": currency, "period": period}
        return await self.submit(tenant, "SpendObserved", payload, by, wait=wait)

    async def tick_clock(
        self, tenant: str, now: datetime | str, by: Attribution, *, wait: bool = False
    ) -> Accepted:
        return await self.submit(tenant, "ClockTicked", {"now": now}, by, wait=wait)

    async def change_stakeholder(
        self,
        tenant: str,
        user_id: str,
        role: str,
        by: Attribution,
        *,
        team_ids: Sequence[str] = (),
        wait: bool = False,
    ) -> Accepted:
        payload = {"user_id": user_id, "team_ids": list(team_ids), "role": role}
        return await self.submit(tenant, "StakeholderChanged", payload, by, wait=wait)

    # -- agent work (DESIGN §7) ------------------------------------------------------------
    async def remove_association(
        self,
        tenant: str,
        association_id: str,
        by: Attribution,
        *,
        reason: str | None = None,
        wait: bool = False,
    ) -> Accepted:
        """AssociationRemoved: the link and what the rules derived through it go. Refused: 404 for an
        association that does not exist or that the actor may not see (its acting user's; every
        one, for an operator), as for one already removed."""
        payload = {"association_id": association_id, "reason": reason}
        return await self.submit(tenant, "AssociationRemoved", payload, by, wait=wait)

    async def record_agent_work(
        self, tenant: str, event_type: str, payload: Mapping[str, Any], by: Attribution, *, wait: bool = False
    ) -> tuple[Accepted, str]:
        """One of SessionStarted, SessionEnded, EpisodeRecorded, ToolCalled, DecisionRecorded or
        MemoriesAssociated, and the id of the node it records: the payload's, or minted from the
        event id (so a retry with the same Idempotency-Key names the same node)."""
        cls = ev.payload_class(event_type)
        assert issubclass(cls, ev.AgentEvent | ev.SessionEnded), event_type
        if by.event_id is None:
            by = replace(by, event_id=str(uuid.uuid4()))
        field_name = cls.id_field if issubclass(cls, ev.AgentEvent) else "session_id"
        body = dict(payload)
        if body.get(field_name) is None:
            body[field_name] = ev.mint_id(field_name.removesuffix("_id"), str(by.event_id))
        accepted = await self.submit(tenant, event_type, body, by, wait=wait)
        return accepted, str(body[field_name])


def _state(graph: TenantGraph | None) -> GraphState:
    return Overlay(graph.store) if graph is not None else no_facts()


def authorise(event: Event, graph: TenantGraph | None, teams: frozenset[str] | None) -> None:
    """The governance check alone, as a refusal: for a command that looks at other memories
    (rivals it would name) before it is appended."""
    try:
        governance.check(event, _state(graph), teams)
    except InvalidEvent as exc:
        raise refused(exc) from exc


def _event(item: Framed | Event) -> Event:
    return item.event if isinstance(item, Framed) else item


def restates(graph: TenantGraph, memory_id: str, p: ev.MemoryRemembered) -> bool:
    """Whether ``p`` says what the stored memory says: the same class and the same properties
    (numbers as numbers), or, for a memory with no properties, the same label and content once
    normalised."""
    stored = get_memory(graph, memory_id)
    if stored is None or stored["memory_class"] != p.memory_class.rsplit("#", 1)[-1]:
        return False
    if not p.properties:  # its words are all it says
        return (
            not stored["properties"]
            and normalised(stored["label"] or "") == normalised(p.label)
            and normalised(stored["content"] or "") == normalised(p.content)
        )

    def plain(x: Any) -> Any:
        return float(x) if isinstance(x, int | float) and not isinstance(x, bool) else x

    mine = {k: plain(x) for k, x in p.properties.items()}
    return mine == {k: plain(x) for k, x in stored["properties"].items()}
