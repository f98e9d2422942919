"""Proposals at the HTTP edge: the pending ones, and a person's answer to one."""

from __future__ import annotations

from engram.api.models.memories import Attribution, MemoryPublic
from engram.schemas import vocabulary as v
from pydantic import BaseModel, Field, StrictStr


class ProposalPublic(BaseModel):
    """A pending proposal: an extracted memory that would replace a person's (or several), inactive
    until a person accepts it."""

    id: str = Field(description="The proposal's memory id: accept or reject it by this id")
    proposal: MemoryPublic = Field(description="The memory proposed (not active while pending)")
    replaces: MemoryPublic = Field(
        description="The active memory it would supersede if accepted (the first of replaces_all, by id)"
    )
    replaces_all: list[MemoryPublic] = Field(
        default_factory=list,
        description="Every active memory it would supersede if accepted, by id: an extracted memory "
        "that contradicts several a person entered proposes to replace them all",
    )
    reason: str | None = Field(None, description="Why it was proposed (the writer's purpose), if given")
    proposed_at: str | None = Field(None, description="System time the log recorded the proposal")


class ProposalsPublic(BaseModel):
    data: list[ProposalPublic]
    count: int


class ProposalDecisionRequest(Attribution):
    """Who answers, from where (source ``extraction`` is refused: the workflow that proposes does
    not decide), and optionally why."""

    reason: StrictStr | None = Field(None, max_length=v.REASON_MAX, description="Why, kept with the decision")
