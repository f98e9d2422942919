"""The authorisation matrix: role by scope by action by owner or not by sees or not, every cell
decided by the projection's own check (the one the API's pre-check and the projector both run),
against an oracle written from the rules as DESIGN §6 and the README state them. A cell ends in one
of three answers: applied, forbidden (403), or unseen: refused exactly as a memory that does not
exist would be, because the actor may not see a memory the event names."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path
from typing import Any

import pytest
from engram.projections import governance
from engram.projections.governance import Forbidden
from engram.projections.knowledge import load_knowledge
from engram.projections.plan import FactSet
from engram.projections.stores import TenantStores
from engram.projections.tenant_graph import Status
from engram.projections.terms import e, memory_iri
from engram.projections.validation import checked_plan
from engram.schemas import payloads
from engram.schemas.checks import InvalidEvent
from engram.schemas.events import Position
from engram.streams import codec, projector

from tests.factories import EXAMPLES, envelope, event, remembered

KNOWLEDGE = load_knowledge()
SCOPES = ("user", "team", "company")
ACTIONS = ("remember", "revise", "supersede", "supersede_by_unseen", "restore", "replace", "forget", "hold")
APPLIED, FORBIDDEN, UNSEEN = "applied", "forbidden", "unseen"
ROLES = ("user", "agent", "operator", "pipeline", "auditor")


def holders(scope: str, user: str) -> dict[str, Any]:
    return {"user": {"user_id": user}, "team": {"team_ids": ["growth"]}, "company": {}}[scope]


def actor(role: str, owner: bool, scope: str, sees: bool = True) -> dict[str, str]:
    """Who acts: for a user-scoped memory the owner is its user, sam; for a shared one its author,
    dana (an operator: only operators write shared memories). A user or an agent who is not the
    owner acts as (or for) gus, a member of the team growth, when it sees the memory, else ann."""
    other = "gus" if sees else "ann"
    if role == "agent":
        return {"id": "drafter", "role": "agent", "on_behalf_of": "sam" if owner else other}
    if role == "operator":
        return {"id": ("sam" if scope == "user" else "dana") if owner else "erin", "role": "operator"}
    if role == "user":
        return {"id": "sam" if owner else other, "role": "user"}
    return {"id": f"{role}-1", "role": role}


def expected(role: str, scope: str, action: str, owner: bool, sees: bool) -> str:
    """The rules, said plainly. What the actor's role alone refuses is refused whatever the memory;
    then every memory the event names must be one the actor may see, else the event is refused as
    if the memory did not exist; only then is the change itself decided."""
    if action in ("forget", "hold"):
        return APPLIED if role in ("operator", "auditor") else FORBIDDEN
    if role in ("pipeline", "auditor"):
        return FORBIDDEN
    may = owner if scope == "user" else role == "operator"  # user-scoped: its user (or an agent
    # for them, or that user holding an operator's token); team and company: operators
    if action == "remember":
        return APPLIED if may else FORBIDDEN
    if not sees or (action == "supersede_by_unseen" and role != "operator"):
        return UNSEEN  # z-private, zed's own memory, is seen by operators alone
    return APPLIED if may else FORBIDDEN


def setup() -> FactSet:
    """For each scope a memory ``m-<scope>`` and a superseded one ``s-<scope>``, written by their
    owners; a company memory ``fresh`` to supersede with; zed's own ``z-private``; gus in growth."""
    private = remembered("z-private", scope="user", stakeholders={"user_id": "zed"})
    lines = [
        envelope("MemoryRemembered", remembered("fresh")),
        envelope("MemoryRemembered", private),
        envelope("StakeholderChanged", {"user_id": "gus", "team_ids": ["growth"], "role": "user"}),
    ]
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


def attempt(role: str, scope: str, action: str, owner: bool, sees: bool = True) -> dict[str, Any]:
    who = actor(role, owner, scope, sees)
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
        case "supersede_by_unseen":  # issue #22: a memory of one's own superseded by one never seen
            return {
                "type": "MemorySuperseded",
                "payload": {"memory_id": target, "superseded_by": "z-private"},
                "actor": who,
            }
        case "restore":
            return {"type": "MemoryRestored", "payload": {"memory_id": f"s-{scope}"}, "actor": who}
        case "hold":
            return {"type": "LegalHoldPlaced", "payload": {"memory_id": target}, "actor": who}
        case _:
            return {"type": "MemoryForgotten", "payload": {"memory_id": target}, "actor": who}  # fmt: skip


def consistent(role: str, scope: str, owner: bool, sees: bool) -> bool:
    """Whether a cell can exist: an owner sees its memory; operators and auditors see every memory
    (a pipeline is refused before anything is read: it gets the one cell); a user-scoped memory is
    seen by its user alone, a company one by everyone, a team one by its members (gus) only."""
    if owner or role in ("operator", "auditor", "pipeline"):
        return sees
    return {"user": not sees, "company": sees, "team": True}[scope]


CELLS = [
    (role, scope, action, owner, sees)
    for role, scope, action, owner, sees in itertools.product(
        ROLES, SCOPES, ACTIONS, (True, False), (True, False)
    )
    # a shared memory's author is an operator: no user or agent owns one
    if not (owner and scope != "user" and role in ("user", "agent"))
    # a pipeline's or an auditor's id is never a memory's user or author
    and not (owner and role in ("pipeline", "auditor"))
    and consistent(role, scope, owner, sees)
]


def decide(line: dict[str, Any]) -> str:
    try:
        checked_plan(
            KNOWLEDGE, event(line["type"], line["payload"], actor=line["actor"]), Position(0, 99), STATE
        )
    except Forbidden:
        return FORBIDDEN
    except InvalidEvent as exc:  # unseen: the answer a memory that does not exist gets
        named = (line["payload"].get(k) for k in ("memory_id", "superseded_by", "replaces"))
        if str(exc) in {f"memory {name} not found" for name in named if name}:
            return UNSEEN
        raise
    return APPLIED


@pytest.mark.parametrize(("role", "scope", "action", "owner", "sees"), CELLS)
def test_memory_matrix(role: str, scope: str, action: str, owner: bool, sees: bool) -> None:
    assert decide(attempt(role, scope, action, owner, sees)) == expected(role, scope, action, owner, sees)


LIVE = {
    "KpiObserved": {"metric": "roas", "value": 2.0, "period": "2026-12"},
    "SpendObserved": {"platform": "meta", "amount": 1.0, "currency": "USD", "period": "2026-12"},
    "ClockTicked": {"now": "2026-12-01T00:00:00Z"},
    "StakeholderChanged": {"user_id": "sam", "team_ids": ["growth"], "role": "user"},
}


@pytest.mark.parametrize(("etype", "role"), list(itertools.product(LIVE, ROLES)))
def test_live_data_and_stakeholders_matrix(etype: str, role: str) -> None:
    allowed = role == "operator" or (role == "pipeline" and etype != "StakeholderChanged")
    answer = decide({"type": etype, "payload": LIVE[etype], "actor": actor(role, False, "company")})
    assert answer == (APPLIED if allowed else FORBIDDEN)


def test_the_matrix_is_complete_and_the_refusal_names_the_rule() -> None:
    """196 cells: 160 before the "cannot see" axis and the supersede-by-an-unseen-memory action."""
    assert len(CELLS) + len(LIVE) * len(ROLES) == 196
    assert sum(expected(*cell) == UNSEEN for cell in CELLS) > 0
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
        (
            "a pipeline may only emit KpiObserved, SpendObserved, ClockTicked, "
            "ConversationTurn and TurnsExtracted"
        ),
    ]
    graph = stores.get("acme")
    assert graph is not None and graph.objects(memory_iri("co"), e("memoryId")) == []
    stores.close()


def test_the_projector_dead_letters_a_reference_to_a_memory_its_actor_cannot_see(tmp_path: Path) -> None:
    """Issue #22 item 4, straight on Kafka: u2 may not supersede its memory with u1's private one,
    nor name it in ``replaces``; both are dead-lettered as a memory that does not exist would be,
    u1's memory gains no ``supersedes``, and the stream goes on."""
    stores = TenantStores(tmp_path)
    letters: list[str] = []

    async def sink(_record: Any, reason: str) -> None:
        letters.append(reason)

    u1, u2 = {"id": "u1", "role": "user"}, {"id": "u2", "role": "user"}
    own = {"scope": "user", "stakeholders": {"user_id": "u2"}}
    lines = [
        event("MemoryRemembered", remembered("p1", scope="user", stakeholders={"user_id": "u1"}), actor=u1),
        event("MemoryRemembered", remembered("o2", **own), actor=u2),
        event("MemorySuperseded", {"memory_id": "o2", "superseded_by": "p1"}, actor=u2),
        event("MemoryRemembered", remembered("n2", replaces="p1", **own), actor=u2),
        event("MemorySuperseded", {"memory_id": "o2", "superseded_by": "nope"}, actor=u2),
        event("MemoryRevised", {"memory_id": "p1", "changes": {"label": "x"}}, actor=u2),
        event("MemoryRevised", {"memory_id": "o2", "changes": {"label": "mine"}}, actor=u2),  # applied
    ]
    statuses = []
    for offset, ev in enumerate(lines):
        record = projector.Record(b"acme", codec.encode(ev), [], Position(0, offset, 1_764_547_200_000))
        statuses.append(
            asyncio.run(projector.handle_record(record, stores, sink, partitions=1)).outcome.status
        )
    assert statuses == [Status.APPLIED] * 2 + [Status.REJECTED] * 4 + [Status.APPLIED]
    p1, nope = "memory p1 not found", "memory nope not found"
    assert letters == [p1, p1, nope, p1]
    graph = stores.get("acme")
    assert graph is not None
    assert list(graph.store.quads_for_pattern(None, e("supersededBy"), memory_iri("p1"), None)) == []
    assert graph.objects(memory_iri("p1"), e("supersededBy")) == []
    stores.close()


# Who may emit each event type, whatever memory it names: the oracle for every payload class by
# role. A new event type is missing here until someone writes down who may emit it.
EMITTED_BY = {
    "MemoryRemembered": {"user", "agent", "operator"},
    "MemoryRevised": {"user", "agent", "operator"},
    "MemorySuperseded": {"user", "agent", "operator"},
    "MemoryRestored": {"user", "agent", "operator"},
    "MemoryForgotten": {"operator", "auditor"},
    "KpiObserved": {"pipeline", "operator"},
    "SpendObserved": {"pipeline", "operator"},
    "ClockTicked": {"pipeline", "operator"},
    "StakeholderChanged": {"operator"},
    "LegalHoldPlaced": {"operator", "auditor"},
    "LegalHoldReleased": {"operator", "auditor"},
    "SessionStarted": {"user", "agent", "operator"},
    "SessionEnded": {"user", "agent", "operator"},
    "EpisodeRecorded": {"user", "agent", "operator"},
    "ToolCalled": {"user", "agent", "operator"},
    "DecisionRecorded": {"user", "agent", "operator"},
    "MemoriesAssociated": {"user", "agent", "operator"},
    "ProposalDecided": {"user", "agent", "operator"},
    "ConversationTurn": {"user", "agent", "operator", "pipeline"},
    "TurnsExtracted": {"agent", "pipeline", "operator"},
    "ConversationErased": {"user", "agent", "operator"},
    "AssociationRemoved": {"user", "agent", "operator"},
}


@pytest.mark.parametrize(("etype", "role"), list(itertools.product(payloads.EVENT_TYPES, [*ROLES, "robot"])))
def test_every_payload_class_and_role_has_a_decision(etype: str, role: str) -> None:
    """Every branch of the Envelope by every role (and one that is none): refused by role unless the
    oracle says the role emits the type; an unknown role is refused for every type."""
    assert etype in EMITTED_BY, f"{etype}: say who may emit it in EMITTED_BY (and in @governs)"
    who = {"id": "sam", "role": role, **({"on_behalf_of": "sam"} if role == "agent" else {})}
    reason = governance.role_refusal(event(etype, dict(EXAMPLES[etype]), actor=who))
    assert (reason is None) == (role in EMITTED_BY[etype]), reason


def test_an_event_type_without_a_decision_fails_closed() -> None:
    """The registry names exactly the payload classes; one left out is named by the import check
    (``projections/governance.py`` raises ImportError with it: docs/events.md's test imports it so)."""
    assert set(governance.DECISIONS) == set(payloads.PAYLOADS.values())
    without = {k: d for k, d in governance.DECISIONS.items() if k is not payloads.StakeholderChanged}
    assert governance.undecided(without) == ["StakeholderChanged"]
    with pytest.raises(ImportError, match="two governance decisions for ClockTicked"):
        governance.governs(payloads.ClockTicked, roles=(), refused="")(lambda *_: None)


def test_the_pipelines_refusal_lists_what_a_pipeline_may_emit() -> None:
    line = event("MemoryRemembered", remembered("x"), actor={"id": "etl", "role": "pipeline"})
    assert governance.role_refusal(line) == (
        "a pipeline may only emit KpiObserved, SpendObserved, ClockTicked, "
        "ConversationTurn and TurnsExtracted"
    )
