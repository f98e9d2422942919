"""The Avro files are the one definition: payload classes, enums, request models and the memory
tool must say what they say (fields, defaults, symbols, limits), or this fails."""

from __future__ import annotations

import dataclasses
import json
from enum import StrEnum
from typing import Any

import pytest
from engram.api.models import KpiCreate, MemoryCreate, RecallRequest
from engram.projections.governance import DECISIONS
from engram.projections.knowledge import load_knowledge
from engram.projections.memory_tool import memory_tool
from engram.projections.plan import FIELD_PREDICATES, PLANNERS, FactSet
from engram.projections.validation import checked_plan
from engram.schemas import avro_dir
from engram.schemas import payloads as ev
from engram.schemas import vocabulary as v
from engram.schemas.events import Position

from tests.factories import EXAMPLES, event, remembered

MISSING = object()


def avro(name: str) -> dict[str, Any]:
    return json.loads((avro_dir() / f"{v.EVENT_NAMESPACE}.{name}.avsc").read_text())


def dataclass_default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return MISSING


@pytest.mark.parametrize("name", [*ev.EVENT_TYPES, "Stakeholders"])
def test_every_payload_class_has_its_records_fields_in_order_with_its_defaults(name: str) -> None:
    record = avro(name)
    cls = ev.PAYLOADS.get(name) or getattr(ev, name)
    fields = dataclasses.fields(cls)
    assert [f.name for f in fields] == [f["name"] for f in record["fields"]]
    for f, declared in zip(fields, record["fields"], strict=True):
        mine = dataclass_default(f)
        if "default" not in declared:
            assert mine is MISSING, f"{name}.{f.name}: Avro has no default, the class has {mine!r}"
        else:
            assert mine is not MISSING, f"{name}.{f.name}: Avro's default {declared['default']!r} is missing"
            assert ev.thaw(mine) == declared["default"], f"{name}.{f.name}"


def test_each_event_type_of_the_union_has_a_class_a_planner_a_decision_and_an_example() -> None:
    union = next(t["type"] for t in avro("Envelope")["fields"] if t["name"] == "payload")
    assert tuple(name.removeprefix("engram.events.") for name in union) == ev.EVENT_TYPES
    assert list(ev.PAYLOADS) == list(ev.EVENT_TYPES)
    assert set(PLANNERS) == set(ev.PAYLOADS.values())
    assert set(DECISIONS) == set(ev.PAYLOADS.values())
    assert set(EXAMPLES) == set(ev.EVENT_TYPES)


@pytest.mark.parametrize(
    ("enum", "avro_name"),
    [
        (v.Kind, "Kind"),
        (v.Scope, "Scope"),
        (v.Source, "Source"),
        (v.OnConflict, "OnConflict"),
        (v.ProposalDecision, "ProposalDecision"),
        (v.TurnRole, "TurnRole"),
    ],
)
def test_enums_are_the_avro_symbols(enum: type[StrEnum], avro_name: str) -> None:
    assert [m.value for m in enum] == avro(avro_name)["symbols"]


def _schema(model: Any) -> dict[str, Any]:
    return model.model_json_schema(mode="validation")


def _enum(schema: dict[str, Any], prop: dict[str, Any]) -> list[str]:
    """The enum a property of a JSON schema allows, following $ref, anyOf and array items."""
    while True:
        if "$ref" in prop:
            prop = schema["$defs"][prop["$ref"].rsplit("/", 1)[-1]]
        elif "items" in prop:
            prop = prop["items"]
        elif "anyOf" in prop:
            prop = next(p for p in prop["anyOf"] if p.get("type") != "null")
        else:
            return prop["enum"]  # type: ignore[no-any-return]


def test_request_models_take_the_enums_and_limits_of_the_events() -> None:
    memory = _schema(MemoryCreate)
    props = memory["properties"]
    assert _enum(memory, props["kind"]) == [k.value for k in v.Kind]
    assert _enum(memory, props["scope"]) == [s.value for s in v.Scope]
    assert _enum(memory, props["source"]) == [s.value for s in v.Source]
    assert _enum(memory, props["on_conflict"]) == [c.value for c in v.OnConflict]
    assert props["label"]["maxLength"] == v.LABEL_MAX
    assert props["content"]["maxLength"] == v.CONTENT_MAX
    assert (props["importance"]["minimum"], props["importance"]["maximum"]) == (
        min(v.Importance),
        max(v.Importance),
    )
    embedding = next(p for p in props["embedding"]["anyOf"] if p.get("type") == "array")
    assert embedding["maxItems"] == v.EMBEDDING_MAX_DIM
    # the request's payload fields are the event's (the envelope's aside)
    envelope = {"event_id", "source", "actor", "occurred_at", "purpose", "correlation_id"}
    payload_fields = {f.name for f in dataclasses.fields(ev.MemoryRemembered)} - {"sealed"}  # engram seals
    assert set(props) - envelope == payload_fields
    kpi = _schema(KpiCreate)["properties"]
    assert set(kpi) - envelope == {f.name for f in dataclasses.fields(ev.KpiObserved)}
    recall = _schema(RecallRequest)
    assert _enum(recall, recall["properties"]["kind"]) == [k.value for k in v.Kind]


def test_the_memory_tool_takes_the_enums_and_limits_of_the_events() -> None:
    tool = memory_tool(load_knowledge())["parameters"]["properties"]
    assert tool["kind"]["enum"] == [k.value for k in v.Kind]
    assert tool["scope"]["enum"] == [s.value for s in v.Scope]
    assert tool["label"]["maxLength"] == v.LABEL_MAX
    assert tool["content"]["maxLength"] == v.CONTENT_MAX


def test_an_event_type_without_a_class_fails_at_import(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ev, "EVENT_TYPES", (*ev.EVENT_TYPES, "BudgetRaised"))
    with pytest.raises(ImportError, match="no payload class for the Envelope's BudgetRaised"):
        ev._registry()


def test_a_revision_can_set_exactly_the_fields_the_projection_maps() -> None:
    assert set(FIELD_PREDICATES) == set(ev.REVISABLE_FIELDS)


def test_the_predicates_engram_reserves_are_the_ones_the_projection_writes() -> None:
    """Every event about a memory, applied: what it wrote on the memory, less its class properties."""
    state, written = FactSet(), set()
    steps = [
        ("MemoryRemembered", EXAMPLES["MemoryRemembered"]),
        ("MemoryRemembered", {**EXAMPLES["MemoryRemembered"], "memory_id": "m2", "replaces": "m1"}),
        ("MemoryRemembered", remembered("m3", scope="user", stakeholders={"user_id": "sam"})),
        ("MemoryRestored", {"memory_id": "m1"}),
        ("MemoryRevised", EXAMPLES["MemoryRevised"]),
        ("MemorySuperseded", EXAMPLES["MemorySuperseded"]),
        ("LegalHoldPlaced", {"memory_id": "m2", "reason": "case 17"}),
        ("LegalHoldReleased", {"memory_id": "m2"}),
        ("MemoryRemembered", remembered("m5", proposes="m2")),
        ("ProposalDecided", {"memory_id": "m5", "decision": "accepted", "reason": "the new one is right"}),
        ("MemoryForgotten", EXAMPLES["MemoryForgotten"]),
    ]
    properties = set(EXAMPLES["MemoryRemembered"]["properties"]) | set(
        EXAMPLES["MemoryRevised"]["property_changes"]
    )
    for offset, (etype, payload) in enumerate(steps):
        ev = event(etype, payload, purpose="a test of what the projection writes")
        delta = checked_plan(load_knowledge(), ev, Position(0, offset), state)
        state.apply(delta)
        written |= {
            q.predicate.value.removeprefix(v.ENGRAM)
            for q in delta.adds
            if q.subject.value.startswith("urn:engram:memory:") and q.predicate.value.startswith(v.ENGRAM)
        }
    assert written - properties == v.MEMORY_PREDICATES
