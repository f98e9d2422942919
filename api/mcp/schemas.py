"""A tool's input schema from its route in the API's OpenAPI document, and where each argument goes.

The route's path parameters (but the tenant: the token's), its query parameters and the fields of
its JSON body become one flat object of arguments; the components the body refers to come along
under ``$defs``. What the route declares is what the tool asks for, so the HTTP API and the tools
cannot drift apart.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from engram.api.mcp.verbs import AFTER, HIDDEN, WAIT, Verb

PREFIX = "/v1/tenants/{tenant}"
COMPONENTS = "#/components/schemas/"


class NoRoute(LookupError):
    """The server does not serve the verb's route (not built yet, or renamed)."""


@dataclass(frozen=True)
class Binding:
    """Where a tool's arguments go in its HTTP request."""

    path: frozenset[str] = frozenset()
    query: frozenset[str] = frozenset()
    body: frozenset[str] = frozenset()
    has_body: bool = False
    body_source: bool = False  # the body model takes ``source`` (the MCP layer sets it)
    wait: bool = False  # the route takes ``?wait=true`` (a write: answer once applied if asked)
    after: bool = False  # the route takes ``?after=P:O`` (the session's last write, unless given)
    free_body: bool = False  # every argument goes to the body (``schema_from``)


@dataclass
class ToolSpec:
    verb: Verb
    input_schema: dict[str, Any]
    binding: Binding = field(default_factory=Binding)


def route_operation(openapi: dict[str, Any], verb: Verb) -> dict[str, Any]:
    operation = openapi.get("paths", {}).get(PREFIX + verb.path, {}).get(verb.method.lower())
    if operation is None:
        raise NoRoute(f"{verb.method} {PREFIX + verb.path}")
    return operation  # type: ignore[no-any-return]


def tool_spec(openapi: dict[str, Any], verb: Verb, schema_from: dict[str, Any] | None = None) -> ToolSpec:
    """The tool of ``verb``: its schema and binding, from the route (or ``schema_from``'s schema)."""
    operation = route_operation(openapi, verb)
    parameters = operation.get("parameters", [])
    query_names = {p["name"] for p in parameters if p.get("in") == "query"}
    body_ref = _body_schema(operation)
    body_component = _component(openapi, body_ref) if body_ref is not None else None
    body_props = (body_component or {}).get("properties", {})
    if schema_from is not None:
        schema = copy.deepcopy(schema_from)
        wait = "wait" in query_names
        if wait:
            schema.setdefault("properties", {})["wait"] = {
                "type": "boolean",
                "default": False,
                "description": WAIT,
            }
        binding = Binding(
            query=frozenset({"wait"} if wait else ()),
            has_body=True,
            free_body=True,
            body_source="source" in body_props,
            wait=wait,
        )
        return ToolSpec(verb, schema, binding)

    properties: dict[str, Any] = {}
    required: list[str] = []
    where: dict[str, set[str]] = {"path": set(), "query": set(), "body": set()}
    for p in parameters:
        if p.get("in") not in ("path", "query") or p["name"] in HIDDEN:
            continue
        schema = dict(p.get("schema", {}))
        if "description" in p and "description" not in schema:
            schema["description"] = p["description"]
        if p["name"] in ("wait", "after") and p.get("in") == "query":
            schema["description"] = WAIT if p["name"] == "wait" else AFTER
        properties[p["name"]] = schema
        where[p["in"]].add(p["name"])
        if p.get("required"):
            required.append(p["name"])
    if body_component is not None:
        for name, schema in body_props.items():
            if name in HIDDEN:
                continue
            if name in properties:  # a route whose body and query share a name cannot be flattened
                raise ValueError(f"{verb.name}: {name} is both a parameter and a body field")
            properties[name] = schema
            where["body"].add(name)
        required += [n for n in body_component.get("required", []) if n not in HIDDEN]
    out: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        out["required"] = sorted(set(required))
    if body_component is not None and (dependent := body_component.get("dependentRequired")):
        out["dependentRequired"] = dependent
    defs = _referenced(openapi, out)
    out = _rewrite_refs(out)
    if defs:
        out["$defs"] = {name: _rewrite_refs(s) for name, s in sorted(defs.items())}
    binding = Binding(
        path=frozenset(where["path"]),
        query=frozenset(where["query"]),
        body=frozenset(where["body"]),
        has_body=body_component is not None,
        body_source="source" in body_props,
        wait="wait" in query_names,
        after="after" in query_names,
    )
    return ToolSpec(verb, out, binding)


def _body_schema(operation: dict[str, Any]) -> dict[str, Any] | None:
    content = operation.get("requestBody", {}).get("content", {})
    return content.get("application/json", {}).get("schema")  # type: ignore[no-any-return]


def _component(openapi: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    if ref is None:
        return schema
    return openapi["components"]["schemas"][ref.removeprefix(COMPONENTS)]  # type: ignore[no-any-return]


def _refs(node: Any) -> set[str]:
    if isinstance(node, dict):
        found = {node["$ref"].removeprefix(COMPONENTS)} if isinstance(node.get("$ref"), str) else set()
        return found.union(*(_refs(v) for v in node.values()))
    if isinstance(node, list):
        return set().union(*(_refs(v) for v in node))
    return set()


def _referenced(openapi: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """Every component ``schema`` refers to, transitively."""
    components = openapi.get("components", {}).get("schemas", {})
    out: dict[str, Any] = {}
    todo = list(_refs(schema))
    while todo:
        name = todo.pop()
        if name in out or name not in components:
            continue
        out[name] = components[name]
        todo += _refs(components[name])
    return out


def _rewrite_refs(node: Any) -> Any:
    if isinstance(node, dict):
        return {
            k: (v.replace(COMPONENTS, "#/$defs/") if k == "$ref" and isinstance(v, str) else _rewrite_refs(v))
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_rewrite_refs(v) for v in node]
    return node
