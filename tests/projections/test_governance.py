"""The authorisation matrix: role by scope by action by owner or not, every cell decided by the
projection's own check (the one the API's pre-check and the projector both run), against an
oracle written from the rules as DESIGN §6 and the README state them."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path
from typing import Any

import pytest

from projections.governance import Forbidden
from projections.knowledge import load_knowledge
from projections.plan import FactSet
from projections.stores import TenantStores
from projections.tenant_graph import Status
from projections.terms import e, memory_iri
from projections.validation import checked_plan
from schemas.events import Position
from streams import codec, projector
from tests.factories import envelope, event, remembered

KNOWLEDGE = load_knowledge()
SCOPES = ("user", "team", "company")
ACTIONS = ("remember", "revise", "supersede", "restore", "replace", "forget", "hold")
ROLES = ("user", "agent", "operator", "pipeline", "auditor")


def holders(scope: str, user: str) -> dict[str, Any]:
    return {"user": {"user_id": user}, "team": {"team_ids": ["growth"]}, "company": {}}[scope]


def actor(role: str, owner: bool, scope: str) -> dict[str, str]:
    """Who acts: for a user-scoped memory the owner is its user, sam; for a shared one its author,
    dana (an operator: only operators write shared memories)."""
    if role == "agent":
        return {"id": "drafter", "role": "agent", "on_behalf_of": "sam" if owner else "ann"}
    if role == "operator":
        return {"id": ("sam" if scope == "user" else "dana") if owner else "erin", "role": "operator"}
    if role == "user":
        return {"id": "sam" if owner else "ann", "role": "user"}
    return {"id": f"{role}-1", "role": role}


def allowed(role: str, scope: str, action: str, owner: bool) -> bool:
    """The rules, said plainly."""
    if action in ("forget", "hold"):
        return role in ("operator", "auditor")
    if role in ("pipeline", "auditor"):
        return False
    if scope == "user":
        return owner  # its user, an agent for that user, or that user holding an operator's token
    return role == "operator"  # team and company memories: operators, owner or not


def setup() -> FactSet:
    """For each scope a memory ``m-<scope>`` and a superseded one ``s-<scope>``, written by their
    owners; a company memory ``fresh`` to supersede with."""
    lines = [envelope("MemoryRemembered", remembered("fresh"))]
    for scope in SCOPES:
        owner = {"id": "sam", "role": "user"} if scope == "user" else {"id": "dana", "role": "operator"}
        for mid in (f"m-{scope}", f"s-{scope}"):
            memory = remembered(mid, scope=scope, stakeholders=holders(scope, "sam"))
            lines.append(envelope("MemoryRemembered", memory, actor=owner))
        superseded = {"memory_id": f"s-{scope}", "superseded_by": "fresh"}
        lines.append(envelope("MemorySuperseded", superseded, actor=owner))
    state = FactSet()
    for offset, line in enumerate(lines):
        ev = event(line["type"], line["payload"], actor=line["actor"])
        state.apply(checked_plan(KNOWLEDGE, ev, Position(0, offset), state))
    return state


STATE = setup()


def attempt(role: str, scope: str, action: str, owner: bool) -> dict[str, Any]:
    who = actor(role, owner, scope)
    target = f"m-{scope}"
    new_user = "sam"  # a new user-scoped memory is sam's: the owner is the one acting for sam
    match action:
        case "remember":
            return {
                "type": "MemoryRemembered",
                "payload": remembered("new", scope=scope, stakeholders=holders(scope, new_user)),
                "actor": who,
            }
        case "replace":
            return {
                "type": "MemoryRemembered",
                "payload": remembered(
                    "new", scope=scope, stakeholders=holders(scope, new_user), replaces=target
                ),
                "actor": who,
            }
        case "revise":
            return {
                "type": "MemoryRevised",
                "payload": {"memory_id": target, "changes": {"label": "x"}},
                "actor": who,
            }
        case "supersede":
            return {
                "type": "MemorySuperseded",
                "payload": {"memory_id": target, "superseded_by": "fresh"},
                "actor": who,
            }
        case "restore":
            return {"type": "MemoryRestored", "payload": {"memory_id": f"s-{scope}"}, "actor": who}
        case "hold":
            return {"type": "LegalHoldPlaced", "payload": {"memory_id": target}, "actor": who}
        case _:
            return {"type": "MemoryForgotten", "payload": {"memory_id": target}, "actor": who}  # fmt: skip


CELLS = [
    (role, scope, action, owner)
    for role, scope, action, owner in itertools.product(ROLES, SCOPES, ACTIONS, (True, False))
    # a shared memory's author is an operator: no user or agent owns one
    if not (owner and scope != "user" and role in ("user", "agent"))
    # a pipeline's or an auditor's id is never a memory's user or author
    and not (owner and role in ("pipeline", "auditor"))
]


def decide(line: dict[str, Any]) -> bool:
    try:
        checked_plan(
            KNOWLEDGE, event(line["type"], line["payload"], actor=line["actor"]), Position(0, 99), STATE
        )
    except Forbidden:
        return False
    return True


@pytest.mark.parametrize(("role", "scope", "action", "owner"), CELLS)
def test_memory_matrix(role: str, scope: str, action: str, owner: bool) -> None:
    assert decide(attempt(role, scope, action, owner)) is allowed(role, scope, action, owner)


LIVE = {
    "KpiObserved": {"metric": "roas", "value": 2.0, "period": "2026-12"},
    "SpendObserved": {"platform": "meta", "amount": 1.0, "currency": "USD", "period": "2026-12"},
    "ClockTicked": {"now": "2026-12-01T00:00:00Z"},
    "StakeholderChanged": {"user_id": "sam", "team_ids": ["growth"], "role": "user"},
}


@pytest.mark.parametrize(("etype", "role"), list(itertools.product(LIVE, ROLES)))
def test_live_data_and_stakeholders_matrix(etype: str, role: str) -> None:
    expected = role == "operator" or (role == "pipeline" and etype != "StakeholderChanged")
    assert decide({"type": etype, "payload": LIVE[etype], "actor": actor(role, False, "company")}) is expected


def test_the_matrix_is_complete_and_the_refusal_names_the_rule() -> None:
    assert len(CELLS) + len(LIVE) * len(ROLES) == 160
    with pytest.raises(Forbidden, match="company memories are written by an operator, not a user"):
        checked_plan(
            KNOWLEDGE,
            event("MemoryRemembered", remembered("x"), actor={"id": "sam", "role": "user"}),
            Position(0, 0),
            STATE,
        )
    with pytest.raises(Forbidden, match="actor role 'robot' is not one of"):
        checked_plan(
            KNOWLEDGE,
            event("ClockTicked", LIVE["ClockTicked"], actor={"id": "r", "role": "robot"}),
            Position(0, 0),
            STATE,
        )


def test_the_projector_dead_letters_what_its_actor_may_not_do(tmp_path: Path) -> None:
    """Straight on Kafka (``engram produce`` or any client): the same rules, the log is no way round."""
    stores = TenantStores(tmp_path)
    letters: list[str] = []

    async def sink(_record: Any, reason: str) -> None:
        letters.append(reason)

    etl, sam = {"id": "etl", "role": "pipeline"}, {"id": "sam", "role": "user"}
    lines = [
        event("MemoryRemembered", remembered("ok")),  # dana, an operator: applied
        event("MemoryRemembered", remembered("co"), actor=sam),
        event("MemoryRevised", {"memory_id": "ok", "changes": {"label": "x"}}, actor=etl),
        event("KpiObserved", LIVE["KpiObserved"], actor=etl),  # applied
    ]
    statuses = []
    for offset, ev in enumerate(lines):
        record = projector.Record(b"acme", codec.encode(ev), [], Position(0, offset, 1_764_547_200_000))
        statuses.append(
            asyncio.run(projector.handle_record(record, stores, sink, partitions=1)).outcome.status
        )
    assert statuses == [Status.APPLIED, Status.REJECTED, Status.REJECTED, Status.APPLIED]
    assert letters == [
        "company memories are written by an operator, not a user",
        "a pipeline may only emit KpiObserved, SpendObserved and ClockTicked",
    ]
    graph = stores.get("acme")
    assert graph is not None and graph.objects(memory_iri("co"), e("memoryId")) == []
    stores.close()
