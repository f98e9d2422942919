"""The ``remember`` tool: a function-calling definition for writing a typed memory.

It is generated from the ontology and the SHACL shapes, never kept by hand, so a class or a
property added in Turtle reaches the agents with no code change, and the schema an agent is shown
says what the shapes will check: the properties of a class are the property shapes targeting it
and every superclass, required where sh:minCount >= 1.

The top-level fields are MemoryCreate's body names; attribution (source, actor, event id) is not
the model's to choose and is left to the route. The per-class branches sit under
``dependentSchemas.memory_class`` rather than in a top-level ``oneOf``: Anthropic refuses a tool
whose ``input_schema`` has ``oneOf``/``anyOf``/``allOf`` at the top level, and since
``memory_class`` is required the two mean the same. The branches are an ``anyOf`` (each pins
``memory_class`` to one name, so at most one can match) because more function-calling dialects
accept ``anyOf`` than ``oneOf``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from engram.projections.knowledge import Knowledge
from engram.projections.shapes import PropertyShape
from engram.schemas import vocabulary as v
from pyoxigraph import Literal, RdfFormat, parse

RDFS_LABEL = "http://www.w3.org/2000/01/rdf-schema#label"
RDFS_COMMENT = "http://www.w3.org/2000/01/rdf-schema#comment"
INTEGER_TYPES = ("integer", "int", "long", "short", "byte", "nonNegativeInteger", "positiveInteger")
JSON_TYPES: dict[str, str] = {
    v.XSD + "string": "string",
    v.XSD + "boolean": "boolean",
    v.XSD + "decimal": "number",
    v.XSD + "double": "number",
    v.XSD + "float": "number",
    v.XSD + "dateTime": "string",
    **{v.XSD + t: "integer" for t in INTEGER_TYPES},
}
SCALARS = ["boolean", "number", "string"]  # what a property value may be (api.models.PropertyValue)


def memory_tool(knowledge: Knowledge) -> dict[str, Any]:
    """The ``remember`` tool, under both ``parameters`` (OpenAI) and ``input_schema`` (Anthropic).

    Both keys hold the same schema object. A provider may refuse the key it does not read, so a
    caller sends ``name``, ``description`` and its provider's key. Classes, properties, enums and
    required lists are sorted, so the same ontology always gives the same JSON (and prompt cache).
    """
    texts = _texts(knowledge)
    classes = _memory_classes(knowledge)
    branches = [_branch(knowledge, iri, texts) for iri in classes]
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            **_core_fields(),
            "memory_class": _class_field(classes, texts),
            "properties": {"type": "object", "description": "The typed properties of memory_class."},
        },
        "required": ["content", "importance", "kind", "label", "memory_class"],
        "additionalProperties": False,
        "dependentSchemas": {"memory_class": {"anyOf": branches}},
    }
    description = (
        "Remember a belief worth keeping beyond this conversation, as a typed memory under engram's "
        "ontology. Choose the most specific memory_class that fits and give the properties it requires."
    )
    return {"name": "remember", "description": description, "parameters": schema, "input_schema": schema}


def _core_fields() -> dict[str, Any]:
    """The fields every memory has; limits as api.models.MemoryCreate declares them."""
    tiers = ", ".join(f"{tier.value} {tier.name.title()}" for tier in v.Importance)
    return {
        "label": {
            "type": "string",
            "minLength": 1,
            "maxLength": v.LABEL_MAX,
            "description": "A short title.",
        },
        "content": {
            "type": "string",
            "minLength": 1,
            "maxLength": v.CONTENT_MAX,
            "description": "The belief itself, stated so it can be acted on without this conversation.",
        },
        "kind": {"type": "string", "enum": list(v.Kind), "description": "What sort of belief it is."},
        "scope": {
            "type": "string",
            "enum": list(v.Scope),
            "default": "company",
            "description": "Whom it concerns: user needs stakeholders.user_id, team stakeholders.team_ids.",
        },
        "stakeholders": {
            "type": "object",
            "properties": {
                "user_id": {"type": "string", "pattern": v.ID_RE.pattern},
                "team_ids": {"type": "array", "items": {"type": "string", "pattern": v.ID_RE.pattern}},
            },
            "additionalProperties": False,
        },
        "importance": {
            "type": "integer",
            "minimum": min(v.Importance).value,
            "maximum": max(v.Importance).value,
            "description": f"Importance tier: {tiers}.",
        },
        "confidence": {"type": "number", "minimum": 0, "maximum": 1, "default": 1.0},
        "expires_at": {
            "type": "string",
            "format": "date-time",
            "description": "When the belief stops holding (ISO-8601); omit if it does not expire.",
        },
    }


def _texts(knowledge: Knowledge) -> dict[str, list[str]]:
    """rdfs:label and rdfs:comment of every ontology term (label first), for descriptions."""
    out: dict[str, list[str]] = {}
    for predicate in (RDFS_LABEL, RDFS_COMMENT):
        for t in knowledge.ontology.triples:
            if t.predicate.value == predicate and isinstance(t.object, Literal):
                out.setdefault(t.subject.value, []).append(t.object.value)
    return out


def _describe(parts: Iterable[str | None], name: str) -> str | None:
    """The distinct texts as sentences, leaving out a label that only repeats the name."""
    unique = dict.fromkeys(p.strip() for p in parts if p and p.strip() and p.strip() != name)
    return " ".join(p if p.endswith(".") else p + "." for p in unique) or None


def _name(iri: str) -> str:
    """A class as memory_class names it: engram's own by local name, any other by IRI."""
    return iri.removeprefix(v.ENGRAM) if iri.startswith(v.ENGRAM) else iri


def _memory_classes(knowledge: Knowledge) -> list[str]:
    """Every class under :Memory but those a rule derives (ActiveMemory...): a conclusion, not a belief.

    Asserting a derived class would put a memory where the rules decide membership, for example
    into the live context past its cap.
    """
    derived = knowledge.derived_classes
    memory = [c for c in knowledge.ontology.superclasses if knowledge.ontology.is_memory_class(c)]
    return sorted((c for c in memory if c not in derived), key=_name)


def _class_field(classes: list[str], texts: dict[str, list[str]]) -> dict[str, Any]:
    lines = [f"{_name(c)}: {d}" for c in classes if (d := _describe(texts.get(c, []), _name(c)))]
    return {
        "type": "string",
        "enum": [_name(c) for c in classes],
        "description": "The most specific class of the ontology that fits. " + " ".join(lines),
    }


def _property_name(knowledge: Knowledge, path: str) -> str | None:
    """The properties-map name writing ``path``, or None for a core field or a derived fact."""
    local = path.removeprefix(v.ENGRAM)
    if local == path or not v.full_match(v.NAME_RE, local) or knowledge.reserved(local):
        return None
    return local


def _branch(knowledge: Knowledge, cls: str, texts: dict[str, list[str]]) -> dict[str, Any]:
    """The properties of one class: the property shapes of the class and of every superclass."""
    shapes: dict[str, list[PropertyShape]] = {}
    for target in sorted(knowledge.ontology.superclasses.get(cls, {cls})):
        for node in knowledge.shapes.by_class.get(target, []):
            for prop in node.properties:
                if (name := _property_name(knowledge, prop.path)) is not None:
                    shapes.setdefault(name, []).append(prop)
    fields = {}
    for name in sorted(shapes):
        schemas = [_property_schema(p, texts) for p in shapes[name]]
        fields[name] = schemas[0] if len(schemas) == 1 else {"allOf": schemas}
    required = sorted(name for name, props in shapes.items() if any(p.min_count >= 1 for p in props))
    properties: dict[str, Any] = {"type": "object", "properties": fields, "additionalProperties": False}
    branch: dict[str, Any] = {
        "title": _name(cls),
        "properties": {"memory_class": {"const": _name(cls)}, "properties": properties},
    }
    if required:
        properties["required"] = required
        branch["required"] = ["properties"]
    if description := _describe(texts.get(cls, []), _name(cls)):
        branch["description"] = description
    return branch


def _property_schema(prop: PropertyShape, texts: dict[str, list[str]]) -> dict[str, Any]:
    schema: dict[str, Any] = {}
    types = {JSON_TYPES[d] for d in prop.datatypes if d in JSON_TYPES}
    if "number" in types:
        types.discard("integer")  # a JSON number already admits integers
    if types:
        schema["type"] = types.pop() if len(types) == 1 else sorted(types)
    elif not prop.datatypes and prop.allowed is None:
        schema["type"] = SCALARS
    if prop.datatypes == {v.XSD + "dateTime"}:
        schema["format"] = "date-time"
    if prop.allowed is not None:
        schema["enum"] = sorted((_term_value(t) for t in prop.allowed), key=lambda x: (type(x).__name__, x))
    for key, bound in (
        ("minimum", prop.min_inclusive),
        ("maximum", prop.max_inclusive),
        ("exclusiveMinimum", prop.min_exclusive),
        ("exclusiveMaximum", prop.max_exclusive),
    ):
        if bound is not None:
            schema[key] = int(bound) if bound.is_integer() else bound
    if prop.min_length is not None:
        schema["minLength"] = prop.min_length
    if prop.max_length is not None:
        schema["maxLength"] = prop.max_length
    if prop.pattern_text is not None:
        schema["pattern"] = prop.pattern_text  # ECMA-262's $, like XPath's, is the end of the text
    # sh:name and sh:description, once shapes.py keeps them (it reads and drops them today).
    shape_texts = [getattr(prop, "name", None), getattr(prop, "description", None)]
    if description := _describe([*shape_texts, *texts.get(prop.path, [])], _name(prop.path)):
        schema["description"] = description
    return schema


def _term_value(term: str) -> Any:
    """A serialised sh:in member (``"day"``, ``"5"^^<...#integer>``) as the JSON value that writes it."""
    [quad] = parse(f"<urn:s> <urn:p> {term} .", format=RdfFormat.N_TRIPLES)
    value = quad.object
    if not isinstance(value, Literal):
        return value.value
    kind = JSON_TYPES.get(value.datatype.value)
    if kind == "boolean":
        return value.value in ("true", "1")
    if kind == "integer":
        return int(value.value)
    if kind == "number":
        return float(value.value)
    return value.value
