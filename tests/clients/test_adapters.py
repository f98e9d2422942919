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
from engram_client.tools import DEFAULT_TOOLS, TOOLS
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from tests.clients.conftest import Live

pytestmark = pytest.mark.integration


META_8K = {"platform": "meta", "amount": 8000, "currency": "USD", "period": "2026-11"}
BREACH = "breaches meta-cap: spend 34,000 + 8,000 = 42,000 of cap 40,000 USD = 105%"


@pytest.fixture(scope="module")
def demo(live: Live) -> str:
    """A tenant with the demo's numbers: Meta cap 40,000 USD a month, 34,000 spent in 2026-11."""
    tenant = f"t{uuid.uuid4().hex[:10]}"
    with Engram(live.url, live.token(tenant)) as op:
        op.remember(
            "Meta monthly cap", "Never spend more than $40k/month on Meta.", kind="objective", importance=5,
            memory_class="BudgetConstraintMemory", memory_id="meta-cap", source="onboarding", wait=True,
            properties={"platform": "meta", "amount": 40000.0, "currency": "USD", "period": "month"},
        )  # fmt: skip
    with Engram(live.url, live.token(tenant, role="pipeline", user="spend-etl")) as etl:
        etl.observe_spend("meta", 34000.0, "USD", "2026-11", source="pipeline", wait=True)
    return tenant


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


def test_check_plan_through_langchain(live: Live, demo: str) -> None:
    """The LangChain tool's schema is typed (spend or target_change); a call answers the breach."""
    with Engram(live.url, live.token(demo, role="agent", user="bot", on_behalf_of="sam")) as mem:
        tools = {t.name: t for t in langchain_tools(mem, list(TOOLS))}
        assert set(tools) == set(TOOLS) and set(DEFAULT_TOOLS) < set(TOOLS)
        assert set(tools["check_plan"].args) == {"spend", "target_change"}
        answer = tools["check_plan"].invoke({"spend": META_8K})
        assert answer["ok"] is False
        assert [(f["status"], f["memory_id"], f["explanation"]) for f in answer["findings"]] == [
            ("breach", "meta-cap", BREACH)
        ]
        typo = tools["check_plan"].invoke({"spend": {**META_8K, "platform": "metta"}})
        assert typo["status"] == 422 and "metta" in typo["reason"]
        recorded = tools["record_decision"].invoke(
            {"decision": "Hold Meta spend", "relied_on": ["meta-cap"], "spend": META_8K}
        )
        assert mem.get_decision(recorded["id"]).relied_on == ["meta-cap"]
        why = tools["justify"].invoke({"memory_id": "meta-cap", "status": "budgetStatus"})
        assert [d["predicate"] for d in why["derived"]] == ["budgetStatus"]

    async def acheck() -> Any:
        async with AsyncEngram(live.url, live.token(demo)) as amem:
            (check,) = langchain_tools(amem, ["check_plan"])
            return await check.ainvoke({"spend": META_8K})

    assert asyncio.run(acheck())["findings"][0]["explanation"] == BREACH


def test_check_plan_through_a_pydantic_ai_agent(live: Live, demo: str) -> None:
    """A scripted Pydantic AI agent checks the plan, is told it breaches the Meta cap, records the
    decision citing the cap and justifies the cap's status."""
    with Engram(live.url, live.token(demo, role="agent", user="bot", on_behalf_of="sam")) as mem:
        model = scripted(
            [
                ("check_plan", {"spend": META_8K}),
                ("record_decision", {"decision": "Do not add 8,000 on Meta", "relied_on": ["meta-cap"]}),
                ("justify", {"memory_id": "meta-cap"}),
            ]
        )
        agent = Agent(model, toolsets=[engram_toolset(mem)])
        result = agent.run_sync("May we add 8,000 USD on Meta in November 2026?")
        plan, recorded, why = json.loads(result.output)
        assert plan["ok"] is False and plan["findings"][0]["explanation"] == BREACH
        assert mem.decisions("meta-cap").data[-1].id == recorded["id"]
        assert why["memory_id"] == "meta-cap" and why["source"] == "onboarding"
