"""Forms from the ontology, and form fields back into the API's bodies.

The create form of a class is generated from the ``remember`` tool's JSON Schema (the memory-tool
route, itself generated from the ontology and the SHACL shapes), so a class added in Turtle gets a
form with no code. The edit form keeps PATCH's three states per field: ``keep`` leaves the field out
(untouched), ``clear`` sends ``null``, ``set`` sends the value. Values are converted by the schema's
type only; what they must be is the API's to say (its 422 is shown as given).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from engram.schemas import vocabulary as v
from engram.schemas.payloads import REVISABLE_FIELDS

CORE_TEXT = ("label", "content")
PROPERTY_PREFIX = "p."
STATE_PREFIX = "state."
STATES = ("keep", "clear", "set")


class FormError(ValueError):
    """A field that cannot be read as its type: shown beside the form, nothing is sent."""


@dataclass(frozen=True)
class Field:
    """One input of a generated form."""

    name: str
    type: str  # string, number, integer, boolean, date-time, enum
    required: bool = False
    enum: list[Any] = field(default_factory=list)
    minimum: float | None = None
    maximum: float | None = None
    description: str | None = None


def classes(tool: Mapping[str, Any]) -> list[str]:
    """The memory classes a memory may be written as (the tool's ``memory_class`` enum)."""
    return list(tool["input_schema"]["properties"]["memory_class"]["enum"])


def class_fields(tool: Mapping[str, Any], memory_class: str) -> list[Field]:
    """The typed properties of ``memory_class``: the property shapes of it and its superclasses."""
    branches = tool["input_schema"]["dependentSchemas"]["memory_class"]["anyOf"]
    for branch in branches:
        if branch["title"] == memory_class:
            props = branch["properties"]["properties"]
            required = set(props.get("required", []))
            return [_field(n, s, n in required) for n, s in props.get("properties", {}).items()]
    raise FormError(f"unknown memory class {memory_class!r}")


def _field(name: str, schema: Mapping[str, Any], required: bool) -> Field:
    parts = schema.get("allOf", [schema])
    merged: dict[str, Any] = {}
    for part in parts:
        merged.update(part)
    kind = merged.get("type", "string")
    if isinstance(kind, list):
        kind = "number" if "number" in kind else "string"
    if "enum" in merged:
        kind = "enum"
    elif merged.get("format") == "date-time":
        kind = "date-time"
    return Field(
        name,
        kind,
        required,
        list(merged.get("enum", [])),
        merged.get("minimum"),
        merged.get("maximum"),
        merged.get("description"),
    )


def value(f: Field, raw: str) -> Any:
    """``raw`` as the field's JSON type."""
    text = raw.strip()
    try:
        if f.type == "integer":
            return int(text)
        if f.type == "number":
            number = float(text)
            return (
                int(number) if number.is_integer() and "." not in text and "e" not in text.lower() else number
            )
        if f.type == "boolean":
            if text.lower() not in ("true", "false"):
                raise ValueError(text)
            return text.lower() == "true"
        if f.type == "enum":
            for option in f.enum:
                if str(option) == text:
                    return option
            raise ValueError(text)
    except ValueError:
        raise FormError(f"{f.name}: {text[:40]!r} is not a valid {f.type}") from None
    return raw


def create_body(tool: Mapping[str, Any], form: Mapping[str, str]) -> dict[str, Any]:
    """The body of ``POST …/memories`` from the generated form (empty optional fields left out)."""
    memory_class = form.get("memory_class", "Memory")
    body: dict[str, Any] = {
        "label": form.get("label", ""),
        "content": form.get("content", ""),
        "kind": form.get("kind", ""),
        "scope": form.get("scope", "company"),
        "memory_class": memory_class,
        "importance": value(Field("importance", "integer"), form.get("importance", "")),
        "confidence": value(Field("confidence", "number"), form.get("confidence", "1") or "1"),
    }
    if form.get("expires_at", "").strip():
        body["expires_at"] = form["expires_at"].strip()
    if form.get("user_id", "").strip():
        body["stakeholders"] = {"user_id": form["user_id"].strip()}
    if form.get("team_ids", "").strip():
        teams = [t.strip() for t in form["team_ids"].split(",") if t.strip()]
        body.setdefault("stakeholders", {})["team_ids"] = teams
    props = {}
    for f in class_fields(tool, memory_class):
        raw = form.get(PROPERTY_PREFIX + f.name, "")
        if raw.strip():
            props[f.name] = value(f, raw)
    if props:
        body["properties"] = props
    return body


_CORE = {
    "label": Field("label", "string"),
    "content": Field("content", "string"),
    "kind": Field("kind", "enum", enum=[k.value for k in v.Kind]),
    "importance": Field("importance", "integer"),
    "confidence": Field("confidence", "number"),
    "expires_at": Field("expires_at", "date-time"),
}
# every field a revision may change, in the events' order (a new one without an input here fails
# at import, not silently)
EDITABLE = tuple(_CORE[name] for name in REVISABLE_FIELDS)


def patch_body(fields: list[Field], form: Mapping[str, str]) -> dict[str, Any]:
    """The body of ``PATCH …/memories/{id}``: per field, absent (keep), ``null`` (clear) or a value
    (set). ``fields`` are the core ones (``EDITABLE``) and the class's properties (``p.`` names)."""
    body: dict[str, Any] = {}
    props: dict[str, Any] = {}
    for f in fields:
        is_prop = f.name.startswith(PROPERTY_PREFIX)
        state = form.get(STATE_PREFIX + f.name, "keep")
        if state not in STATES:
            raise FormError(f"{f.name}: state must be one of {', '.join(STATES)}")
        if state == "keep":
            continue
        name = f.name.removeprefix(PROPERTY_PREFIX)
        got = None if state == "clear" else value(f, form.get(f.name, ""))
        (props if is_prop else body)[name] = got
    if props:
        body["properties"] = props
    return body
