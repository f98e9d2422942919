"""Capture on the real broker and a real `engram serve`: turns become memories in the context with
their evidence, an idle conversation is swept, a kill -9 mid-extraction leaves every memory exactly
once after a restart, and a failing extractor dead-letters its range while the stream goes on.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from engram.streams.topics import ensure_topics

from engram.harness import Server, isolated_settings
from engram.settings import Settings

OWNER = "ana"
SAID = [
    ("user", "Morning! How was the weekend?"),
    ("assistant", "Good, thanks. What are we working on?"),
    ("user", "Keep ROAS above 3 on every campaign."),
    ("assistant", "Noted."),
    ("user", "And don't let Meta spend go over $40k this month."),
    ("assistant", "Understood."),
]


def start(broker: Settings, root: Path, **overrides: Any) -> Server:
    settings = isolated_settings(broker, root / "data").model_copy(update=overrides)
    asyncio.run(ensure_topics(settings))
    server = Server(settings, root / "server.log").start()
    server.wait_ready()
    return server


@pytest.fixture(scope="module")
def srv(broker: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = start(broker, tmp_path_factory.mktemp("capture"), extraction_idle_s=1.0)
    yield server
    server.stop()


def tenant() -> str:
    return f"cap-{uuid.uuid4().hex[:10]}"


def post_turns(srv: Server, t: str, cid: str, said: list[tuple[str, str]], owner: str = OWNER) -> None:
    turns = [
        {"speaker": owner if role == "user" else "bot", "role": role, "text": text} for role, text in said
    ]
    url = f"{srv.url}/v1/tenants/{t}/conversations/{cid}/turns"
    r = srv.http.post(url, json={"turns": turns}, headers=srv.bearer(t, user=owner))  # the owner's own
    assert r.status_code in (200, 202), r.text


def extracted(srv: Server, t: str) -> list[dict[str, Any]]:
    r = srv.http.get(f"{srv.url}/v1/tenants/{t}/memories", params={"limit": 500})
    assert r.status_code == 200, r.text
    return [m for m in r.json()["data"] if m["source"] == "extraction"]


def until(check: Any, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := check():
            return found
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout}s")


def test_turns_become_memories_in_context_with_their_evidence(srv: Server) -> None:
    t, cid = tenant(), "conv-1"
    post_turns(srv, t, cid, SAID)  # N = 6 turns: extracted at once
    memories = until(lambda: len(extracted(srv, t)) >= 2 and extracted(srv, t))
    roas = next(m for m in memories if m["memory_class"] == "PerformanceTargetMemory")
    assert roas["properties"]["metric"] == "roas" and roas["properties"]["goal"] == 3
    assert roas["confidence"] < 1 and roas["scope"] == "user"
    context = srv.http.get(f"{srv.url}/v1/tenants/{t}/context", headers=srv.bearer(t, user=OWNER)).text
    assert roas["id"] in context
    why = srv.http.get(f"{srv.url}/v1/tenants/{t}/memories/{roas['id']}/justify").json()
    assert why["source"] == "extraction" and why["evidence"]["conversation_id"] == cid
    assert why["evidence"]["text"].startswith(f"extracted from conversation {cid}, turns ")


def test_evidence_over_http_only_with_source_extraction(srv: Server) -> None:
    t = tenant()
    body = {"label": "x", "content": "x", "kind": "fact", "importance": 3, "source": "agent",
            "evidence": {"conversation_id": "c", "turn_ids": ["c-1"]}}  # fmt: skip
    r = srv.http.post(f"{srv.url}/v1/tenants/{t}/memories", json=body)
    assert r.status_code == 422 and "evidence is only for source extraction" in r.text


def test_an_idle_conversation_is_swept(srv: Server) -> None:
    t = tenant()
    post_turns(srv, t, "conv-idle", SAID[2:3])  # 1 < N turns: only the sweep extracts it (T = 1 s)
    (memory,) = until(lambda: extracted(srv, t), timeout=20)
    assert memory["properties"]["metric"] == "roas"


def test_kill_9_mid_extraction_then_restart_leaves_each_memory_once(broker: Settings, tmp_path: Path) -> None:
    server = start(broker, tmp_path, extraction_turns=6)
    t = tenant()
    posted: list[str] = []
    at_kill = 0
    for i in range(200):  # conversations go in until the first memories are out
        posted.append(f"conv-{i}")  # each of its own user: one user saying it twice would restate it
        post_turns(server, t, posted[-1], SAID, owner=f"user-{i}")
        if (at_kill := len(extracted(server, t))) > 0:
            break
    posted.append("conv-last")  # then one more, and kill -9 while its tail is being extracted
    post_turns(server, t, posted[-1], SAID, owner="user-last")
    expected = 2 * len(posted)
    assert 0 < at_kill < expected
    server.kill()
    server = Server(server.settings, tmp_path / "server.log").start()
    try:
        server.wait_ready()
        until(lambda: len(extracted(server, t)) >= expected, timeout=90)
        time.sleep(2)  # nothing more arrives
        memories = extracted(server, t)
        keys = [(m["label"], tuple(sorted(m["stakeholders"].items()))) for m in memories]
        assert len(memories) == expected, keys

        def source(m: dict[str, Any]) -> tuple[str, str]:
            why = server.http.get(f"{server.url}/v1/tenants/{t}/memories/{m['id']}/justify").json()
            return why["evidence"]["conversation_id"], m["memory_class"]

        by_evidence = {source(m) for m in memories}
        assert len(by_evidence) == expected
    finally:
        server.stop()
