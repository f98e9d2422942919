"""The console's pure parts: forms generated from the shapes (a class added in Turtle gets a form with
no code), PATCH's three states from the edit form, the CSRF token, and the SVG chart."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from engram.api.console import charts, forms, session
from engram.projections.knowledge import DEFAULT_ONTOLOGY_DIR, DEFAULT_RULES_DIR, load_knowledge
from engram.projections.memory_tool import memory_tool
from engram.schemas import vocabulary as v
from engram.schemas.payloads import REVISABLE_FIELDS

from tests.projections.test_memory_tool import ADDED_CLASS, ADDED_SHAPE

TOOL = memory_tool(load_knowledge())


def test_a_budget_cap_form_is_its_shapes_and_its_body_is_typed() -> None:
    fields = {f.name: f for f in forms.class_fields(TOOL, "BudgetConstraintMemory")}
    assert {n for n, f in fields.items() if f.required} == {"amount", "currency", "platform"}
    assert (fields["amount"].type, fields["period"].type) == ("number", "enum")
    assert "month" in fields["period"].enum
    form = {
        "memory_class": "BudgetConstraintMemory", "label": "TikTok cap", "content": "At most 1,000 a month.",
        "kind": "objective", "importance": "5", "confidence": "1", "p.platform": "tiktok", "p.amount": "1000",
        "p.currency": "USD", "p.period": "month", "p.unknown": "dropped: not a field of the class",
    }  # fmt: skip
    assert forms.create_body(TOOL, form) == {
        "label": "TikTok cap", "content": "At most 1,000 a month.", "kind": "objective", "scope": "company",
        "memory_class": "BudgetConstraintMemory", "importance": 5, "confidence": 1,
        "properties": {"platform": "tiktok", "amount": 1000, "currency": "USD", "period": "month"},
    }  # fmt: skip
    with pytest.raises(forms.FormError, match="amount: 'lots' is not a valid number"):
        forms.create_body(TOOL, form | {"p.amount": "lots"})
    with pytest.raises(forms.FormError, match="unknown memory class"):
        forms.class_fields(TOOL, "NoSuchMemory")


def test_a_class_added_in_turtle_gets_a_form_with_no_code(tmp_path: Path) -> None:
    ontology = tmp_path / "ontology"
    shutil.copytree(DEFAULT_ONTOLOGY_DIR, ontology)
    with (ontology / "recruiting.ttl").open("a") as f:
        f.write(ADDED_CLASS)
    with (ontology / "shapes.ttl").open("a") as f:
        f.write(ADDED_SHAPE)
    assert "SupportEscalationMemory" not in forms.classes(TOOL)
    tool = memory_tool(load_knowledge(ontology, DEFAULT_RULES_DIR))
    assert "SupportEscalationMemory" in forms.classes(tool)
    fields = {f.name: f for f in forms.class_fields(tool, "SupportEscalationMemory")}
    assert (fields["queue"].required, fields["severity"].type, fields["severity"].enum) == (
        True,
        "enum",
        [1, 2, 3],
    )
    assert fields["dueBy"].type == "date-time"


def test_the_edit_form_offers_every_field_a_revision_may_change() -> None:
    assert [f.name for f in forms.EDITABLE] == list(REVISABLE_FIELDS)
    kind = next(f for f in forms.EDITABLE if f.name == "kind")
    assert (kind.type, kind.enum) == ("enum", [k.value for k in v.Kind])


def test_the_edit_form_keeps_clears_and_sets() -> None:
    fields = [*forms.EDITABLE, forms.Field("p.goal", "number"), forms.Field("p.metric", "string")]
    form = {
        "state.label": "keep", "label": "ignored while kept",
        "state.importance": "set", "importance": "4",
        "state.expires_at": "clear", "expires_at": "ignored when cleared",
        "state.p.goal": "set", "p.goal": "3.5",
        "state.p.metric": "clear",
    }  # fmt: skip
    assert forms.patch_body(fields, form) == {
        "importance": 4,
        "expires_at": None,
        "properties": {"goal": 3.5, "metric": None},
    }
    assert forms.patch_body(fields, {"state.kind": "set", "kind": "preference"}) == {"kind": "preference"}
    with pytest.raises(forms.FormError, match="kind: 'opinion' is not a valid enum"):
        forms.patch_body(fields, {"state.kind": "set", "kind": "opinion"})
    assert forms.patch_body(fields, {}) == {}  # nothing named: nothing changes
    with pytest.raises(forms.FormError, match="state must be one of keep, clear, set"):
        forms.patch_body(fields, {"state.label": "drop"})


def test_the_csrf_token_is_the_sessions_own() -> None:
    token = "header.claims.signature"
    assert session.csrf_ok(token, session.csrf_for(token))
    assert not session.csrf_ok(token, session.csrf_for("another.session.token"))
    assert not session.csrf_ok(token, None) and not session.csrf_ok(None, session.csrf_for(token))
    assert not session.csrf_ok(token, "")


def test_a_chart_marks_the_points_over_the_limit() -> None:
    svg = charts.line_chart("spend meta USD", [("2026-10", 30000.0), ("2026-11", 42000.0)], 40000.0)
    assert svg.count('class="over"') == 1 and svg.count('class="point"') == 1
    assert 'class="limit"' in svg and 'aria-label="spend meta USD"' in svg
    assert "<title>2026-11: 42000</title>" in svg
    empty = charts.line_chart("kpi <roas>", [])
    assert "kpi &lt;roas&gt;: no observations" in empty  # names are escaped
