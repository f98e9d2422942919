"""Pydantic AI: the verbs as tools (or one toolset), and the per-turn context as instructions.

Install with ``pip install 'engram-client[pydantic-ai]'`` (``pydantic-ai-slim``: it adds no model
provider). This module imports pydantic_ai; the rest of the client never does.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

try:
    from pydantic_ai import Tool
    from pydantic_ai.toolsets import FunctionToolset
except ImportError as exc:  # say which extra brings it
    raise ImportError(
        "the Pydantic AI adapter needs pydantic-ai-slim: pip install 'engram-client[pydantic-ai]'"
    ) from exc

from engram_client.client import AsyncEngram, Engram
from engram_client.tools import ToolSpec, specs

__all__ = ["engram_tools", "engram_toolset", "memory_instructions"]


def _tool(spec: ToolSpec, client: Engram | AsyncEngram) -> Tool[Any]:
    if isinstance(client, AsyncEngram):
        aclient = client

        async def arun(**arguments: Any) -> Any:
            return await spec.arun(aclient, arguments)

        function: Callable[..., Any] = arun
    else:
        sclient = client

        def run(**arguments: Any) -> Any:
            return spec.run(sclient, arguments)

        function = run
    return Tool.from_schema(
        function, name=spec.name, description=spec.description, json_schema=spec.json_schema()
    )


def engram_tools(client: Engram | AsyncEngram, names: Sequence[str] | None = None) -> list[Tool[Any]]:
    """The verbs as Pydantic AI tools (``engram_client.tools.DEFAULT_TOOLS`` unless ``names``
    says otherwise). A refused call returns ``{"error", "status", "reason"}`` to the model."""
    return [_tool(spec, client) for spec in specs(names)]


def engram_toolset(client: Engram | AsyncEngram, names: Sequence[str] | None = None) -> FunctionToolset[Any]:
    """The same tools as one toolset: ``Agent(model, toolsets=[engram_toolset(client)])``."""
    return FunctionToolset(engram_tools(client, names))


def memory_instructions(
    client: Engram | AsyncEngram, query: str | None = None
) -> Callable[[], str] | Callable[[], Awaitable[str]]:
    """Instructions that pre-load the memory context on every run (``Agent(instructions=…)``):
    read when the run starts, after the client's last write (read-your-writes)."""
    if isinstance(client, AsyncEngram):
        aclient = client

        async def acontext() -> str:
            return (await aclient.context(query)).text

        return acontext
    sclient = client

    def context() -> str:
        return sclient.context(query).text

    return context
