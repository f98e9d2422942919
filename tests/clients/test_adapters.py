"""The framework adapters with their frameworks installed, against a real server: LangChain's
retriever and tools, and a Pydantic AI agent whose scripted model (``FunctionModel``: no LLM)
calls the engram tools in a real agent run."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import pytest
from engram_client import AsyncEngram, Engram
from engram_client.adapters.langchain import EngramRetriever
from engram_client.adapters.langchain import engram_tools as langchain_tools
from engram_client.adapters.pydantic_ai import engram_toolset, memory_instructions
from engram_client.tools import DEFAULT_TOOLS
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from tests.clients.conftest import Live

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def seeded(live: Live) -> tuple[str, str]:
    """A tenant with one memory the tests look for; its id."""
    tenant = f"t{uuid.uuid4().hex[:10]}"
    with Engram(live.url, live.token(tenant)) as mem:
        accepted = mem.remember(
            "Meta budget cap", "Meta ad spend stays under 40,000 USD a month.", importance=5, wait=True
        )
    assert accepted.memory_id
    return tenant, accepted.memory_id


def test_langchain_retriever_sync_and_async(live: Live, seeded: tuple[str, str]) -> None:
    tenant, memory_id = seeded
    with Engram(live.url, live.token(tenant)) as mem:
        docs = EngramRetriever(client=mem, k=3).invoke("how much can we spend on meta ads")
    assert docs[0].id == memory_id and docs[0].metadata["score"] > 0
    assert docs[0].page_content.startswith("Meta budget cap: ")

    async def fetch() -> list[Any]:
        async with AsyncEngram(live.url, live.token(tenant)) as amem:
            return await EngramRetriever(client=amem, k=3).ainvoke("meta budget")

    assert asyncio.run(fetch())[0].id == memory_id


def test_langchain_tools_write_read_and_return_refusals(live: Live, seeded: tuple[str, str]) -> None:
    tenant, memory_id = seeded
    with Engram(live.url, live.token(tenant)) as mem:
        tools = {t.name: t for t in langchain_tools(mem)}
        assert tuple(tools) == DEFAULT_TOOLS
        assert set(tools["remember"].args) >= {"label", "content", "kind", "importance"}

        note = {"label": "Reporting day", "content": "Reports go out on Mondays.", "kind": "context"}
        written = tools["remember"].invoke({**note, "importance": 5})
        context = tools["get_context"].invoke({})  # read-your-writes through the tool's client
        assert "Reporting day" in context and written["position"] == mem.position
        hits = tools["recall"].invoke({"query": "meta spend cap", "limit": 2})
        assert hits[0]["id"] == memory_id
        assert tools["get_memory"].invoke({"memory_id": memory_id})["label"] == "Meta budget cap"

        refused = tools["get_memory"].invoke({"memory_id": "nope"})
        assert refused == {"error": "not_found", "status": 404, "reason": "memory nope not found"}

    async def arecall() -> Any:
        async with AsyncEngram(live.url, live.token(tenant)) as amem:
            (recall,) = langchain_tools(amem, ["recall"])
            return await recall.ainvoke({"query": "meta budget"})

    assert asyncio.run(arecall())[0]["id"] == memory_id


def scripted(tool_calls: list[tuple[str, dict[str, Any]]]) -> FunctionModel:
    """A model that makes the given tool calls one turn each, then answers with every tool return."""

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returns = [p for m in messages for p in getattr(m, "parts", []) if isinstance(p, ToolReturnPart)]
        if len(returns) < len(tool_calls):
            name, args = tool_calls[len(returns)]
            return ModelResponse(parts=[ToolCallPart(name, args)])
        return ModelResponse(parts=[TextPart(json.dumps([r.content for r in returns], default=str))])

    return FunctionModel(model)


def test_a_pydantic_ai_agent_remembers_and_recalls(live: Live, seeded: tuple[str, str]) -> None:
    tenant, _ = seeded
    with Engram(live.url, live.token(tenant)) as mem:
        model = scripted(
            [
                ("remember", {"label": "Brand colour", "content": "Our brand colour is teal."}),
                ("recall", {"query": "what colour is the brand", "limit": 1}),
                ("get_memory", {"memory_id": "nope"}),
            ]
        )
        agent = Agent(model, toolsets=[engram_toolset(mem)], instructions=memory_instructions(mem))
        result = agent.run_sync("Remember our brand colour, then look it up.")
        written, found, refused = json.loads(result.output)
        assert found[0]["id"] == written["memory_id"] and found[0]["label"] == "Brand colour"
        assert refused["status"] == 404 and refused["reason"] == "memory nope not found"
        assert mem.get_memory(written["memory_id"]).content == "Our brand colour is teal."
        # the instructions were the memory context, read when the run started
        first_request = result.all_messages()[0]
        assert "Meta budget cap" in (getattr(first_request, "instructions", None) or "")


def test_a_pydantic_ai_agent_over_the_async_client(live: Live, seeded: tuple[str, str]) -> None:
    tenant, memory_id = seeded

    async def run() -> Any:
        async with AsyncEngram(live.url, live.token(tenant)) as mem:
            model = scripted([("recall", {"query": "meta budget cap"})])
            agent = Agent(model, toolsets=[engram_toolset(mem)])
            return (await agent.run("What is the Meta cap?")).output

    (hits,) = json.loads(asyncio.run(run()))
    assert hits[0]["id"] == memory_id
