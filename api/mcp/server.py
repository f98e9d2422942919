"""The MCP server both transports share: tools and the context resource, each an HTTP call to the
API's own route with the caller's bearer token.

``Caller`` is who asks and how the API is reached (``stdio``: httpx to a URL; ``http``: httpx's
ASGI transport to the app itself). A refusal is an MCP tool error (``isError``) carrying the
API's status and reason; a transport failure is one too, never a crash.

Writes do not wait for the graph by default: a write tool answers once the log has the write
(``applied: false``, its partition and offset), as the HTTP API's 202 does. Read-your-writes is
carried by the MCP session instead, as the SDK carries it: the session keeps its last write's
position and passes it as ``after=`` to its next ``get_context`` and context resource read, which
answer once the graph has it. A tool call given ``wait: true`` answers once applied.
"""

from __future__ import annotations

import asyncio
import json
import logging
import weakref
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx
import mcp.types as types
from engram.api.mcp.schemas import PREFIX, NoRoute, ToolSpec, route_operation, tool_spec
from engram.api.mcp.verbs import SOURCE, TOOLS, Verb
from mcp.server.lowlevel import Server
from mcp.server.lowlevel.helper_types import ReadResourceContents
from mcp.shared.exceptions import McpError
from pydantic import AnyUrl

log = logging.getLogger(__name__)

NAME = "engram"
CONTEXT_URI = "engram://context"
INSTRUCTIONS = (
    "engram is this tenant's governed memory. Read engram://context (or call get_context) at the "
    "start of a turn; recall before answering from memory; remember what is worth keeping beyond "
    "the conversation as a typed memory. Refusals carry the API's reason: read it, do not retry blindly."
)


class ApiError(Exception):
    """A non-2xx answer of the API (or no answer), as the agent is told it."""

    def __init__(self, status: int | None, reason: str, body: Any = None) -> None:
        super().__init__(f"{status}: {reason}" if status is not None else reason)
        self.status, self.reason, self.body = status, reason, body

    @classmethod
    def of(cls, response: httpx.Response) -> ApiError:
        try:
            body = response.json()
        except ValueError:
            return cls(response.status_code, response.text[:500] or response.reason_phrase)
        detail = body.get("detail") if isinstance(body, dict) else None
        if isinstance(detail, list) and detail:
            parts = []
            for item in detail:
                loc = ".".join(str(x) for x in item.get("loc", []))
                parts.append(f"{item.get('msg', '')}" + (f" ({loc})" if loc else ""))
            return cls(response.status_code, "; ".join(parts), body)
        return cls(response.status_code, json.dumps(body)[:500], body)

    def result(self) -> types.CallToolResult:
        structured = {"status": self.status, "reason": self.reason}
        if isinstance(self.body, dict) and "detail" in self.body:
            structured["detail"] = self.body["detail"]
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=str(self))],
            structuredContent=structured,
            isError=True,
        )


@dataclass(frozen=True)
class Caller:
    """Who calls (the bearer token and the tenant it names) and the client that reaches the API."""

    client: httpx.AsyncClient
    token: str
    tenant: str
    headers: Mapping[str, str] = field(default_factory=dict)  # e.g. the outer request's Host

    async def request(
        self, method: str, path: str, *, params: Mapping[str, Any] | None = None, body: Any = None
    ) -> httpx.Response:
        url = PREFIX.replace("{tenant}", quote(self.tenant, safe="")) + path
        headers = {**self.headers, "Authorization": f"Bearer {self.token}"}
        try:
            kwargs: dict[str, Any] = {"params": params, "headers": headers}
            if body is not None:
                kwargs["json"] = body
            return await self.client.request(method, url, **kwargs)
        except httpx.HTTPError as exc:
            raise ApiError(None, f"the engram API did not answer: {type(exc).__name__}: {exc}") from exc

    async def openapi(self) -> dict[str, Any]:
        try:
            response = await self.client.get("/openapi.json", headers=dict(self.headers))
        except httpx.HTTPError as exc:
            raise ApiError(None, f"the engram API did not answer: {type(exc).__name__}: {exc}") from exc
        if response.status_code != 200:
            raise ApiError.of(response)
        return response.json()  # type: ignore[no-any-return]


class Catalog:
    """The tools the server serves, built once from the API's OpenAPI document (and the memory
    tool's schema for ``remember``): the ontology and the routes are the process's, not a tenant's."""

    def __init__(self, verbs: Iterable[Verb] = TOOLS) -> None:
        self.verbs = tuple(verbs)
        self._specs: dict[str, ToolSpec] | None = None
        self._lock = asyncio.Lock()

    async def specs(self, caller: Caller) -> dict[str, ToolSpec]:
        if self._specs is not None:
            return self._specs
        async with self._lock:
            if self._specs is None:
                self._specs = await self._build(caller)
        return self._specs

    async def _build(self, caller: Caller) -> dict[str, ToolSpec]:
        openapi = await caller.openapi()
        specs: dict[str, ToolSpec] = {}
        for verb in self.verbs:
            try:
                route_operation(openapi, verb)
            except NoRoute as missing:
                log.info("MCP tool %s left out: the server has no route %s", verb.name, missing)
                continue
            schema_from = None
            if verb.schema_from is not None:
                response = await caller.request("GET", verb.schema_from)
                if response.status_code != 200:
                    raise ApiError.of(response)
                schema_from = response.json()["input_schema"]
            specs[verb.name] = tool_spec(openapi, verb, schema_from)
        return specs


def request_parts(spec: ToolSpec, arguments: Mapping[str, Any]) -> tuple[str, dict[str, Any], Any]:
    """The path, query and body of a tool call's request; an argument the tool does not take is an
    error naming it (the schema says ``additionalProperties: false``)."""
    b = spec.binding
    path = spec.verb.path
    query: dict[str, Any] = {}
    body: dict[str, Any] | None = {"source": SOURCE} if b.body_source else ({} if b.has_body else None)
    unknown = []
    for name, value in arguments.items():
        if name in b.path:
            if not isinstance(value, str) or not value:
                raise ApiError(422, f"{name} must be a non-empty string ({name})")
            path = path.replace("{" + name + "}", quote(value, safe=""))
        elif name in b.query:
            if value is not None:
                query[name] = _query_value(value)
        elif b.free_body or name in b.body:
            assert body is not None
            body[name] = value
        else:
            unknown.append(name)
    if unknown:
        takes = sorted(spec.input_schema.get("properties", {}))
        raise ApiError(
            422,
            f"unknown argument(s) {', '.join(sorted(unknown))}; {spec.verb.name} takes {', '.join(takes)}",
        )
    if "{" in path:
        missing = sorted(n for n in b.path if "{" + n + "}" in path)
        raise ApiError(422, f"missing argument(s) {', '.join(missing)}")
    return path, query, body


def _query_value(value: Any) -> Any:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return [_query_value(v) for v in value]
    return value


class Position:
    """A session's read-your-writes position: the furthest ``partition:offset`` a write of the
    session was accepted at (an answer with an older or no position does not move it back)."""

    def __init__(self) -> None:
        self.value: str | None = None

    def note(self, answer: Any) -> None:
        if not isinstance(answer, dict):
            return
        if isinstance(items := answer.get("results"), list):  # a batch: each item accepted
            for item in items:
                self.note(item)
            return
        partition, offset = answer.get("partition"), answer.get("offset")
        if type(partition) is not int or type(offset) is not int or partition < 0 or offset < 0:
            return
        if self.value is not None:
            was_partition, was_offset = (int(x) for x in self.value.split(":"))
            if was_partition == partition and was_offset >= offset:
                return
        self.value = f"{partition}:{offset}"


class Positions:
    """Each MCP session's :class:`Position`, dropped with the session."""

    def __init__(self) -> None:
        self._of: weakref.WeakKeyDictionary[object, Position] = weakref.WeakKeyDictionary()

    def of(self, session: object) -> Position:
        found = self._of.get(session)
        if found is None:
            found = self._of[session] = Position()
        return found


async def call(
    catalog: Catalog,
    caller: Caller,
    name: str,
    arguments: Mapping[str, Any],
    position: Position | None = None,
) -> types.CallToolResult:
    """One tool call: the route's answer as structured content, or the API's refusal as a tool
    error. ``position``: the session's; a write moves it, a read of a route taking ``after`` sends it."""
    position = position or Position()
    try:
        specs = await catalog.specs(caller)
        spec = specs.get(name)
        if spec is None:
            raise ApiError(404, f"no tool {name}; the tools are {', '.join(sorted(specs))}")
        path, query, body = request_parts(spec, arguments)
        if spec.binding.after and "after" not in query and position.value is not None:
            query["after"] = position.value
        response = await caller.request(spec.verb.method, path, params=query, body=body)
        if not response.is_success:
            raise ApiError.of(response)
        answer = response.json()
        if spec.verb.method != "GET":
            position.note(answer)
    except ApiError as refused:
        return refused.result()
    structured = answer if isinstance(answer, dict) else {"data": answer}
    return types.CallToolResult(  # the text is the API's own JSON, as it answered it
        content=[types.TextContent(type="text", text=response.text)],
        structuredContent=structured,
        isError=False,
    )


def build_server(
    caller_for: Callable[[], Awaitable[Caller]], catalog: Catalog | None = None
) -> Server[Any, Any]:
    """The MCP server; ``caller_for`` says who is asking in the request being handled."""
    catalog = catalog or Catalog()
    positions = Positions()
    server: Server[Any, Any] = Server(NAME, version="0.1.0", instructions=INSTRUCTIONS)

    def position() -> Position:
        return positions.of(server.request_context.session)

    @server.list_tools()  # type: ignore[no-untyped-call,untyped-decorator]
    async def list_tools() -> list[types.Tool]:
        try:
            specs = await catalog.specs(await caller_for())
        except ApiError as refused:
            raise McpError(types.ErrorData(code=types.INVALID_REQUEST, message=str(refused))) from refused
        return [
            types.Tool(name=name, description=s.verb.description, inputSchema=s.input_schema)
            for name, s in specs.items()
        ]

    # the API validates every argument (its reasons are the ones the agent is given), not the SDK
    @server.call_tool(validate_input=False)  # type: ignore[untyped-decorator]
    async def call_tool(name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        try:
            caller = await caller_for()
        except ApiError as refused:
            return refused.result()
        return await call(catalog, caller, name, arguments, position())

    @server.list_resources()  # type: ignore[no-untyped-call,untyped-decorator]
    async def list_resources() -> list[types.Resource]:
        return [
            types.Resource(
                uri=AnyUrl(CONTEXT_URI),
                name="context",
                title="Memory context",
                description="What to pre-load each turn (GET …/context as markdown): the top-tier "
                "memories the caller may see with their statuses, the conflicts and the live data.",
                mimeType="text/markdown",
            )
        ]

    @server.read_resource()  # type: ignore[no-untyped-call,untyped-decorator]
    async def read_resource(uri: AnyUrl) -> Iterable[ReadResourceContents]:
        if str(uri) != CONTEXT_URI:
            raise McpError(types.ErrorData(code=types.INVALID_PARAMS, message=f"no resource {uri}"))
        try:
            after = position().value
            params = {"after": after} if after is not None else None
            response = await (await caller_for()).request("GET", "/context", params=params)
            if not response.is_success:
                raise ApiError.of(response)
        except ApiError as refused:
            raise McpError(types.ErrorData(code=types.INVALID_REQUEST, message=str(refused))) from refused
        return [ReadResourceContents(content=response.json()["text"], mime_type="text/markdown")]

    return server
