"""Conversations of one tenant: add turns, read one back, erase it (``commands.conversations``).

A conversation is its owner's (the acting user of its first turn; an agent acting for them sees
it too), and operators' and auditors'; to anyone else every route answers exactly as for a
conversation that does not exist. Turns go to the conversations topic, sealed; the conversation
store (``projections.conversations``) is what reads and ``?wait=true`` look at.
"""

from __future__ import annotations

from typing import Annotated

from engram.api.deps import CurrentPrincipal, CurrentRuntime, TenantId, get_principal, token_actor
from engram.api.errors import problem, responses
from engram.api.models import anchored
from engram.api.models.conversations import (
    ConversationPublic,
    ErasureAccepted,
    TurnAccepted,
    TurnOut,
    TurnsAccepted,
    TurnsCreate,
)
from engram.api.runtime import Runtime
from engram.commands.conversations import ConversationCommands
from engram.schemas import vocabulary as v
from fastapi import APIRouter, Depends, Path, Query

router = APIRouter(
    prefix="/v1/tenants/{tenant}/conversations",
    tags=["conversations"],
    dependencies=[Depends(get_principal)],
    responses=responses(401, 404, 429),
)

ConversationId = Annotated[str, Path(pattern=anchored(v.ID_RE.pattern), description="A conversation id")]


def conversations(runtime: Runtime) -> ConversationCommands:
    if runtime.conversations is None:
        raise problem(503, "conversations are not served by this process", ["path"])
    return runtime.conversations


@router.post(
    "/{conversation_id}/turns",
    response_model=TurnsAccepted,
    status_code=202,
    responses=responses(409, 413, 422, 503, 504),
)
async def add_turns(
    tenant: TenantId,
    conversation_id: ConversationId,
    body: TurnsCreate,
    runtime: CurrentRuntime,
    who: CurrentPrincipal,
    wait: bool = False,
) -> TurnsAccepted:
    """Append one or many turns (sealed) to the conversations topic; with ``wait=true`` answer once
    the conversation store holds them. A turn id sent again with the same words is answered as
    stored; with other words it is a 409."""
    actor = token_actor(who, None)
    accepted = await conversations(runtime).add_turns(
        tenant,
        conversation_id,
        [t.as_turn() for t in body.turns],
        actor=actor,
        source=body.source,
        who=who,
        wait=wait,
    )
    return TurnsAccepted(
        conversation_id=conversation_id,
        turns=[TurnAccepted(turn_id=a.turn_id, event_id=a.event_id, stored=a.stored) for a in accepted],
    )


@router.get("/{conversation_id}", response_model=ConversationPublic, responses=responses(422))
async def get_conversation(
    tenant: TenantId, conversation_id: ConversationId, runtime: CurrentRuntime, who: CurrentPrincipal
) -> ConversationPublic:
    """The conversation's turns (opened), how far extraction got and the memories it made."""
    read = conversations(runtime).read(tenant, conversation_id, who)
    info = read.info
    return ConversationPublic(
        conversation_id=conversation_id,
        owner=info.owner,
        turns=[
            TurnOut(turn_id=t.turn_id, seq=t.seq, speaker=t.speaker, role=t.role, text=t.text, time=t.at)
            for t in read.turns
        ],
        extracted_through=info.extracted_through,
        memory_ids=list(info.memory_ids),
        failed_reason=info.failed_reason,
        last_turn_at=info.last_turn_at,
    )


@router.delete(
    "/{conversation_id}", response_model=ErasureAccepted, status_code=202, responses=responses(422, 503, 504)
)
async def erase_conversation(
    tenant: TenantId,
    conversation_id: ConversationId,
    runtime: CurrentRuntime,
    who: CurrentPrincipal,
    reason: Annotated[str | None, Query(max_length=1024)] = None,
    wait: bool = False,
) -> ErasureAccepted:
    """Erase the conversation (its owner or an operator): every turn key is destroyed when the store
    applies it, so the log keeps only ciphertext of what was said."""
    event_id = await conversations(runtime).erase(
        tenant, conversation_id, who, actor=token_actor(who, None), reason=reason, wait=wait
    )
    return ErasureAccepted(conversation_id=conversation_id, event_id=event_id, erased=wait)
