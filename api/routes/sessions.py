"""Agent sessions (DESIGN §7): start and end one, record its episodes and tool calls, and read its
narrative back (``episodes_in``: episodes, tool calls and decisions in the order the log has them).

Thin over the command layer: each write is an event (SessionStarted, SessionEnded, EpisodeRecorded,
ToolCalled) decided by ``projections.governance`` like every other; a session is its acting user's,
and one the principal may not see is answered 404 exactly as one that does not exist.
"""

from __future__ import annotations

from typing import Annotated, Any

from engram.api.deps import (
    Commands,
    CurrentPrincipal,
    CurrentView,
    IdempotencyKey,
    TenantId,
    get_principal,
    not_found,
    write_attribution,
)
from engram.api.errors import responses
from engram.api.models import anchored
from engram.api.models.agents import (
    AgentAccepted,
    EpisodeCreate,
    SessionEnd,
    SessionNarrative,
    SessionStart,
    ToolCallCreate,
)
from engram.commands.answers import Accepted
from engram.projections.agents import episodes_in, may_see_node
from engram.schemas import vocabulary as v
from fastapi import APIRouter, Depends, Path

router = APIRouter(
    prefix="/v1/tenants/{tenant}/sessions",
    tags=["agent work"],
    dependencies=[Depends(get_principal)],
    responses=responses(401, 404, 429),
)

SessionId = Annotated[str, Path(pattern=anchored(v.ID_RE.pattern), description="A session id")]
WRITES = responses(403, 409, 413, 422, 503, 504)


def answer(accepted: tuple[Accepted, str]) -> AgentAccepted:
    done, node_id = accepted
    return AgentAccepted(
        event_id=done.event_id, partition=done.partition, offset=done.offset, applied=done.applied, id=node_id
    )


@router.post("", response_model=AgentAccepted, status_code=202, responses=WRITES)
async def start_session(
    tenant: TenantId,
    body: SessionStart,
    commands: Commands,
    who: CurrentPrincipal,
    idempotency_key: IdempotencyKey = None,
    wait: bool = False,
) -> AgentAccepted:
    """Append SessionStarted: a session of the token's agent (or user), for its acting user."""
    by = write_attribution(tenant, body, who, idempotency_key)
    payload = {"session_id": body.session_id, "goal": body.goal}
    return answer(await commands.record_agent_work(tenant, "SessionStarted", payload, by, wait=wait))


@router.post("/{session_id}/end", response_model=AgentAccepted, status_code=202, responses=WRITES)
async def end_session(
    tenant: TenantId,
    session_id: SessionId,
    body: SessionEnd,
    commands: Commands,
    who: CurrentPrincipal,
    idempotency_key: IdempotencyKey = None,
    wait: bool = False,
) -> AgentAccepted:
    """Append SessionEnded; nothing more is recorded in the session (409 after)."""
    by = write_attribution(tenant, body, who, idempotency_key)
    payload = {"session_id": session_id, "outcome": body.outcome}
    return answer(await commands.record_agent_work(tenant, "SessionEnded", payload, by, wait=wait))


@router.post("/{session_id}/episodes", response_model=AgentAccepted, status_code=202, responses=WRITES)
async def record_episode(
    tenant: TenantId,
    session_id: SessionId,
    body: EpisodeCreate,
    commands: Commands,
    who: CurrentPrincipal,
    idempotency_key: IdempotencyKey = None,
    wait: bool = False,
) -> AgentAccepted:
    """Append EpisodeRecorded: one step of the session's narrative."""
    by = write_attribution(tenant, body, who, idempotency_key)
    payload = {"episode_id": body.episode_id, "session_id": session_id, "summary": body.summary}
    return answer(await commands.record_agent_work(tenant, "EpisodeRecorded", payload, by, wait=wait))


@router.post("/{session_id}/tool-calls", response_model=AgentAccepted, status_code=202, responses=WRITES)
async def record_tool_call(
    tenant: TenantId,
    session_id: SessionId,
    body: ToolCallCreate,
    commands: Commands,
    who: CurrentPrincipal,
    idempotency_key: IdempotencyKey = None,
    wait: bool = False,
) -> AgentAccepted:
    """Append ToolCalled: the tool, a digest of its arguments (never the arguments), the outcome."""
    by = write_attribution(tenant, body, who, idempotency_key)
    payload: dict[str, Any] = {
        "call_id": body.call_id,
        "session_id": session_id,
        "episode_id": body.episode_id,
        "tool": body.tool,
        "arguments_digest": body.arguments_digest,
        "outcome": body.outcome,
    }
    return answer(await commands.record_agent_work(tenant, "ToolCalled", payload, by, wait=wait))


@router.get("/{session_id}/episodes", response_model=SessionNarrative, responses=responses(422))
async def session_episodes(tenant: TenantId, session_id: SessionId, view: CurrentView) -> SessionNarrative:
    """``episodes_in``: the session's episodes, tool calls and decisions, in log order."""
    if view.graph is None or not may_see_node(view.graph, view.who, "session", session_id):
        raise not_found(f"session {session_id}")
    return SessionNarrative.model_validate(episodes_in(view.graph, session_id, view.sees))
