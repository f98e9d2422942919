"""Capture on the real broker and a real `engram serve`: turns become memories in the context with
their evidence, an idle conversation is swept, a kill -9 mid-extraction leaves every memory exactly
once after a restart, forgetting an extracted memory erases the turns it came from (live, in a
rebuild of the conversation store, in the key store), what a person said in person is only ever
proposed against while an earlier capture is replaced, and `engram import-conversations` stores a
LoCoMo-style chat and JSON lines in order, naming a malformed line. The llm extractor's failures
are in test_capture_llm.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer
from engram.projections.conversations import ConversationStore
from engram.schemas import sealing
from engram.schemas.events import Position
from engram.streams.conversations import handle_conversation_record, read_turns
from engram.streams.keystore import KeyStore, ReadOnlyKeys
from engram.streams.projector import Record

from engram.settings import Settings
from tests.api.test_shred import hits, topic_bytes
from tests.harness import Server, serving, settings_env
from tests.realtalk import available, data_dir

OWNER = "ana"
SAID = [
    ("user", "Morning! How was the weekend?"),
    ("assistant", "Good, thanks. What are we working on?"),
    ("user", "Keep ROAS above 3 on every campaign."),
    ("assistant", "Noted."),
    ("user", "And don't let Meta spend go over $40k this month."),
    ("assistant", "Understood."),
]


@pytest.fixture(scope="module")
def srv(broker: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = serving(broker, tmp_path_factory.mktemp("capture"), extraction_idle_s=1.0)
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
    server = serving(broker, tmp_path, extraction_turns=6)
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


def conversation(srv: Server, t: str, cid: str, owner: str = OWNER) -> dict[str, Any]:
    r = srv.http.get(f"{srv.url}/v1/tenants/{t}/conversations/{cid}", headers=srv.bearer(t, user=owner))
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


async def rebuilt_turns(settings: Settings, t: str, cid: str, root: Path) -> list[tuple[str, int, str, str]]:
    """The conversation as a conversation store rebuilt from the topic reads it (keys read-only,
    as any replay holds them): (turn id, seq, speaker, text)."""
    store = ConversationStore(root)  # no key store to destroy in: a rebuild never acts
    keys = ReadOnlyKeys(KeyStore(settings.key_store_dir))

    async def refused(record: Record, reason: str) -> None:
        raise AssertionError(f"a rebuild refused a record the live store applied: {reason}")

    consumer = AIOKafkaConsumer(
        settings.conversations_topic,
        bootstrap_servers=settings.kafka_bootstrap,
        auto_offset_reset="earliest",
        group_id=None,
    )
    await consumer.start()
    try:
        while batch := await consumer.getmany(timeout_ms=2000):
            for msgs in batch.values():
                for m in msgs:
                    if m.key == t.encode():
                        record = Record(m.key, m.value, list(m.headers), Position(m.partition, m.offset))
                        await handle_conversation_record(record, store, keys, refused)
    finally:
        await consumer.stop()
    turns = [(x.turn_id, x.seq, x.speaker, x.text) for x in read_turns(store, keys, t, cid)]
    store.close()
    return turns


def test_forgetting_an_extracted_memory_erases_the_turns_it_came_from(srv: Server, tmp_path: Path) -> None:
    t, cid, mark = tenant(), "conv-forget", uuid.uuid4().hex[:10]
    said = [(role, f"{text} ({mark}{n})") for n, (role, text) in enumerate(SAID)]
    post_turns(srv, t, cid, said)
    memories = until(lambda: len(extracted(srv, t)) >= 2 and extracted(srv, t))
    roas = next(m for m in memories if m["memory_class"] == "PerformanceTargetMemory")
    meta = next(m for m in memories if m["memory_class"] == "BudgetConstraintMemory")

    def evidence(m: dict[str, Any]) -> list[str]:
        why = srv.http.get(f"{srv.url}/v1/tenants/{t}/memories/{m['id']}/justify").json()
        assert why["evidence"]["conversation_id"] == cid
        return why["evidence"]["turn_ids"]  # type: ignore[no-any-return]

    gone, kept = evidence(roas), evidence(meta)
    assert gone and kept and not set(gone) & set(kept)
    before = {x["turn_id"]: x for x in conversation(srv, t, cid)["turns"]}
    assert [x["text"] for x in before.values()] == [text for _, text in said]

    r = srv.http.post(
        f"{srv.url}/v1/tenants/{t}/memories/{roas['id']}/forget",
        params={"wait": "true"},
        json={"source": "operator", "reason": "asked to be forgotten"},
    )
    assert r.status_code == 202, r.text
    after = conversation(srv, t, cid)
    assert [x["turn_id"] for x in after["turns"]] == list(before)  # ids, seqs and order stay
    for x in after["turns"]:
        if x["turn_id"] in gone:
            assert (x["speaker"], x["text"]) == (sealing.ERASED, sealing.ERASED), x
        else:
            assert (x["speaker"], x["text"]) == (
                before[x["turn_id"]]["speaker"],
                before[x["turn_id"]]["text"],
            )
    assert any(x["turn_id"] in kept and mark in x["text"] for x in after["turns"])  # the other memory's turn
    keys = KeyStore(srv.settings.key_store_dir)
    assert all(keys.data_key(t, sealing.turn_key_id(cid, turn)) is None for turn in gone)
    assert all(
        keys.data_key(t, sealing.turn_key_id(cid, turn)) is not None for turn in before if turn not in gone
    )
    assert evidence(roas) == gone  # justify still says where it came from
    # a rebuild of the conversation store from the topic reads what the live one does
    live = [(x["turn_id"], x["seq"], x["speaker"], x["text"]) for x in after["turns"]]
    assert asyncio.run(rebuilt_turns(srv.settings, t, cid, tmp_path / "rebuilt")) == live
    # the words were never on the log in the clear (sealed), and the erased turn is not written again
    words = [f"{mark}{n}" for n in range(len(said))]
    for topic in (
        srv.settings.conversations_topic,
        srv.settings.events_topic,
        srv.settings.dead_letters_topic,
    ):
        assert hits(asyncio.run(topic_bytes(srv.settings, topic)), words) == 0, topic
    again = [{"turn_id": gone[0], "speaker": OWNER, "role": "user", "text": "Keep ROAS above 3."}]
    r = srv.http.post(
        f"{srv.url}/v1/tenants/{t}/conversations/{cid}/turns",
        json={"turns": again},
        headers=srv.bearer(t, user=OWNER),
    )
    assert r.status_code == 422 and "was erased" in r.text, r.text


def active(srv: Server, t: str, memory_id: str, who: str = OWNER) -> bool:
    r = srv.http.get(f"{srv.url}/v1/tenants/{t}/memories/{memory_id}", headers=srv.bearer(t, user=who))
    assert r.status_code == 200, r.text
    return bool(r.json()["active"])


def in_context(srv: Server, t: str, who: str = OWNER) -> list[str]:
    r = srv.http.get(f"{srv.url}/v1/tenants/{t}/context", headers=srv.bearer(t, user=who))
    assert r.status_code == 200, r.text
    return [it["id"] for b in r.json()["blocks"] for it in b["items"]]


def test_what_a_person_said_in_person_is_proposed_against_never_overwritten(srv: Server) -> None:
    t = tenant()
    human = {"memory_id": "ana-roas", "label": "ROAS target", "content": "Keep ROAS at 3.",
             "kind": "objective", "importance": 5, "scope": "user", "stakeholders": {"user_id": OWNER},
             "source": "agent", "memory_class": "PerformanceTargetMemory",
             "properties": {"metric": "roas", "goal": 3}}  # fmt: skip
    r = srv.http.post(
        f"{srv.url}/v1/tenants/{t}/memories",
        params={"wait": "true"},
        json=human,
        headers=srv.bearer(t, user=OWNER),
    )
    assert r.status_code == 202 and r.json()["applied"], r.text
    post_turns(srv, t, "conv-raise", [("user", "Keep ROAS above 4")])  # the idle sweep extracts it
    (proposal,) = until(lambda: extracted(srv, t), timeout=20)
    assert proposal["properties"]["goal"] == 4 and proposal["proposes"] == "ana-roas"
    listed = srv.http.get(f"{srv.url}/v1/tenants/{t}/proposals", headers=srv.bearer(t, user=OWNER)).json()
    assert listed["count"] == 1 and listed["data"][0]["id"] == proposal["id"]
    assert listed["data"][0]["replaces"]["id"] == "ana-roas"
    assert active(srv, t, "ana-roas") and not active(srv, t, proposal["id"])
    context = in_context(srv, t)
    assert "ana-roas" in context and proposal["id"] not in context

    r = srv.http.post(
        f"{srv.url}/v1/tenants/{t}/proposals/{proposal['id']}/accept",
        params={"wait": "true"},
        json={"source": "agent", "reason": "yes, 4 now"},
        headers=srv.bearer(t, user=OWNER),
    )
    assert r.status_code == 202 and r.json()["applied"], r.text
    assert active(srv, t, proposal["id"]) and not active(srv, t, "ana-roas")
    context = in_context(srv, t)
    assert proposal["id"] in context and "ana-roas" not in context


def test_a_later_capture_replaces_an_earlier_capture_silently(srv: Server) -> None:
    t = tenant()
    post_turns(srv, t, "conv-a", [("user", "Keep ROAS above 3")])
    (first,) = until(lambda: extracted(srv, t), timeout=20)
    assert first["properties"]["goal"] == 3 and first["active"]
    post_turns(srv, t, "conv-b", [("user", "Keep ROAS above 5")])  # another conversation, the same user
    both = until(lambda: len(extracted(srv, t)) == 2 and extracted(srv, t), timeout=20)
    second = next(m for m in both if m["id"] != first["id"])
    assert second["properties"]["goal"] == 5 and second["proposes"] is None
    assert until(lambda: not active(srv, t, first["id"]), timeout=10)
    assert [m["properties"]["goal"] for m in extracted(srv, t) if m["active"]] == [5]
    assert (
        srv.http.get(f"{srv.url}/v1/tenants/{t}/proposals", headers=srv.bearer(t, user=OWNER)).json()["count"]
        == 0
    )
    assert second["id"] in in_context(srv, t) and first["id"] not in in_context(srv, t)


def import_file(srv: Server, t: str, path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **settings_env(srv.settings)}
    cmd = [sys.executable, "-m", "engram.cli", "import-conversations", str(path), "--tenant", t, *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.skipif(not available(), reason="REALTALK not found: set ENGRAM_REALTALK_DIR")
def test_import_conversations_stores_a_locomo_chat_and_json_lines_in_order(
    srv: Server, tmp_path: Path
) -> None:
    t = tenant()
    chat = json.loads((data_dir() / "Chat_1_Emi_Elise.json").read_text(encoding="utf-8"))
    piece = {"name": chat["name"], "session_1": chat["session_1"][:5], "session_2": chat["session_2"][:4]}
    locomo = tmp_path / "emi-elise.json"
    locomo.write_text(json.dumps(piece), encoding="utf-8")
    done = import_file(srv, t, locomo, "--user", "emi", "--conversation", "realtalk-1", "--me", "Emi")
    assert done.returncode == 0, done.stderr
    assert "imported 9 turns, 1 conversations" in done.stdout and "0 failed" in done.stdout
    assert "9/9 turns" in done.stderr and "imported" not in done.stderr  # the progress bar, on stderr
    expected = [(x["dia_id"].replace(":", "-"), x["speaker"], x["clean_text"])
                for x in piece["session_1"] + piece["session_2"]]  # fmt: skip
    got = until(lambda: len(c := conversation(srv, t, "realtalk-1", "emi")["turns"]) == 9 and c)
    assert [(x["turn_id"], x["speaker"], x["text"]) for x in got] == expected
    assert [x["seq"] for x in got] == list(range(1, 10))
    assert [x["role"] for x in got] == ["user" if s == "Emi" else "other" for _, s, _ in expected]

    lines = [
        {"turn_id": "j1", "speaker": "ana", "text": "Our tone is playful.", "time": "2026-12-01T10:00Z"},
        {"turn_id": "j2", "speaker": "bot", "role": "assistant", "text": "Ok.", "time": "2026-12-01T10:01Z"},
    ]  # fmt: skip
    jsonl = tmp_path / "chat.jsonl"
    bad = '{"turn_id": "j3", "speaker": "ana", "text": "unterminated'
    last = {"turn_id": "j4", "speaker": "ana", "text": "Never use emojis.", "time": "2026-12-01T10:03Z"}
    jsonl.write_text("\n".join([*map(json.dumps, lines), bad, "", json.dumps(last), "[1, 2]"]) + "\n")
    done = import_file(srv, t, jsonl, "--user", OWNER)
    assert done.returncode == 1, done.stderr
    assert "imported 3 turns, 1 conversations" in done.stdout and "2 failed" in done.stdout
    assert (
        f"{jsonl}: line 3: not JSON" in done.stderr
        and f"{jsonl}: line 6: a turn is a JSON object" in done.stderr
    )
    got = until(lambda: len(c := conversation(srv, t, "chat")["turns"]) == 3 and c)
    assert [(x["turn_id"], x["role"], x["text"]) for x in got] == [
        ("j1", "user", "Our tone is playful."),
        ("j2", "assistant", "Ok."),
        ("j4", "user", "Never use emojis."),
    ]
    again = import_file(srv, t, locomo, "--user", "emi", "--conversation", "realtalk-1", "--me", "Emi")
    assert again.returncode == 0, again.stderr  # imported twice: stored once
    time.sleep(1)
    assert len(conversation(srv, t, "realtalk-1", "emi")["turns"]) == 9
