"""``engram audit``: one memory's history read back from the real log, after real HTTP writes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from engram import audit
from tests.harness import Server, settings_env


def engram(server: Server, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **settings_env(server.settings)}
    return subprocess.run(
        [sys.executable, "-m", "engram.cli", *args], env=env, capture_output=True, text=True, timeout=120
    )


def write(server: Server, method: str, path: str, body: dict[str, Any], user: str = "dana") -> None:
    r = server.http.request(
        method,
        f"{server.url}/v1/tenants/acme{path}",
        params={"wait": "true"},
        json={"source": "operator", **body},
        headers=server.bearer("acme", role="operator", user=user),
        timeout=40,
    )
    assert r.status_code == 202, r.text


def memory(memory_id: str, **extra: Any) -> dict[str, Any]:
    return {"memory_id": memory_id, "label": f"{memory_id} label", "content": f"{memory_id} content",
            "kind": "objective", "importance": 4, **extra}  # fmt: skip


@pytest.mark.integration
def test_the_timeline_of_a_memory_and_its_chain(server: Server) -> None:
    write(server, "POST", "/memories", memory("old", purpose="onboarding"))
    write(server, "PATCH", "/memories/old", {"importance": 5, "purpose": "re-rated"}, user="olga")
    write(server, "POST", "/memories", memory("new"))
    write(server, "POST", "/memories/old/supersede", {"superseded_by": "new", "purpose": "new target"})
    write(server, "POST", "/memories", memory("newest", replaces="new"), user="olga")
    write(server, "POST", "/memories", memory("bystander"))
    write(server, "POST", "/memories/old/forget", {"reason": "retention policy"}, user="olga")

    done = engram(server, "audit", "acme", "old")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    order = ["MemoryRemembered", "MemoryRevised", "MemorySuperseded", "MemoryForgotten"]
    at = [out.index(f"] {t}\n") for t in order]
    assert at == sorted(at), out
    assert "memory old of tenant acme: 4 events" in out
    assert (
        "by dana (operator); source operator" in out
        and "logged 20" in out
        and "; occurred 20" in out
        and "by olga (operator)" in out
    )
    assert "purpose: onboarding" in out and "purpose: re-rated" in out and "purpose: new target" in out
    assert "reason: retention policy" in out and "changes: importance = 5" in out
    assert 'label: "(erased)"' in out  # forgotten: the log keeps only ciphertext of it
    assert "old superseded by new" in out
    assert "replaces:    (nothing)" in out and "replaced by: new -> newest" in out
    assert "bystander" not in out

    middle = json.loads(engram(server, "audit", "acme", "new", "--json").stdout)
    assert [(e["type"], e["relation"]) for e in middle["events"]] == [
        ("MemoryRemembered", "subject"),
        ("MemorySuperseded", "supersedes old"),
        ("MemoryRemembered", "replaced by newest"),
    ]
    assert middle["chain"] == {"replaces": ["old"], "replaced_by": ["newest"]}
    assert middle["events"][0]["payload"]["label"] == "new label"
    assert middle["events"][2]["actor"]["id"] == "olga"
    assert all(e["recorded_at"] and e["occurred_at"] and e["position"] for e in middle["events"])
    last = json.loads(engram(server, "audit", "acme", "newest", "--json").stdout)
    assert last["chain"] == {"replaces": ["new", "old"], "replaced_by": []}


@pytest.mark.integration
def test_an_unknown_memory_exits_1(server: Server) -> None:
    write(server, "POST", "/memories", memory("known"))
    done = engram(server, "audit", "acme", "ghost")
    assert done.returncode == 1 and done.stdout == ""
    assert "memory 'ghost' never appears in tenant 'acme''s events" in done.stderr
    assert engram(server, "audit", "elsewhere", "known").returncode == 1  # another tenant's log


def logged(event_type: str, payload: dict[str, Any], **envelope: Any) -> dict[str, Any]:
    """An event as ``streams.event_log`` gives it."""
    at = "2026-12-01T00:00:00.000Z"
    return {
        "type": event_type,
        "payload": payload,
        "position": "0:0",
        "recorded_at": at,
        "occurred_at": at,
        "actor": {"id": "dana", "role": "operator", "on_behalf_of": None},
        "source": "operator",
        "purpose": None,
        **envelope,
    }


def test_the_chain_follows_the_log_and_a_restore_undoes_a_link() -> None:
    log = [
        logged("MemorySuperseded", {"memory_id": "a", "superseded_by": "b"}),
        logged("MemoryRemembered", {"memory_id": "c", "replaces": "b"}),
        logged("MemorySuperseded", {"memory_id": "x", "superseded_by": "b"}),
        logged("MemorySuperseded", {"memory_id": "d", "superseded_by": "c"}),
        logged("MemoryRestored", {"memory_id": "d"}),
        logged("MemorySuperseded", {"memory_id": "c", "superseded_by": "a"}),  # a cycle is cut, not followed
    ]
    links = audit.supersessions(log)
    assert links == {"a": "b", "b": "c", "x": "b", "c": "a"}
    assert audit.successors(links, "a") == ["b", "c"]
    assert audit.predecessors(links, "b") == ["a", "x", "c"]
    assert audit.successors(links, "d") == [] and audit.predecessors(links, "d") == []
    assert [audit.relation(e, "b") for e in log[:3]] == ["supersedes a", "replaced by c", "supersedes x"]


def test_free_text_cannot_drive_the_terminal() -> None:
    hostile = "\x1b[2J\x1b[Hall clear"
    history = {
        "tenant": "acme",
        "memory_id": "m",
        "events": [
            {
                **logged("MemoryForgotten", {"memory_id": "m", "reason": hostile}, purpose=hostile),
                "relation": "subject",
            },
            {
                **logged("MemoryRevised", {"memory_id": "m", "changes": {"label": hostile}}),
                "relation": "subject",
            },
        ],
        "chain": {"replaces": [], "replaced_by": []},
        "skipped": 0,
    }
    text = audit.render(history)
    assert "\x1b" not in text and text.count("\\x1b[2J") == 2 and "\\u001b[2J" in text
