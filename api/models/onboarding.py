"""Onboarding: a new tenant's first objective, one durable fact and one preference, and what is
still missing. Each slot has the fields of any memory's request, with onboarding's defaults."""

from __future__ import annotations

from typing import Any, Literal

from engram.api.models.fields import (
    CLASS_PATTERN,
    NON_BLANK,
    EdgeModel,
    Float,
    Id,
    Int,
    PropertyName,
    PropertyValue,
    Timestamp,
    anchored,
)
from engram.api.models.memories import Accepted
from engram.schemas import vocabulary as v
from pydantic import BaseModel, Field, StrictStr, model_validator
from pydantic_core import PydanticCustomError

Slot = Literal["objective", "fact", "preference"]
BudgetPeriod = Literal["day", "week", "month", "quarter", "year"]


class TargetIn(EdgeModel):
    """A performance target: a metric the ontology defines (or the tenant already reports) and its goal."""

    metric: StrictStr = Field(pattern=anchored(r"[a-z][a-z0-9_]{0,63}"), examples=["roas"])
    goal: Float = Field(examples=[3.0])


class BudgetIn(EdgeModel):
    """A spend cap on a platform for a kind of period."""

    platform: StrictStr = Field(pattern=anchored(v.NAME_RE.pattern), examples=["meta"])
    amount: Float = Field(gt=0, examples=[40000])
    currency: StrictStr = Field(pattern=anchored(v.CURRENCY_RE.pattern), examples=["USD"])
    period: BudgetPeriod = "month"


class OnboardingMemory(EdgeModel):
    memory_id: Id | None = Field(None, description="Derived from the tenant, slot and body if absent.")
    label: StrictStr = Field(min_length=1, max_length=v.LABEL_MAX, pattern=NON_BLANK)
    content: StrictStr = Field(min_length=1, max_length=v.CONTENT_MAX, pattern=NON_BLANK)
    importance: Int | None = Field(
        None,
        ge=min(v.Importance),
        le=max(v.Importance),
        description="Critical (5) for the objective, else High (4)",
    )

    def memory(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True, exclude={"target", "budget"})


class ObjectiveIn(OnboardingMemory):
    """The first objective: exactly one of ``target`` or ``budget``."""

    target: TargetIn | None = None
    budget: BudgetIn | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> ObjectiveIn:
        if (self.target is None) == (self.budget is None):
            raise PydanticCustomError(
                "objective_kind",
                "an objective is either a target (metric, goal) or a budget, not both or neither",
            )
        return self

    def memory(self) -> dict[str, Any]:
        if self.target is not None:
            cls, properties = "PerformanceTargetMemory", self.target.model_dump()
        else:
            assert self.budget is not None
            cls, properties = "BudgetConstraintMemory", self.budget.model_dump()
        return {**super().memory(), "memory_class": cls, "properties": properties}


class FactIn(OnboardingMemory):
    """A durable fact or a preference: a plain memory, or one of a class of the ontology."""

    memory_class: StrictStr = Field("Memory", max_length=2048, pattern=CLASS_PATTERN)
    properties: dict[PropertyName, PropertyValue] = Field(
        default_factory=dict, max_length=64, json_schema_extra={"additionalProperties": False}
    )


class OnboardingRequest(EdgeModel):
    """Any of the three slots (a partial body fills what it gives); at least one."""

    objective: ObjectiveIn | None = None
    fact: FactIn | None = None
    preference: FactIn | None = None
    occurred_at: Timestamp | None = Field(None, description="Valid time of all three; defaults to now.")

    @model_validator(mode="after")
    def _something(self) -> OnboardingRequest:
        if self.objective is None and self.fact is None and self.preference is None:
            reason = "nothing to onboard: give an objective, a fact or a preference"
            raise PydanticCustomError("missing", reason)
        return self

    def memories(self) -> dict[str, dict[str, Any]]:
        slots = {"objective": self.objective, "fact": self.fact, "preference": self.preference}
        return {slot: given.memory() for slot, given in slots.items() if given is not None}


class OnboardingAccepted(BaseModel):
    """Where the log recorded each slot's memory (null: not in this request)."""

    objective: Accepted | None = None
    fact: Accepted | None = None
    preference: Accepted | None = None


class OnboardingPresent(BaseModel):
    objective: list[str] = Field(default_factory=list)
    fact: list[str] = Field(default_factory=list)
    preference: list[str] = Field(default_factory=list)


class OnboardingStatus(BaseModel):
    """The active onboarding memories by slot (newest first) and the slots with none yet."""

    present: OnboardingPresent
    missing: list[Slot]
    complete: bool
