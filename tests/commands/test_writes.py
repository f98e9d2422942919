"""Every command end to end, in process: validated, pre-checked, appended to a real broker,
projected by the real Faust agent, answered; and every refusal with its status."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from engram.api.runtime import Runtime
from engram.commands.answers import Attribution, Conflicting, Invalid, NotFound, Refused
from engram.projections.read import get_memory, memory_statuses
from engram.projections.terms import CLOCK, e, user_iri
from engram.schemas.events import Actor

from engram.process import running
from engram.settings import Settings

OPERATOR = Attribution(source="operator", actor=Actor("dana", "operator"))
PIPELINE = Attribution(source="pipeline", actor=Actor("etl", "pipeline"))


def by(who: Attribution, **changes: Any) -> Attribution:
    return Attribution(**{**who.__dict__, **changes})


def run(settings: Settings, scenario: Callable[[Runtime], Awaitable[None]]) -> None:
    async def main() -> None:
        async with running(settings.model_copy(update={"embedder": "hashing"})) as runtime:
            await scenario(runtime)

    asyncio.run(main())


def memory(**fields: Any) -> dict[str, Any]:
    return {"label": "ROAS target", "content": "Keep ROAS at 3 or above", "kind": "objective",
            "scope": "company", "importance": 5, **fields}  # fmt: skip


def test_every_command_is_applied_and_answered(settings: Settings) -> None:
    async def scenario(rt: Runtime) -> None:
        c = rt.commands
        target = memory(memory_id="roas", memory_class="PerformanceTargetMemory",
                        properties={"metric": "roas", "goal": 3.0})  # fmt: skip
        first = await c.remember("acme", target, OPERATOR, wait=True)
        assert first.applied and first.memory_id == "roas" and first.offset >= 0
        assert (await c.observe_kpi("acme", "roas", 2.5, "2026-12", PIPELINE, wait=True)).applied
        graph = rt.stores.get("acme")
        assert graph is not None and memory_statuses(graph, "roas")["targetStatus"] == "below"
        await c.observe_kpi("acme", "roas", 3.5, "2026-12", PIPELINE, wait=True)
        assert memory_statuses(graph, "roas")["targetStatus"] == "met"

        await c.revise("acme", "roas", OPERATOR, changes={"label": "ROAS floor"}, wait=True)
        assert get_memory(graph, "roas")["label"] == "ROAS floor"  # type: ignore[index]
        newer = await c.remember("acme", memory(memory_id="roas2"), OPERATOR, wait=True)
        await c.supersede("acme", "roas", newer.memory_id or "", OPERATOR, wait=True)
        assert get_memory(graph, "roas")["superseded_by"] == "roas2"  # type: ignore[index]
        await c.restore("acme", "roas", OPERATOR, wait=True)
        assert get_memory(graph, "roas")["active"] is True  # type: ignore[index]
        await c.forget("acme", "roas2", OPERATOR, reason="asked to", wait=True)
        assert get_memory(graph, "roas2")["content"] == "[redacted]"  # type: ignore[index]

        await c.observe_spend("acme", "meta", 1200.0, "USD", "2026-12", PIPELINE, wait=True)
        await c.tick_clock("acme", "2026-12-03T00:00:00Z", by(PIPELINE, source="system"), wait=True)
        assert [o.value for o in graph.objects(CLOCK, e("now"))] == ["2026-12-03T00:00:00Z"]
        await c.change_stakeholder("acme", "sam", "user", OPERATOR, team_ids=["growth"], wait=True)
        assert [o.value for o in graph.objects(user_iri("sam"), e("team"))] == ["growth"]

    run(settings, scenario)


def test_a_write_that_names_one_still_in_flight_is_decided_once_that_is_applied(settings: Settings) -> None:
    """A revision sent right after its memory (neither waiting) is accepted, not refused as unknown."""

    async def scenario(rt: Runtime) -> None:
        c = rt.commands
        for i in range(5):
            await c.remember("acme", memory(memory_id=f"m{i}"), OPERATOR)
            revised = await c.revise("acme", f"m{i}", OPERATOR, changes={"label": f"v{i}"}, wait=True)
            assert revised.applied
            graph = rt.stores.get("acme")
            assert graph is not None and get_memory(graph, f"m{i}")["label"] == f"v{i}"  # type: ignore[index]

    run(settings, scenario)


def test_refusals_carry_their_status_and_nothing_reaches_the_log(settings: Settings) -> None:
    async def scenario(rt: Runtime) -> None:
        c = rt.commands
        key = uuid.uuid4()
        first = await c.remember("acme", memory(memory_id="m1"), by(OPERATOR, event_id=key), wait=True)
        again = await c.remember("acme", memory(memory_id="m1"), by(OPERATOR, event_id=key), wait=True)
        assert (again.partition, again.offset, again.applied) == (first.partition, first.offset, True)

        refusals: list[tuple[Awaitable[Any], type[Refused], int, str]] = [
            (c.remember("acme", memory(importance=9), OPERATOR), Invalid, 422, "importance"),
            (c.remember("acme", memory(memory_id="m1"), OPERATOR), Conflicting, 409, "already exists"),
            (c.remember("acme", memory(label="other"), by(OPERATOR, event_id=key)), Conflicting, 409,
             "already used for a different event"),
            (c.remember("acme", memory(replaces="ghost"), OPERATOR), NotFound, 404, "memory ghost not found"),
            (c.revise("acme", "ghost", OPERATOR, changes={"label": "x"}), NotFound, 404, "ghost not found"),
            (c.restore("acme", "m1", OPERATOR), Invalid, 422, "not superseded"),
            (c.observe_kpi("acme", "ro as", 1.0, "p", PIPELINE), Invalid, 422, "metric must match"),
            (c.observe_kpi("Acme", "roas", 1.0, "p", PIPELINE), Invalid, 422, "tenant must match"),
        ]  # fmt: skip
        partitions = range(rt.settings.events_partitions)
        before = [await rt.lag.end_offset(p) for p in partitions]
        for call, kind, status, reason in refusals:
            with pytest.raises(kind, match=reason) as info:
                await call
            assert info.value.status == status
        assert [await rt.lag.end_offset(p) for p in partitions] == before  # nothing was appended

    run(settings, scenario)


def test_ask_before_overwrite_and_retries_of_what_it_decided(settings: Settings) -> None:
    async def scenario(rt: Runtime) -> None:
        c = rt.commands
        graph_of = lambda: rt.stores.get("acme")  # noqa: E731
        target = memory(memory_id="t1", memory_class="PerformanceTargetMemory", label="ROAS goal",
                        properties={"metric": "roas", "goal": 3.0})  # fmt: skip
        await c.remember("acme", target, OPERATOR, wait=True)
        rival = {
            **target,
            "memory_id": "t2",
            "label": "ROAS floor",
            "properties": {"metric": "roas", "goal": 2.5},
        }
        with pytest.raises(Conflicting, match=r"conflicts with active memories t1 \('ROAS goal', operator\)"):
            await c.remember("acme", rival, OPERATOR)
        key = uuid.uuid4()
        first = await c.remember(
            "acme", {**rival, "on_conflict": "replace"}, by(OPERATOR, event_id=key), wait=True
        )
        assert get_memory(graph_of(), "t1")["superseded_by"] == "t2"  # type: ignore[arg-type,index]
        again = await c.remember(
            "acme", {**rival, "on_conflict": "replace"}, by(OPERATOR, event_id=key), wait=True
        )
        assert (again.partition, again.offset) == (first.partition, first.offset)  # the retry, not a conflict

        # auto-captured context supersedes auto-captured context, and leaves a person's alone
        agent = Attribution(source="extraction", actor=Actor("drafter", "agent", on_behalf_of="sam"))
        note = memory(
            memory_id="n1", label="Tone", scope="user", stakeholders={"user_id": "sam"}, kind="preference"
        )
        await c.remember("acme", note, agent, wait=True)
        await c.remember("acme", {**note, "memory_id": "n2", "content": "Warmer"}, agent, wait=True)
        assert get_memory(graph_of(), "n1")["superseded_by"] == "n2"  # type: ignore[arg-type,index]
        sams = Attribution(source="operator", actor=Actor("sam", "user"))
        await c.remember("acme", {**note, "memory_id": "n3", "content": "Mine"}, sams, wait=True)  # re-stated
        assert get_memory(graph_of(), "n2")["content"] == "Mine"  # type: ignore[arg-type,index]
        # heard again in the same words: nothing written, nobody asked
        with pytest.raises(Conflicting, match=r"already known as memory n2"):
            await c.remember("acme", {**note, "memory_id": "n4", "content": " mine "}, agent)

    run(settings, scenario)
