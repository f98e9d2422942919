"""engram-client against a real server: the verbs, read-your-writes, retries that apply a write
once, and refusals that carry the API's reason."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
import uuid
from typing import Any

import httpx
import pytest
from engram_client import (
    Accepted,
    AgentAccepted,
    AsyncEngram,
    Conflict,
    ConnectionFailed,
    Context,
    DecisionJustification,
    DecisionPage,
    Engram,
    Forbidden,
    Invalid,
    ItemAnswer,
    Justification,
    Memory,
    NarrativeItem,
    NewMemory,
    NotFound,
    Onboarded,
    OnboardingStatus,
    PlanCheck,
    RateLimited,
    Recall,
    Recognition,
    Resolution,
    Retry,
    SessionNarrative,
    Summary,
    Unauthorized,
)
from engram_client.calls import Calls, digest

from tests.clients.conftest import FaultyProxy, Live, canned

pytestmark = pytest.mark.integration

FAST = Retry(attempts=4, backoff=0.05, max_wait=5)


def tenant() -> str:
    return f"t{uuid.uuid4().hex[:10]}"


def sent_params(client: Engram) -> list[httpx.URL]:
    """Record the URL of every request the client sends (an httpx event hook)."""
    urls: list[httpx.URL] = []
    client.http.event_hooks["request"].append(lambda request: urls.append(request.url))
    return urls


def test_remember_recall_and_context_read_your_writes(live: Live) -> None:
    t = tenant()
    with Engram(live.url, live.token(t)) as mem:
        assert mem.tenant == t  # from the token's claim
        urls = sent_params(mem)
        accepted = mem.remember(
            "Meta budget cap",
            "Meta ad spend stays under 40,000 USD a month, agreed with finance.",
            kind="fact",
            importance=5,
        )
        assert isinstance(accepted, Accepted) and accepted.memory_id and not accepted.applied
        assert mem.position == accepted.position == f"{accepted.partition}:{accepted.offset}"

        context = mem.context("how much may we spend on Meta?")  # no wait=true, no polling
        assert isinstance(context, Context)
        assert accepted.memory_id in [item.id for item in context.items]
        assert "Meta budget cap" in context.text
        assert urls[-1].params["after"] == accepted.position  # the position went with the read

        recall = mem.recall("meta spending limit", limit=3)
        assert isinstance(recall, Recall)
        assert recall.data[0].id == accepted.memory_id and recall.data[0].score > 0

        memory = mem.get_memory(accepted.memory_id)
        assert isinstance(memory, Memory)
        assert (memory.label, memory.kind, memory.importance, memory.source) == (
            "Meta budget cap",
            "fact",
            5,
            "agent",
        )
        page = mem.list_memories(kind="fact", limit=10)
        assert page.count == 1 and page.data[0].id == accepted.memory_id
        assert mem.list_memories(min_importance=5).count == 1  # its tier and above


def test_the_position_is_the_furthest_write_and_an_explicit_after_wins(live: Live) -> None:
    t = tenant()
    with Engram(live.url, live.token(t)) as mem:
        first = mem.remember("Tone", "Ad copy is warm and plain.", kind="preference", importance=4)
        second = mem.observe_kpi("roas", 3.2, "2026-11")
        assert second.offset > first.offset and mem.position == second.position
        urls = sent_params(mem)
        mem.context(after=first.position)
        assert urls[-1].params["after"] == first.position
        # a position past the end of the log is refused by the server: proof it reads what is sent
        mem.position = f"{second.partition}:{second.offset + 10_000}"
        with pytest.raises(Invalid, match="is not in the log"):
            mem.context()


def test_revise_supersede_forget_and_live_data(live: Live) -> None:
    t = tenant()
    with Engram(live.url, live.token(t)) as mem:
        old = mem.remember("Launch date", "The spring launch is on 3 March.", importance=4, wait=True)
        assert old.applied
        mem.revise(old.memory_id or "", {"content": "The spring launch is on 10 March."}, wait=True)
        assert mem.get_memory(old.memory_id or "").content == "The spring launch is on 10 March."
        new = mem.remember(
            "Launch date moved", "The spring launch moved to 17 March.", importance=4, on_conflict="keep_both"
        )
        mem.supersede(old.memory_id or "", new.memory_id or "", wait=True)
        superseded = mem.get_memory(old.memory_id or "")
        assert superseded.superseded_by == new.memory_id and not superseded.active
        assert len(mem.lineage(old.memory_id or "").model_extra or {}) > 0
        mem.forget(new.memory_id or "", reason="test", wait=True)
        assert mem.get_memory(new.memory_id or "").forgotten
        assert mem.observe_spend("meta", 34_000, "USD", "2026-12", wait=True).applied
        snapshot = mem.context().snapshot
        assert [s["platform"] for s in snapshot["spend"]] == ["meta"]


def test_a_proposal_against_several_memories_listed_and_accepted(live: Live) -> None:
    """A capture that contradicts two of Sam's targets is one proposal against both: the SDK shows
    both (``proposes_all``, ``replaces_all``) and accepting supersedes both."""
    t = tenant()

    def roas(memory_id: str, goal: float) -> dict[str, Any]:
        target = {"kind": "objective", "importance": 5, "memory_class": "PerformanceTargetMemory"}
        return {
            "memory_id": memory_id,
            "scope": "user",
            "user_id": "sam",
            "properties": {"metric": "roas", "goal": goal},
            **target,
        }

    with (
        Engram(live.url, live.token(t, role="user", user="sam"), retry=FAST) as sam,
        Engram(
            live.url, live.token(t, role="agent", user="extractor", on_behalf_of="sam"), retry=FAST
        ) as capture,
    ):
        sam.remember("ROAS target", "Keep ROAS at 3.", **roas("roas-3", 3.0), wait=True)
        sam.remember("ROAS floor", "ROAS at 3.5.", **roas("roas-35", 3.5), on_conflict="keep_both", wait=True)
        heard = capture.remember(
            "ROAS target",
            "ROAS should be 4.",
            **roas("roas-4", 4.0),
            source="extraction",
            confidence=0.8,
            wait=True,
        )
        assert heard.applied
        proposal = sam.get_memory("roas-4")
        assert (proposal.active, proposal.proposes, proposal.proposes_all) == (
            False,
            "roas-3",
            ["roas-3", "roas-35"],
        )
        [pending] = sam.proposals().data
        assert pending.replaces.id == "roas-3" and [m.id for m in pending.replaces_all] == [
            "roas-3",
            "roas-35",
        ]
        assert sam.accept_proposal("roas-4", "4 it is", wait=True).applied
        assert [sam.get_memory(m).superseded_by for m in ("roas-3", "roas-35")] == ["roas-4", "roas-4"]
        assert sam.justify("roas-4").proposal["proposes_all"] == ["roas-3", "roas-35"]  # type: ignore[index]
    explicit = Calls(t).remember("ROAS", "4", proposes="roas-3", also_proposes=["roas-35"])
    assert (explicit.body["proposes"], explicit.body["also_proposes"]) == ("roas-3", ["roas-35"])


def test_remember_many_answers_each_item_in_order(live: Live) -> None:
    """A mixed batch: each item answered where it stood, accepted or refused with its reason, and
    the client's position moved to the last accepted one."""
    t = tenant()
    with Engram(live.url, live.token(t), retry=FAST) as mem:
        taken = mem.remember("Region", "We sell in the EU.", memory_id="region", wait=True)
        results = mem.remember_many(
            [
                {"label": "Tone", "content": "Plain words.", "kind": "preference", "importance": 4},
                {"content": "no label", "kind": "fact", "importance": 3},  # invalid
                NewMemory(label="Markets", content="The US and Canada.", scope="user", user_id="dana"),
                {
                    "label": "Replacing",
                    "content": "nothing",
                    "kind": "fact",
                    "importance": 3,
                    "replaces": "gone",
                },
                NewMemory(label="Region again", content="The US too.", memory_id="region"),  # taken
                NewMemory(label="Launch", content="In March.", importance=5),
            ],
            wait=True,
        )
        assert all(isinstance(a, ItemAnswer) for a in results)
        assert [(a.index, a.status, a.outcome) for a in results] == [
            (0, 202, "accepted"),
            (1, 422, "invalid"),
            (2, 202, "accepted"),
            (3, 404, "not_found"),
            (4, 409, "conflict"),
            (5, 202, "accepted"),
        ]
        assert "label" in (results[1].reason or "") and "gone" in (results[3].reason or "")
        accepted = [a for a in results if a.accepted]
        assert all(a.applied and a.event_id and a.memory_id for a in accepted)
        assert mem.position == accepted[-1].position
        labels = sorted(m.label for m in mem.list_memories().data)
        assert labels == ["Launch", "Markets", "Region", "Tone"]
        assert mem.get_memory(taken.memory_id or "").content == "We sell in the EU."
        markets = mem.get_memory(results[2].memory_id or "")
        assert (markets.scope, markets.stakeholders.user_id, markets.source) == ("user", "dana", "agent")


def test_remember_many_chunks_past_1000_and_keeps_the_order(live: Live) -> None:
    t = tenant()
    items = [
        {
            "memory_id": f"bulk-{i}",
            "label": f"Item {i}",
            "content": f"Bulk item {i}.",
            "kind": "fact",
            "importance": 2,
        }
        for i in range(1005)
    ]
    with Engram(live.url, live.token(t), retry=FAST, timeout=120) as mem:
        urls = sent_params(mem)
        results = mem.remember_many(iter(items))  # any iterable, read a chunk at a time
        assert [u.path for u in urls] == [f"/v1/tenants/{t}/memories:batch"] * 2  # 1,000 and 5
        assert len(results) == 1005
        assert [a.index for a in results] == list(range(1005))
        assert [a.memory_id for a in results] == [f"bulk-{i}" for i in range(1005)]
        assert all(a.accepted for a in results)
        with pytest.raises(ValueError, match="1 to 1000"):
            mem.remember_many(items, chunk=1001)


def test_remember_many_retried_with_its_key_writes_nothing_new(live: Live) -> None:
    t = tenant()
    items = [NewMemory(label=f"Fact {i}", content=f"Fact number {i}.") for i in range(5)]
    with Engram(live.url, live.token(t), retry=FAST) as mem:
        first = mem.remember_many(items, idempotency_key="nightly-2026-12-06", chunk=2, wait=True)
        again = mem.remember_many(items, idempotency_key="nightly-2026-12-06", chunk=2, wait=True)
        assert [a.event_id for a in again] == [a.event_id for a in first]
        assert [a.memory_id for a in again] == [a.memory_id for a in first]
        assert len({a.event_id for a in first}) == 5
        page = mem.list_memories()
        assert page.count == 5
        assert all(len(m.lineage) == 1 for m in page.data)  # one event each
        both = items[0].model_copy(update={"on_conflict": "keep_both"})
        other = mem.remember_many([both], idempotency_key="nightly-2026-12-07")
        assert other[0].event_id != first[0].event_id  # another key, another event


def test_remember_many_without_a_key_is_applied_once_when_its_answer_is_dropped(
    live: Live, proxy: FaultyProxy
) -> None:
    """Without a key each item carries a fresh event id, the same in every retry of its chunk."""
    t = tenant()
    proxy.drop = 1
    items = [
        {"label": f"Note {i}", "content": f"Note {i}.", "kind": "context", "importance": 3} for i in range(3)
    ]
    with Engram(proxy.url, live.token(t), retry=FAST) as mem:
        results = mem.remember_many(items, wait=True)
        assert len(proxy.requests) == 2 and [a.status for a in results] == [202] * 3
        assert not any(
            line.lower().startswith(b"idempotency-key") for line in proxy.requests[0].split(b"\r\n")
        )
        page = mem.list_memories()
        assert page.count == 3 and all(len(m.lineage) == 1 for m in page.data)


def test_remember_many_async(live: Live) -> None:
    t = tenant()

    async def run() -> list[ItemAnswer]:
        async with AsyncEngram(live.url, live.token(t), retry=FAST) as mem:
            items = [NewMemory(label=f"Async {i}", content=f"Async item {i}.") for i in range(5)]
            results = await mem.remember_many(items, chunk=2, wait=True)
            assert mem.position == results[-1].position
            return results

    results = asyncio.run(run())
    assert [(a.index, a.status) for a in results] == [(i, 202) for i in range(5)]


def test_refusals_carry_the_api_reason(live: Live) -> None:
    t = tenant()
    with Engram(live.url, live.token(t)) as operator, Engram(live.url, live.token(t, role="user")) as user:
        with pytest.raises(NotFound) as missing:
            operator.get_memory("no-such-memory")
        assert missing.value.status == 404 and "no-such-memory" in missing.value.reason
        assert missing.value.type == "not_found"

        taken = operator.remember("Region", "We sell in the EU only.", memory_id="region", wait=True)
        with pytest.raises(Conflict) as conflict:
            operator.remember("Region again", "We sell in the US too.", memory_id="region")
        assert conflict.value.status == 409 and "already exists" in conflict.value.reason

        with pytest.raises(Forbidden) as forbidden:
            user.forget(taken.memory_id or "", reason="tidy up")
        assert forbidden.value.status == 403 and forbidden.value.reason
        assert "operator" in forbidden.value.reason or "auditor" in forbidden.value.reason

        with pytest.raises(Invalid) as invalid:
            operator.remember("Bad", "importance out of range", importance=9)
        assert invalid.value.status == 422
        assert any(e["loc"][-1] == "importance" for e in invalid.value.errors)

    with Engram(live.url, "not-a-jwt", tenant=t) as stranger, pytest.raises(Unauthorized) as unknown:
        stranger.list_memories()
    assert unknown.value.status == 401 and unknown.value.reason


def test_a_write_whose_answer_was_dropped_is_retried_and_applied_once(live: Live, proxy: FaultyProxy) -> None:
    t = tenant()
    proxy.drop = 1  # the server handles the first request; the client never hears the answer
    with Engram(proxy.url, live.token(t), retry=FAST) as mem:
        accepted = mem.remember("Retried", "Sent twice, applied once.", importance=4)
        keys = [line for r in proxy.requests for line in r.split(b"\r\n") if line.lower().startswith(b"idem")]
        assert len(keys) == 2 and keys[0] == keys[1]  # two requests, one key
        page = mem.list_memories()
        assert [m.id for m in page.data] == [accepted.memory_id]
        assert len(mem.get_memory(accepted.memory_id or "").lineage) == 1  # one event


def test_without_the_key_the_same_resend_writes_twice(live: Live) -> None:
    """The control for the test above: resent without a key, the same request is a second event
    (ask before overwrite makes it a revision of the first memory, not a new one)."""
    t = tenant()
    body = {"source": "agent", "label": "Unkeyed", "content": "Sent twice.", "kind": "fact", "importance": 4}
    headers = {"Authorization": f"Bearer {live.token(t)}"}
    for _ in range(2):
        url = f"{live.url}/v1/tenants/{t}/memories?wait=true"
        httpx.post(url, json=body, headers=headers).raise_for_status()
    with Engram(live.url, live.token(t)) as mem:
        (memory,) = mem.list_memories().data
        assert len(memory.lineage) == 2


def test_503_and_429_are_retried_after_retry_after(live: Live, proxy: FaultyProxy) -> None:
    t = tenant()
    proxy.answers = [canned(503, "the event log is unavailable", retry_after="1"), canned(429, "slow down")]
    with Engram(proxy.url, live.token(t), retry=FAST) as mem:
        started = time.monotonic()
        accepted = mem.remember("After a 503", "Applied once the log is back.", importance=4)
        assert time.monotonic() - started >= 1.0  # waited as Retry-After said
        assert len(proxy.requests) == 3 and mem.get_memory(accepted.memory_id or "").label == "After a 503"

    proxy.answers = [canned(429, "over the rate limit", retry_after="0")] * FAST.attempts
    with Engram(proxy.url, live.token(t), retry=FAST) as mem, pytest.raises(RateLimited) as limited:
        mem.recall("anything")
    assert limited.value.reason == "over the rate limit" and limited.value.retry_after == 0


def test_no_server_is_a_connection_failure_after_the_retries() -> None:
    with socket_closed_port() as port, Engram(f"http://127.0.0.1:{port}", "x", tenant="t", retry=FAST) as mem:
        refused = pytest.raises(ConnectionFailed, match="after 4 attempts")
        with refused:
            mem.remember("Nobody", "is listening")


class socket_closed_port:
    """A port nothing listens on (bound, never listening, released at exit)."""

    def __enter__(self) -> int:
        import socket

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        return int(self.sock.getsockname()[1])

    def __exit__(self, *exc: object) -> None:
        self.sock.close()


def test_the_async_client(live: Live) -> None:
    t = tenant()

    async def turn() -> None:
        async with AsyncEngram(live.url, live.token(t)) as mem:
            accepted = await mem.remember(
                "Weekly report", "The weekly report goes out on Mondays.", kind="context", importance=5
            )
            assert mem.position == accepted.position
            context, recall = await asyncio.gather(mem.context(), mem.recall("when is the report sent"))
            assert accepted.memory_id in [i.id for i in context.items]
            assert recall.data[0].id == accepted.memory_id
            with pytest.raises(NotFound, match="not found"):
                await mem.get_memory("missing")

    asyncio.run(turn())


CAP = {
    "memory_id": "meta-cap",
    "memory_class": "BudgetConstraintMemory",
    "properties": {"platform": "meta", "amount": 40000.0, "currency": "USD", "period": "month"},
}
META_8K = {"platform": "meta", "amount": 8000, "currency": "USD", "period": "2026-11"}
AGENT = {"role": "agent", "user": "ads-agent", "on_behalf_of": "sam"}


def demo_numbers(live: Live, t: str) -> None:
    """The demo tenant's numbers: Meta cap 40,000 USD a month, 34,000 spent in 2026-11."""
    with Engram(live.url, live.token(t)) as op:
        op.remember(
            "Meta monthly cap", "Never spend more than $40k/month on Meta.", kind="objective",
            importance=5, source="onboarding", wait=True, **CAP,  # type: ignore[arg-type]
        )  # fmt: skip
    with Engram(live.url, live.token(t, role="pipeline", user="spend-etl")) as etl:
        etl.observe_spend("meta", 34000.0, "USD", "2026-11", source="pipeline", wait=True)


def test_the_agent_verbs_at_their_routes(live: Live) -> None:
    """recognize, check_plan on the demo numbers, a session's narrative with a decision the rules
    flag, which decisions relied on the cap, justify, associate, summarise: each typed."""
    t = tenant()
    demo_numbers(live, t)
    with Engram(live.url, live.token(t, **AGENT)) as mem:
        known = mem.recognize("meta MONTHLY  cap", memory_class="BudgetConstraintMemory")
        assert isinstance(known, Recognition) and known.known
        assert (known.matches[0].id, known.matches[0].reason) == ("meta-cap", "exact")
        unknown = mem.recognize("Brand colour", min_score=0.99)
        assert not unknown.known and unknown.matches == []

        plan = mem.check_plan(spend=META_8K)
        assert isinstance(plan, PlanCheck) and plan.ok is False
        [breach] = plan.breaches
        assert (breach.status, breach.memory_id) == ("breach", "meta-cap")
        assert breach.explanation == (
            "breaches meta-cap: spend 34,000 + 8,000 = 42,000 of cap 40,000 USD = 105%"
        )
        assert mem.check_plan(spend={**META_8K, "amount": 1000}).ok is True
        with pytest.raises(Invalid, match="metta"):
            mem.check_plan(spend={**META_8K, "platform": "metta"})
        with pytest.raises(Invalid, match="exactly one"):
            mem.check_plan()

        session = mem.start_session("plan November's Meta spend", wait=True)
        assert isinstance(session, AgentAccepted) and session.id and mem.position == session.position
        episode = mem.record_episode(session.id, "Checked the plan against the Meta cap", wait=True)
        arguments = {"spend": META_8K}
        called = mem.record_tool_call(session.id, "check_plan", "ok", arguments=arguments, wait=True)
        decided = mem.record_decision(
            "Spend 8,000 more on Meta in November",
            relied_on=["meta-cap"],
            live_data=["spend:meta:USD:2026-11"],
            spend=META_8K,
            session_id=session.id,
            episode_id=episode.id,
            wait=True,
        )
        story = mem.episodes_in(session.id)
        assert isinstance(story, SessionNarrative) and story.goal == "plan November's Meta spend"
        assert [(i.type, i.id) for i in story.items] == [
            ("episode", episode.id),
            ("tool_call", called.id),
            ("decision", decided.id),
        ]
        assert story.items[1].arguments_digest == digest(arguments)
        assert (
            digest(arguments)
            == "sha256:"
            + hashlib.sha256(
                json.dumps(arguments, sort_keys=True, separators=(",", ":")).encode()
            ).hexdigest()
        )
        got = mem.get_decision(decided.id)
        assert isinstance(got, NarrativeItem) and got.relied_on == ["meta-cap"]
        assert "breached_constraint" in [s.status for s in got.statuses or []]
        relied = mem.decisions("meta-cap")
        assert isinstance(relied, DecisionPage) and [d.id for d in relied.data] == [decided.id]
        why_decided = mem.justify_decision(decided.id)
        assert isinstance(why_decided, DecisionJustification)
        assert (why_decided.session_id, why_decided.episode_id) == (session.id, episode.id)
        assert [(r.memory_id, r.how) for r in why_decided.relied_on] == [("meta-cap", "cited")]
        assert [e.type for e in why_decided.events] == ["DecisionRecorded"]
        assert [d.value for d in why_decided.derived if d.predicate == "decisionStatus"] == [
            "breached_constraint"
        ]
        with pytest.raises(NotFound, match="decision nope not found"):
            mem.justify_decision("nope")

        why = mem.justify("meta-cap")
        assert isinstance(why, Justification) and why.source == "onboarding"
        assert why.actor.id == "dana" and len(why.events) == 1
        assert why.statuses["budgetStatus"] == "near_limit"
        status = mem.justify("meta-cap", status="budgetStatus")
        assert [d.predicate for d in status.derived] == ["budgetStatus"]
        assert status.derived[0].derivations[0].rule
        with pytest.raises(NotFound, match="memory nope not found"):
            mem.justify("nope")

        linked = mem.associate(f"episode:{episode.id}", "meta-cap", "depends_on", wait=True)
        assert isinstance(linked, AgentAccepted) and linked.id
        with pytest.raises(NotFound):
            mem.associate("meta-cap", "decision:nope", "supports")

        summary = mem.summarise("meta", top=3)
        assert isinstance(summary, Summary) and summary.topic == "meta"
        assert [i.id for i in summary.top] == ["meta-cap"] and "Meta monthly cap" in summary.text
        of_session = mem.summarise(session=session.id)  # its decision cited the cap
        assert (of_session.session, [i.id for i in of_session.top]) == (session.id, ["meta-cap"])
        unlinked = mem.remove_association(linked.id, reason="linked by mistake", wait=True)
        assert isinstance(unlinked, AgentAccepted) and unlinked.id == linked.id
        with pytest.raises(NotFound, match=f"association {linked.id} not found"):
            mem.remove_association(linked.id)

        mem.end_session(session.id, "decided; the cap is breached", wait=True)
        assert mem.episodes_in(session.id).outcome == "decided; the cap is breached"
        with pytest.raises(Conflict, match="has ended"):
            mem.record_episode(session.id, "too late", wait=True)
        with pytest.raises(ValueError, match="exactly one"):
            mem.record_tool_call(session.id, "x", "ok")


def test_resolve_dry_run_then_apply(live: Live) -> None:
    """Two launch dates entered side by side: a dry run writes nothing; apply supersedes the loser
    and moves the client's position to the supersession it appended."""
    t = tenant()
    with Engram(live.url, live.token(t)) as op:
        first = {"label": "Launch day", "kind": "fact", "importance": 3}
        op.remember(content="3 March", memory_id="d1", occurred_at="2026-01-01T00:00:00Z", wait=True, **first)  # type: ignore[arg-type]
        op.remember(
            content="10 March", memory_id="d2", occurred_at="2026-02-01T00:00:00Z", on_conflict="keep_both",
            wait=True, **first,  # type: ignore[arg-type]
        )  # fmt: skip
        dry = op.resolve("prefer_newer")
        assert isinstance(dry, Resolution) and dry.applied is False
        [group] = dry.sets
        assert (group.winner, group.members, group.superseded[0].memory_id) == ("d2", ["d1", "d2"], "d1")
        assert group.superseded[0].event is None and op.get_memory("d1").active
        before = op.position
        done = op.resolve("prefer_newer", memory_ids=["d1"], apply=True, wait=True)
        event = done.sets[0].superseded[0].event
        assert done.applied and event is not None and event.applied
        assert op.position == event.position != before
        gone = op.get_memory("d1")
        assert (gone.active, gone.superseded_by) == (False, "d2")
        with pytest.raises(Invalid, match="in no conflict"):
            op.resolve("prefer_newer", memory_ids=["d2"])


def test_the_agent_verbs_async(live: Live) -> None:
    t = tenant()
    demo_numbers(live, t)

    async def turn() -> None:
        async with AsyncEngram(live.url, live.token(t, **AGENT)) as mem:
            session = await mem.start_session("async turn")
            plan, known = await asyncio.gather(
                mem.check_plan(spend=META_8K), mem.recognize("Meta monthly cap")
            )
            assert not plan.ok and plan.breaches[0].memory_id == "meta-cap" and known.known
            decided = await mem.record_decision(
                "Hold Meta spend", relied_on=["meta-cap"], session_id=session.id
            )
            story = await mem.episodes_in(session.id)  # read-your-writes: the server waits for it
            assert [i.id for i in story.items] == [decided.id]
            assert (await mem.justify("meta-cap")).memory_id == "meta-cap"
            assert (await mem.summarise()).count == 1
            assert (await mem.decisions("meta-cap")).count == 1

    asyncio.run(turn())


def test_onboard_then_read_what_is_missing_sync_and_async(live: Live) -> None:
    """An operator onboards a tenant in two calls; a resend is the same events; the context read
    after it waits for its writes (their positions are the client's)."""
    t = tenant()
    with Engram(live.url, live.token(t), retry=FAST) as mem:
        assert mem.onboarding().missing == ["objective", "fact", "preference"]
        fact = {"label": "Markets", "content": "Acme sells outdoor gear in the US and Canada."}
        first = mem.onboard(fact=fact)
        assert isinstance(first, Onboarded) and first.objective is None and first.fact is not None
        assert mem.position == first.fact.position
        again = mem.onboard(fact=fact)
        assert again.fact is not None and again.fact.event_id == first.fact.event_id
        status = mem.onboarding()
        assert isinstance(status, OnboardingStatus)
        assert (status.present.fact, status.missing) == ([first.fact.memory_id], ["objective", "preference"])
        labels = [item.label for item in mem.context("anything").items]
        assert labels.count("Markets") == 1

    async def rest() -> None:
        async with AsyncEngram(live.url, live.token(t), retry=FAST) as amem:
            cap = {"platform": "meta", "amount": 40000, "currency": "USD", "period": "month"}
            objective = {
                "label": "Meta monthly cap",
                "content": "At most $40k a month on Meta.",
                "budget": cap,
            }
            done = await amem.onboard(objective=objective, preference={"label": "Tone", "content": "Plain."})
            assert done.objective is not None and done.preference is not None
            status = await amem.onboarding()
            assert status.complete and status.present.objective == [done.objective.memory_id]

    asyncio.run(rest())
    with (
        Engram(live.url, live.token(t, role="user", user="sam"), retry=FAST) as sam,
        pytest.raises(Forbidden) as e,
    ):
        sam.onboard(fact={"label": "x", "content": "y"})
    assert e.value.reason == "only an operator onboards a tenant"


def test_every_verb_names_a_route_the_server_serves(live: Live) -> None:
    """Each call the client builds is at a path and method of the server's OpenAPI document."""
    paths = httpx.get(f"{live.url}/openapi.json").json()["paths"]
    calls = Calls("acme")
    built = [
        calls.recognize("x"),
        calls.justify("m1"),
        calls.associate("m1", "decision:d1", "supports"),
        calls.resolve("prefer_newer"),
        calls.summarise("x"),
        calls.check_plan(spend=META_8K),
        calls.record_decision("x"),
        calls.get_decision("d1"),
        calls.justify_decision("d1"),
        calls.decisions("m1"),
        calls.start_session(),
        calls.end_session("s1"),
        calls.record_episode("s1", "x"),
        calls.record_tool_call("s1", "t", "ok", arguments={}),
        calls.episodes_in("s1"),
        calls.proposals(),
        calls.accept_proposal("p1"),
        calls.reject_proposal("p1", "not now"),
        calls.onboard(fact={"label": "x", "content": "y"}),
        calls.onboarding(),
        *calls.remember_many([{"label": "x", "content": "y", "kind": "fact", "importance": 3}]),
    ]
    for call in built:
        template = "/v1/tenants/{tenant}" + call.path.removeprefix("/v1/tenants/acme")
        [route] = [p for p in paths if _same_template(p, template)]
        assert call.method.lower() in paths[route], f"{call.method} {template}"
        assert call.is_write == (call.method == "POST" and route not in _READS_BY_POST)


_READS_BY_POST = {
    "/v1/tenants/{tenant}/recognize",
    "/v1/tenants/{tenant}/plans/check",
    "/v1/tenants/{tenant}/conflicts/resolve",  # a dry run; apply=True is a write
}


def _same_template(route: str, path: str) -> bool:
    a, b = route.strip("/").split("/"), path.strip("/").split("/")
    return len(a) == len(b) and all(x == y or x.startswith("{") for x, y in zip(a, b, strict=True))
