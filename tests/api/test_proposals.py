"""Proposals over a real server and broker: a captured memory never overwrites a person's.

Sam sets "ROAS target 3"; the extraction workflow (an agent for Sam, ``source: extraction``) then
hears "ROAS target 4" for the same key. It becomes a pending proposal: Sam's target stays in the
context, the proposal is in none, until Sam accepts (the new target in context, the old
superseded) or rejects (nothing changes but the mark). An auto-captured rival is replaced without
asking; another user sees no proposal and gets the 404 of an unknown id; the workflow cannot
decide its own proposal; deciding twice, deciding a non-proposal and accepting against a memory no
longer active are refused with reasons. A capture that contradicts several of Sam's memories is one
proposal against them all: accepted, it supersedes them all, or none if one is gone. One server for
the module; a tenant per test."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from engram.settings import Settings
from tests.harness import Server, serving

pytestmark = pytest.mark.integration

SAM = {"role": "user", "user": "sam"}
ANN = {"role": "user", "user": "ann"}
EXTRACTOR = {"role": "agent", "user": "extractor", "on_behalf_of": "sam"}


@pytest.fixture(scope="module")
def srv(broker: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = serving(broker, tmp_path_factory.mktemp("proposals"))
    yield server
    server.stop()


def tenant() -> str:
    return f"p-{uuid.uuid4().hex[:10]}"


def call(srv: Server, method: str, t: str, path: str, who: dict[str, Any], body: Any = None) -> Any:
    params = {"wait": "true"} if method == "POST" else None
    return srv.http.request(
        method,
        f"{srv.url}/v1/tenants/{t}{path}",
        json=body,
        params=params,
        headers=srv.bearer(t, **who),
        timeout=60,
    )


def target(memory_id: str, metric: str, goal: float, **extra: Any) -> dict[str, Any]:
    return {
        "memory_id": memory_id,
        "label": f"{metric.upper()} target",
        "content": f"Keep {metric.upper()} at {goal}.",
        "kind": "objective",
        "importance": 5,
        "scope": "user",
        "stakeholders": {"user_id": "sam"},
        "memory_class": "PerformanceTargetMemory",
        "properties": {"metric": metric, "goal": goal},
        **extra,
    }


def said(srv: Server, t: str, memory: dict[str, Any]) -> None:
    """Sam, in person."""
    r = call(srv, "POST", t, "/memories", SAM, {"source": "agent", **memory})
    assert r.status_code == 202 and r.json()["applied"], r.text


def heard(srv: Server, t: str, memory: dict[str, Any]) -> None:
    """The extraction workflow, for Sam."""
    body = {"source": "extraction", "confidence": 0.8, "purpose": "turn c1/t7: 'ROAS should be 4'", **memory}
    r = call(srv, "POST", t, "/memories", EXTRACTOR, body)
    assert r.status_code == 202 and r.json()["applied"], r.text


def memory(srv: Server, t: str, memory_id: str, who: dict[str, Any] = SAM) -> dict[str, Any]:
    r = call(srv, "GET", t, f"/memories/{memory_id}", who)
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def in_context(srv: Server, t: str) -> list[str]:
    r = call(srv, "GET", t, "/context", SAM)
    assert r.status_code == 200, r.text
    return [it["id"] for b in r.json()["blocks"] for it in b["items"]]


def decide(srv: Server, t: str, memory_id: str, answer: str, who: dict[str, Any] = SAM, **body: Any) -> Any:
    return call(srv, "POST", t, f"/proposals/{memory_id}/{answer}", who, {"source": "agent", **body})


def test_an_extracted_rival_of_a_persons_memory_waits_and_accepting_it_supersedes(srv: Server) -> None:
    t = tenant()
    said(srv, t, target("roas-3", "roas", 3.0))
    heard(srv, t, target("roas-4", "roas", 4.0))
    proposal, human = memory(srv, t, "roas-4"), memory(srv, t, "roas-3")
    assert (proposal["active"], proposal["proposes"], proposal["proposal_status"]) == (
        False,
        "roas-3",
        "pending",
    )
    assert human["active"] and human["superseded_by"] is None and human["conflicts_with"] == []
    assert "roas-3" in in_context(srv, t) and "roas-4" not in in_context(srv, t)
    listed = call(srv, "GET", t, "/proposals", SAM).json()
    assert listed["count"] == 1
    [item] = listed["data"]
    assert (item["id"], item["proposal"]["id"], item["replaces"]["id"]) == ("roas-4", "roas-4", "roas-3")
    assert item["reason"] == "turn c1/t7: 'ROAS should be 4'" and item["proposed_at"]
    assert call(srv, "GET", t, "/memories/roas-3/justify", SAM).json()["pending_proposals"] == ["roas-4"]
    standing = call(srv, "GET", t, "/memories/roas-4/justify", SAM).json()["proposal"]
    assert (standing["proposes"], standing["status"], standing["decided_by"]) == ("roas-3", "pending", None)

    # the workflow that proposed it may not decide it, though its actor may see both memories
    own = decide(srv, t, "roas-4", "accept", EXTRACTOR, source="extraction")
    assert own.status_code == 403 and "never comes from source extraction" in own.text, own.text

    accepted = decide(srv, t, "roas-4", "accept", reason="we raised the bar")
    assert accepted.status_code == 202 and accepted.json()["applied"], accepted.text
    proposal, human = memory(srv, t, "roas-4"), memory(srv, t, "roas-3")
    assert proposal["active"] and proposal["proposal_status"] == "accepted"
    assert not human["active"] and human["superseded_by"] == "roas-4" and human["valid_to"]
    assert proposal["supersedes"] == ["roas-3"]
    context = in_context(srv, t)
    assert "roas-4" in context and "roas-3" not in context
    justified = call(srv, "GET", t, "/memories/roas-4/justify", SAM).json()
    assert justified["proposal"] == {
        "proposes": "roas-3",
        "proposes_all": ["roas-3"],
        "status": "accepted",
        "decided_by": "sam",
        "decided_by_role": "user",
        "decided_for": "sam",
        "decided_at": justified["proposal"]["decided_at"],
        "reason": "we raised the bar",
    }
    assert justified["supersession"]["supersedes"] == ["roas-3"]
    assert call(srv, "GET", t, "/proposals", SAM).json() == {"data": [], "count": 0}
    # decided once: a second answer either way is a conflict, with the reason
    for answer in ("accept", "reject"):
        again = decide(srv, t, "roas-4", answer)
        assert again.status_code == 409 and "already accepted" in again.text, again.text
    # a memory that is no proposal
    plain = decide(srv, t, "roas-3", "accept")
    assert plain.status_code == 422 and "is not a proposal" in plain.text, plain.text


def test_a_rejected_proposal_stays_inactive_and_the_persons_memory_stands(srv: Server) -> None:
    t = tenant()
    said(srv, t, target("cpa-20", "cpa", 20.0))
    heard(srv, t, target("cpa-25", "cpa", 25.0))
    rejected = decide(srv, t, "cpa-25", "reject", reason="that was a hypothetical")
    assert rejected.status_code == 202 and rejected.json()["applied"], rejected.text
    proposal, human = memory(srv, t, "cpa-25"), memory(srv, t, "cpa-20")
    assert (proposal["active"], proposal["proposal_status"]) == (False, "rejected")
    assert human["active"] and human["superseded_by"] is None
    assert "cpa-20" in in_context(srv, t) and "cpa-25" not in in_context(srv, t)
    assert call(srv, "GET", t, "/proposals", SAM).json()["count"] == 0
    standing = call(srv, "GET", t, "/memories/cpa-25/justify", SAM).json()["proposal"]
    assert (standing["status"], standing["reason"]) == ("rejected", "that was a hypothetical")
    assert call(srv, "GET", t, "/memories/cpa-20/justify", SAM).json()["pending_proposals"] == []


def test_accepting_when_the_persons_memory_is_no_longer_active_is_refused(srv: Server) -> None:
    t = tenant()
    said(srv, t, target("ctr-1", "ctr", 1.0))
    heard(srv, t, target("ctr-2", "ctr", 2.0))
    said(srv, t, target("ctr-3", "ctr", 3.0, on_conflict="replace"))  # Sam changes it in person
    assert memory(srv, t, "ctr-1")["superseded_by"] == "ctr-3"
    late = decide(srv, t, "ctr-2", "accept")
    assert late.status_code == 409 and "ctr-1" in late.text and "no longer active" in late.text, late.text
    assert memory(srv, t, "ctr-2")["proposal_status"] == "pending"


def test_an_auto_captured_rival_is_replaced_without_asking(srv: Server) -> None:
    t = tenant()
    heard(srv, t, target("cpm-1", "cpm", 5.0))
    heard(srv, t, target("cpm-2", "cpm", 6.0))
    newer, older = memory(srv, t, "cpm-2"), memory(srv, t, "cpm-1")
    assert newer["active"] and newer["proposes"] is None and newer["proposal_status"] is None
    assert older["superseded_by"] == "cpm-2" and not older["active"]
    assert call(srv, "GET", t, "/proposals", SAM).json()["count"] == 0


def test_a_captured_restatement_writes_nothing_and_asks_nobody(srv: Server) -> None:
    """Sam says again what Sam entered (or what was captured before): no proposal, no supersession."""
    t = tenant()
    said(srv, t, target("roas-1", "roas", 3.0))
    again = call(
        srv, "POST", t, "/memories", EXTRACTOR, {"source": "extraction", **target("roas-2", "roas", 3)}
    )
    assert again.status_code == 409 and "already known as memory roas-1" in again.text, again.text
    heard(srv, t, target("cpa-1", "cpa", 40.0))
    again = call(
        srv, "POST", t, "/memories", EXTRACTOR, {"source": "extraction", **target("cpa-2", "cpa", 40)}
    )
    assert again.status_code == 409 and "already known as memory cpa-1" in again.text, again.text
    assert memory(srv, t, "roas-1")["active"] and memory(srv, t, "cpa-1")["active"]
    assert call(srv, "GET", t, "/proposals", SAM).json()["count"] == 0


def test_another_user_sees_no_proposal_and_the_404_of_an_unknown_id(srv: Server) -> None:
    t = tenant()
    said(srv, t, target("roas-3", "roas", 3.0))
    heard(srv, t, target("roas-4", "roas", 4.0))
    assert call(srv, "GET", t, "/proposals", ANN).json() == {"data": [], "count": 0}
    for answer in ("accept", "reject"):
        hidden = decide(srv, t, "roas-4", answer, ANN)
        unknown = decide(srv, t, "no-such-proposal", answer, ANN)
        assert hidden.status_code == unknown.status_code == 404, hidden.text
        assert hidden.json()["detail"][0]["msg"] == "memory roas-4 not found"
        assert unknown.json()["detail"][0]["msg"] == "memory no-such-proposal not found"
    assert memory(srv, t, "roas-4")["proposal_status"] == "pending"
    # an operator sees it and may decide it only as whoever may supersede Sam's memory: not at all
    op = {"role": "operator", "user": "dana"}
    assert call(srv, "GET", t, "/proposals", op).json()["count"] == 1
    refused = decide(srv, t, "roas-4", "accept", op)
    assert refused.status_code == 403 and "only sam" in refused.text, refused.text
    bad = call(srv, "POST", t, "/proposals/roas-4/maybe", SAM, {"source": "agent"})
    assert bad.status_code == 422, bad.text


def test_a_capture_that_contradicts_several_of_a_persons_memories_proposes_against_them_all(
    srv: Server,
) -> None:
    """Sam keeps two ROAS targets (3 and 3.5); a capture of "ROAS 4" is one proposal against both,
    shown with both, and accepting it supersedes both at once. A retry of the capture is answered
    as it was decided, not written again."""
    t = tenant()
    said(srv, t, target("roas-3", "roas", 3.0))
    said(srv, t, target("roas-35", "roas", 3.5, on_conflict="keep_both"))
    capture = {"event_id": str(uuid.uuid4()), **target("roas-4", "roas", 4.0)}
    heard(srv, t, capture)
    proposal = memory(srv, t, "roas-4")
    assert (proposal["active"], proposal["proposes"], proposal["proposes_all"]) == (
        False,
        "roas-3",
        ["roas-3", "roas-35"],
    )
    assert memory(srv, t, "roas-3")["proposes_all"] == []  # not a proposal
    [item] = call(srv, "GET", t, "/proposals", SAM).json()["data"]
    assert item["replaces"]["id"] == "roas-3"
    assert [r["id"] for r in item["replaces_all"]] == ["roas-3", "roas-35"]
    for old in ("roas-3", "roas-35"):
        assert call(srv, "GET", t, f"/memories/{old}/justify", SAM).json()["pending_proposals"] == ["roas-4"]
    standing = call(srv, "GET", t, "/memories/roas-4/justify", SAM).json()["proposal"]
    assert (standing["proposes"], standing["proposes_all"]) == ("roas-3", ["roas-3", "roas-35"])
    heard(srv, t, capture)  # the same request again: its answer, nothing new
    assert call(srv, "GET", t, "/proposals", SAM).json()["count"] == 1

    accepted = decide(srv, t, "roas-4", "accept", reason="4 it is")
    assert accepted.status_code == 202 and accepted.json()["applied"], accepted.text
    assert memory(srv, t, "roas-4")["supersedes"] == ["roas-3", "roas-35"]
    for old in ("roas-3", "roas-35"):
        replaced = memory(srv, t, old)
        assert not replaced["active"] and replaced["superseded_by"] == "roas-4", replaced
    context = in_context(srv, t)
    assert "roas-4" in context and "roas-3" not in context and "roas-35" not in context
    assert call(srv, "GET", t, "/proposals", SAM).json()["count"] == 0


def test_accepting_against_several_is_refused_whole_when_one_is_gone_and_rejecting_still_works(
    srv: Server,
) -> None:
    t = tenant()
    said(srv, t, target("cpa-20", "cpa", 20.0))
    said(srv, t, target("cpa-22", "cpa", 22.0, on_conflict="keep_both"))
    heard(srv, t, target("cpa-25", "cpa", 25.0))
    assert memory(srv, t, "cpa-25")["proposes_all"] == ["cpa-20", "cpa-22"]
    said(srv, t, target("cpa-21", "cpa", 21.0, replaces="cpa-22"))  # Sam settles one in person
    late = decide(srv, t, "cpa-25", "accept")
    assert late.status_code == 409, late.text
    assert "memory cpa-22, which cpa-25 proposes to replace, is no longer active" in late.text, late.text
    assert memory(srv, t, "cpa-20")["active"] and memory(srv, t, "cpa-25")["proposal_status"] == "pending"
    # others see it as before: another user not at all, an operator may not decide Sam's
    assert decide(srv, t, "cpa-25", "reject", ANN).status_code == 404
    refused = decide(srv, t, "cpa-25", "reject", {"role": "operator", "user": "dana"})
    assert refused.status_code == 403 and "only sam" in refused.text, refused.text
    rejected = decide(srv, t, "cpa-25", "reject", reason="stale")
    assert rejected.status_code == 202 and rejected.json()["applied"], rejected.text
    assert memory(srv, t, "cpa-20")["active"] and memory(srv, t, "cpa-21")["active"]
    # also_proposes is the write's field too: never without proposes
    alone = call(
        srv,
        "POST",
        t,
        "/memories",
        SAM,
        {"source": "agent", **target("x", "ctr", 1.0, also_proposes=["cpa-20"])},
    )
    assert alone.status_code == 422 and "also_proposes needs proposes" in alone.text, alone.text
