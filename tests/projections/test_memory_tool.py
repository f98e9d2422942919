"""The ``remember`` tool follows the ontology and the shapes, and agrees with what the API accepts."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any

import jsonschema_rs
import pytest
from engram.api.models import MemoryCreate
from engram.projections.knowledge import DEFAULT_ONTOLOGY_DIR, DEFAULT_RULES_DIR, load_knowledge
from engram.projections.memory_tool import memory_tool
from engram.projections.plan import no_facts
from engram.projections.validation import checked_plan
from engram.schemas import vocabulary as v
from engram.schemas.checks import InvalidEvent
from engram.schemas.events import Position

from tests.factories import event

KNOWLEDGE = load_knowledge()
TOOL = memory_tool(KNOWLEDGE)
SCHEMA = TOOL["input_schema"]
DRAFT_2020_12 = "https://json-schema.org/draft/2020-12/schema"
BUDGET = {
    "label": "Meta budget",
    "content": "Spend at most 5000 USD a month on Meta.",
    "kind": "objective",
    "importance": 4,
    "memory_class": "BudgetConstraintMemory",
    "properties": {"platform": "meta", "amount": 5000, "currency": "USD", "period": "month"},
}


def branch(schema: dict[str, Any], name: str) -> dict[str, Any]:
    [found] = [
        b
        for b in schema["dependentSchemas"]["memory_class"]["anyOf"]
        if b["properties"]["memory_class"] == {"const": name}
    ]
    return found


def class_properties(schema: dict[str, Any], name: str) -> dict[str, Any]:
    return branch(schema, name)["properties"]["properties"]


def valid(instance: Any, schema: dict[str, Any] = SCHEMA) -> bool:
    return jsonschema_rs.Draft202012Validator(schema, validate_formats=True).is_valid(instance)


def with_properties(**changes: Any) -> dict[str, Any]:
    body = copy.deepcopy(BUDGET)
    body["properties"].update(changes)
    return {**body, "properties": {k: x for k, x in body["properties"].items() if x is not None}}


def test_tool_shape_for_both_providers() -> None:
    assert TOOL["name"] == "remember"
    assert TOOL["parameters"] is TOOL["input_schema"]
    assert SCHEMA["type"] == "object"
    assert not {"oneOf", "anyOf", "allOf"} & set(SCHEMA)  # Anthropic refuses them at the top level
    assert json.loads(json.dumps(TOOL)) == TOOL
    assert json.dumps(memory_tool(KNOWLEDGE), sort_keys=True) == json.dumps(TOOL, sort_keys=True)


def test_is_a_valid_json_schema() -> None:
    jsonschema_rs.meta.validate({"$schema": DRAFT_2020_12, **SCHEMA})
    with pytest.raises(jsonschema_rs.ValidationError):  # the check itself can fail
        jsonschema_rs.meta.validate({"$schema": DRAFT_2020_12, **SCHEMA, "required": "label"})


def test_top_level_fields_are_memory_create_body_names() -> None:
    fields = set(SCHEMA["properties"])
    assert fields == {
        "label", "content", "kind", "scope", "stakeholders", "importance", "confidence", "expires_at",
        "memory_class", "properties",
    }  # fmt: skip
    assert fields <= set(MemoryCreate.model_fields)
    assert set(SCHEMA["required"]) <= fields


def test_kinds_and_scopes_are_the_vocabulary() -> None:
    assert SCHEMA["properties"]["kind"]["enum"] == [k.value for k in v.Kind]
    assert SCHEMA["properties"]["scope"]["enum"] == [s.value for s in v.Scope]


def test_importance_names_the_tiers() -> None:
    importance = SCHEMA["properties"]["importance"]
    assert (importance["type"], importance["minimum"], importance["maximum"]) == ("integer", 1, 5)
    for tier in v.Importance:
        assert f"{tier.value} {tier.name.title()}" in importance["description"]
    assert "1 Disabled" in importance["description"] and "5 Critical" in importance["description"]


def test_memory_classes_come_from_the_ontology_without_derived_ones() -> None:
    names = SCHEMA["properties"]["memory_class"]["enum"]
    assert names == sorted(names)
    assert {"Memory", "MarketingMemory", "BudgetConstraintMemory", "PerformanceTargetMemory"} <= {*names}
    assert not {"ActiveMemory", "LiveCandidate", "LiveContext"} & set(names)  # a rule derives these
    branches = SCHEMA["dependentSchemas"]["memory_class"]["anyOf"]
    assert [b["properties"]["memory_class"]["const"] for b in branches] == names


def test_budget_constraint_branch_follows_shapes_ttl() -> None:
    props = class_properties(SCHEMA, "BudgetConstraintMemory")
    # shapes.ttl: platform, amount and currency have sh:minCount 1; period has none.
    assert props["required"] == ["amount", "currency", "platform"]
    assert {"platform", "amount"} <= set(props["required"])
    fields = props["properties"]
    # sh:or ( double integer ) and sh:minExclusive 0
    assert fields["amount"] == {"type": "number", "exclusiveMinimum": 0}
    assert fields["platform"] == {"type": "string"}
    assert fields["currency"] == {"type": "string", "pattern": "^[A-Z]{3}$"}
    assert fields["period"] == {"enum": ["day", "month", "quarter", "week", "year"]}
    assert "spend cap" in branch(SCHEMA, "BudgetConstraintMemory")["description"]


def test_superclass_shapes_are_inherited_and_core_fields_skipped() -> None:
    technical = class_properties(SCHEMA, "TechnicalHiringCriteriaMemory")
    assert technical["required"] == ["role", "skill"]  # role from HiringCriteriaMemory
    assert class_properties(SCHEMA, "CandidateAssessmentMemory")["properties"]["rating"] == {
        "type": "integer",
        "minimum": 1,
        "maximum": 5,
    }
    # :Memory's shape constrains only core fields (label, kind, importance, ...): none is a property.
    assert class_properties(SCHEMA, "Memory")["properties"] == {}
    for b in SCHEMA["dependentSchemas"]["memory_class"]["anyOf"]:
        assert not any(map(KNOWLEDGE.reserved, b["properties"]["properties"]["properties"]))


def test_sample_bodies_against_the_schema() -> None:
    assert valid(BUDGET)
    assert valid({**BUDGET, "memory_class": "Memory", "properties": {}})
    assert not valid(with_properties(amount=None))
    assert not valid(with_properties(amount="5000"))
    assert not valid(with_properties(amount=0))
    assert not valid(with_properties(currency="usd"))
    assert not valid(with_properties(period="fortnight"))
    assert not valid(with_properties(budget=5000))  # not a property of the class
    assert not valid({**BUDGET, "memory_class": "PerformanceTargetMemory"})
    assert not valid({**BUDGET, "memory_class": "LiveContext"})
    assert not valid({**BUDGET, "importance": 6})
    assert not valid({**BUDGET, "expires_at": "next tuesday"})
    assert not valid({k: x for k, x in BUDGET.items() if k != "properties"})


def remember(body: dict[str, Any]) -> None:
    """What the API does with a tool call: MemoryCreate, then the projection with its shapes."""
    actor = {"id": "bot", "role": "agent"}
    request = MemoryCreate.model_validate({**body, "source": "agent", "actor": actor})
    payload = {**request.payload(), "memory_id": "m1"}
    checked_plan(KNOWLEDGE, event("MemoryRemembered", payload), Position(0, 0), no_facts())


def test_the_tool_and_the_api_agree() -> None:
    remember(BUDGET)
    remember({**BUDGET, "memory_class": "Memory", "properties": {}})
    with pytest.raises(InvalidEvent, match="amount is required"):
        remember(with_properties(amount=None))
    with pytest.raises(InvalidEvent, match="currency must match"):
        remember(with_properties(currency="usd"))


ADDED_CLASS = """
:SupportEscalationMemory a owl:Class ;
    rdfs:subClassOf :Memory ;
    rdfs:comment "How a support ticket is escalated." .
:queue a owl:DatatypeProperty ;
    rdfs:comment "The support queue that takes the escalation." .
"""
ADDED_SHAPE = """
:SupportEscalationMemoryShape a sh:NodeShape ;
    sh:targetClass :SupportEscalationMemory ;
    sh:property [ sh:path :queue ; sh:minCount 1 ; sh:maxCount 1 ; sh:datatype xsd:string ] ;
    sh:property [ sh:path :severity ; sh:maxCount 1 ; sh:in ( 1 2 3 ) ] ;
    sh:property [ sh:path :dueBy ; sh:maxCount 1 ; sh:datatype xsd:dateTime ] ;
    sh:property [ sh:path :label ; sh:maxLength 80 ] .
"""


def test_a_class_added_in_turtle_appears(tmp_path: Path) -> None:
    ontology = tmp_path / "ontology"
    shutil.copytree(DEFAULT_ONTOLOGY_DIR, ontology)
    with (ontology / "recruiting.ttl").open("a") as f:
        f.write(ADDED_CLASS)
    with (ontology / "shapes.ttl").open("a") as f:
        f.write(ADDED_SHAPE)
    assert "SupportEscalationMemory" not in SCHEMA["properties"]["memory_class"]["enum"]

    schema = memory_tool(load_knowledge(ontology, DEFAULT_RULES_DIR))["input_schema"]
    assert "SupportEscalationMemory" in schema["properties"]["memory_class"]["enum"]
    assert branch(schema, "SupportEscalationMemory")["description"] == "How a support ticket is escalated."
    props = class_properties(schema, "SupportEscalationMemory")
    assert props["required"] == ["queue"]
    assert props["properties"] == {
        "queue": {"type": "string", "description": "The support queue that takes the escalation."},
        "severity": {"enum": [1, 2, 3]},
        "dueBy": {"type": "string", "format": "date-time"},
    }  # :label is a core field, not a property
    body = {**BUDGET, "memory_class": "SupportEscalationMemory", "properties": {"queue": "tier2"}}
    assert valid(body, schema)
    assert not valid({**body, "properties": {"severity": 2}}, schema)
    assert class_properties(schema, "BudgetConstraintMemory") == class_properties(
        SCHEMA, "BudgetConstraintMemory"
    )
