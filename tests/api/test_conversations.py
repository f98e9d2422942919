"""Conversation turns on the real broker and a real server: POST turns then GET them back (sealed
on the log, opened for whoever may see the conversation), an idempotent re-send, a reused turn id
with other words (409), a stranger's view (the 404 of a conversation that does not exist), hostile
bodies (4xx with reasons), and an erasure: GET 404 after, the turn keys gone, and no turn's words in
the bytes of any topic."""

from __future__ import annotations

import asyncio
import json
import uuid

from engram.schemas import sealing
from engram.streams.keystore import KeyStore

from engram.settings import Settings
from tests.api.test_shred import hits, topic_bytes
from tests.harness import Server


def turns(mark: str) -> list[dict[str, str]]:
    return [
        {"turn_id": "t1", "speaker": "Sam", "role": "user", "text": f"keep ROAS above 3 {mark}A",
         "time": "2026-12-01T10:00:00Z"},
        {"turn_id": "t2", "speaker": "Bot", "role": "assistant", "text": f"noted {mark}B",
         "time": "2026-12-01T10:00:05Z"},
        {"speaker": "Sam", "role": "user", "text": f"and never spend over $40k on Meta {mark}C",
         "time": "2026-12-01T10:01:00Z"},
    ]  # fmt: skip


def test_turns_round_trip_are_idempotent_private_and_erased(server: Server, settings: Settings) -> None:
    mark = uuid.uuid4().hex[:10]
    tenant = f"conv-{mark[:6]}"
    base = f"{server.url}/v1/tenants/{tenant}/conversations/c1"
    sam = server.bearer(tenant, role="user", user="sam")
    kim = server.bearer(tenant, role="user", user="kim")
    sams_agent = server.bearer(tenant, role="agent", user="assistant", on_behalf_of="sam")

    r = server.http.post(f"{base}/turns", params={"wait": "true"}, json={"turns": turns(mark)}, headers=sam)
    assert r.status_code == 202, r.text
    accepted = r.json()["turns"]
    assert [a["turn_id"] for a in accepted[:2]] == ["t1", "t2"] and accepted[2]["turn_id"].startswith("t-")
    assert all(a["stored"] for a in accepted)

    got = server.http.get(base, headers=sam)
    assert got.status_code == 200, got.text
    body = got.json()
    assert body["owner"] == "sam" and body["extracted_through"] == 0 and body["memory_ids"] == []
    assert [(t["seq"], t["speaker"], t["text"]) for t in body["turns"]] == [
        (1, "Sam", f"keep ROAS above 3 {mark}A"),
        (2, "Bot", f"noted {mark}B"),
        (3, "Sam", f"and never spend over $40k on Meta {mark}C"),
    ]
    assert server.http.get(base, headers=sams_agent).json() == body  # an agent acting for sam
    assert server.http.get(base).status_code == 200  # an operator

    # a re-send is the same turns, stored once; a reused id with other words is a 409
    again = server.http.post(
        f"{base}/turns", params={"wait": "true"}, json={"turns": turns(mark)}, headers=sam
    )
    assert again.status_code == 202, again.text
    assert [a["event_id"] for a in again.json()["turns"]] == [a["event_id"] for a in accepted]
    assert len(server.http.get(base, headers=sam).json()["turns"]) == 3
    other = {**turns(mark)[0], "text": "something else"}
    r = server.http.post(f"{base}/turns", json={"turns": [other]}, headers=sam)
    assert r.status_code == 409 and "t1" in r.text, r.text

    # a stranger: exactly the answer for a conversation that does not exist
    missing = server.http.get(f"{server.url}/v1/tenants/{tenant}/conversations/nope", headers=kim)
    theirs = server.http.get(base, headers=kim)
    assert theirs.status_code == missing.status_code == 404
    assert theirs.json()["detail"][0]["msg"].replace("c1", "X") == missing.json()["detail"][0]["msg"].replace(
        "nope", "X"
    )
    assert server.http.delete(base, headers=kim).status_code == 404
    assert server.http.post(f"{base}/turns", json={"turns": [turns("x")[0]]}, headers=kim).status_code == 404

    # the log holds no turn's words: sealed from the first write
    words = [f"{mark}A", f"{mark}B", f"{mark}C"]
    assert hits(asyncio.run(topic_bytes(settings, settings.conversations_topic)), words) == 0

    # erasure: by the owner; after it, 404, the keys gone, no words anywhere on the log
    r = server.http.delete(base, params={"wait": "true", "reason": "asked"}, headers=sam)
    assert r.status_code == 202 and r.json()["erased"], r.text
    assert server.http.get(base, headers=sam).status_code == 404
    assert server.http.get(base).status_code == 404
    keys = KeyStore(settings.key_store_dir)
    assert keys.data_key(tenant, sealing.turn_key_id("c1", "t1")) is None
    assert keys.data_key(tenant, sealing.turn_key_id("c1", "t2")) is None
    r = server.http.post(f"{base}/turns", json={"turns": turns(mark)}, headers=sam)
    assert r.status_code == 409 and "erased" in r.text, r.text
    for topic in (settings.conversations_topic, settings.events_topic, settings.dead_letters_topic):
        assert hits(asyncio.run(topic_bytes(settings, topic)), words) == 0, topic


def test_hostile_turns_are_4xx_with_reasons(server: Server) -> None:
    tenant = f"conv-{uuid.uuid4().hex[:6]}"
    url = f"{server.url}/v1/tenants/{tenant}/conversations/c1/turns"
    sam = server.bearer(tenant, role="user", user="sam")
    ok = {"speaker": "Sam", "role": "user", "text": "hi", "time": "2026-12-01T10:00:00Z"}
    bodies = {
        "empty list": {"turns": []},
        "empty text": {"turns": [{**ok, "text": ""}]},
        "blank text": {"turns": [{**ok, "text": "   "}]},
        "oversize text": {"turns": [{**ok, "text": "x" * 40_000}]},
        "unknown role": {"turns": [{**ok, "role": "robot"}]},
        "bad turn id": {"turns": [{**ok, "turn_id": "../../etc"}]},
        "number time": {"turns": [{**ok, "time": 12}]},
        "unknown field": {"turns": [{**ok, "mood": "happy"}]},
        "too many": {"turns": [ok] * 10_001},
    }
    for name, body in bodies.items():
        r = server.http.post(url, json=body, headers=sam)
        assert r.status_code == 422, (name, r.status_code, r.text[:300])
        assert r.json()["detail"][0]["msg"], name
    surrogate = '{"turns": [{"speaker": "Sam", "role": "user", "text": "\\ud800"}]}'
    r = server.http.post(url, content=surrogate, headers={**sam, "Content-Type": "application/json"})
    assert 400 <= r.status_code < 500, r.text
    nan = '{"turns": [{"speaker": "Sam", "role": "user", "text": NaN}]}'
    r = server.http.post(url, content=nan, headers={**sam, "Content-Type": "application/json"})
    assert 400 <= r.status_code < 500, r.text
    same_id = {"turns": [{**ok, "turn_id": "a"}, {**ok, "turn_id": "a", "text": "other"}]}
    r = server.http.post(url, json=same_id, headers=sam)
    assert r.status_code == 409, r.text
    bad_path = server.http.get(f"{server.url}/v1/tenants/{tenant}/conversations/..%2Fx", headers=sam)
    assert 400 <= bad_path.status_code < 500
    assert json.loads(server.http.post(url, json={"turns": [ok]}, headers=sam).text)["turns"][0]["turn_id"]
