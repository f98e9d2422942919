"""The llm extractor's failures end to end, on the real broker and a real `engram serve` pointed at a
small local chat-completions server with canned answers (the pattern of tests/extraction/test_llm.py):
a malformed completion dead-letters the conversation's range with the reason, the conversation shows
it as ``failed_reason``, and its later turns are still extracted; a model that does not answer within
``ENGRAM_EXTRACTION_LLM_TIMEOUT_S`` is retried ``ENGRAM_EXTRACTION_RETRIES`` times, then dead-lettered
with a reason naming the timeout."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer
from engram.streams import codec

from engram.settings import Settings
from tests.api.test_capture import until
from tests.harness import Server, serving

pytestmark = pytest.mark.integration

OWNER = "dana"
TIMEOUT_S = 0.5
CAP = {
    "label": "Meta monthly cap",
    "content": "Never spend more than $40k a month on Meta.",
    "kind": "objective",
    "importance": 4,
    "confidence": 0.9,
    "memory_class": "BudgetConstraintMemory",
    "properties": {"platform": "meta", "amount": 40000, "currency": "USD", "period": "month"},
    "reason": "a spend cap the user set",
}  # no evidence: the whole tail it was given


class Model(BaseHTTPRequestHandler):
    """Chat completions that answer by what the turns say: MALFORMED, a completion nothing can be
    read from; SLOW, an answer after twice the extractor's timeout; anything else, the cap."""

    slow_calls = 0

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        said = body["messages"][-1]["content"]
        if "MALFORMED" in said:
            answer: dict[str, Any] = {
                "choices": [{"message": {"role": "assistant", "content": "Sure, noted!"}}]
            }
        else:
            if "SLOW" in said:
                Model.slow_calls += 1
                time.sleep(TIMEOUT_S * 4)
            call = {
                "id": "call_0",
                "type": "function",
                "function": {"name": "remember", "arguments": json.dumps(CAP)},
            }
            answer = {"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": [call]}}]}
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        with contextlib.suppress(OSError):  # the extractor gave up waiting and hung up
            self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def srv(broker: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    model = ThreadingHTTPServer(("127.0.0.1", 0), Model)
    threading.Thread(target=model.serve_forever, daemon=True).start()
    server = serving(
        broker,
        tmp_path_factory.mktemp("capture-llm"),
        extractor="llm",
        extraction_llm_base_url=f"http://127.0.0.1:{model.server_address[1]}/v1",
        extraction_llm_model="canned",
        extraction_llm_timeout_s=TIMEOUT_S,
        extraction_retries=1,
        extraction_backoff_s=0.05,
        extraction_turns=1,  # every turn is extracted as it arrives
    )
    yield server
    server.stop()
    model.shutdown()
    model.server_close()


def say(srv: Server, t: str, cid: str, text: str) -> None:
    turn = {"speaker": OWNER, "role": "user", "text": text}
    url = f"{srv.url}/v1/tenants/{t}/conversations/{cid}/turns"
    r = srv.http.post(url, params={"wait": "true"}, json={"turns": [turn]}, headers=srv.bearer(t, user=OWNER))
    assert r.status_code == 202, r.text


def conversation(srv: Server, t: str, cid: str) -> dict[str, Any]:
    r = srv.http.get(f"{srv.url}/v1/tenants/{t}/conversations/{cid}", headers=srv.bearer(t, user=OWNER))
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def through(srv: Server, t: str, cid: str, seq: int) -> dict[str, Any]:
    """The conversation once extraction has covered turn ``seq``."""
    return until(lambda: (c := conversation(srv, t, cid))["extracted_through"] >= seq and c, timeout=30)  # type: ignore[no-any-return]


async def dead_letters(settings: Settings, t: str, cid: str) -> list[str]:
    """The reasons of the dead letters of ``t``'s conversation ``cid``."""
    consumer = AIOKafkaConsumer(
        settings.dead_letters_topic,
        bootstrap_servers=settings.kafka_bootstrap,
        auto_offset_reset="earliest",
        group_id=None,
    )
    await consumer.start()
    reasons = []
    try:
        while batch := await consumer.getmany(timeout_ms=2000):
            for msgs in batch.values():
                for m in msgs:
                    headers = dict(m.headers)
                    if m.key == t.encode() and headers.get("conversation-id") == cid.encode():
                        assert headers["original-topic"] == settings.conversations_topic.encode()
                        reasons.append(headers[codec.HEADER_REASON].decode())
    finally:
        await consumer.stop()
    return reasons


def tenant() -> str:
    return f"llm-{uuid.uuid4().hex[:10]}"


def test_a_malformed_completion_is_dead_lettered_and_later_turns_are_still_extracted(srv: Server) -> None:
    t, cid = tenant(), "c-bad"
    say(srv, t, cid, "MALFORMED: hello there")
    failed = through(srv, t, cid, 1)
    assert failed["memory_ids"] == []
    assert "neither a remember tool call nor a JSON array" in (failed["failed_reason"] or ""), failed
    (reason,) = asyncio.run(dead_letters(srv.settings, t, cid))
    assert reason.startswith(f"extraction of {t}/{cid} turns 1-1 failed: llm: the completion has neither"), (
        reason
    )

    say(srv, t, cid, "And don't let Meta spend go over $40k this month.")
    done = through(srv, t, cid, 2)
    assert done["failed_reason"] is None and len(done["memory_ids"]) == 1, done
    why = srv.http.get(f"{srv.url}/v1/tenants/{t}/memories/{done['memory_ids'][0]}/justify").json()
    assert why["source"] == "extraction" and why["evidence"]["turn_ids"] == [done["turns"][1]["turn_id"]]
    got = srv.http.get(f"{srv.url}/v1/tenants/{t}/memories/{done['memory_ids'][0]}").json()
    assert got["properties"] == CAP["properties"] and got["confidence"] <= 0.8
    assert len(asyncio.run(dead_letters(srv.settings, t, cid))) == 1  # the good range is not dead-lettered


def test_a_model_that_times_out_is_retried_then_dead_lettered(srv: Server) -> None:
    t, cid = tenant(), "c-slow"
    before = Model.slow_calls
    say(srv, t, cid, "SLOW: keep Meta under $40k a month")
    failed = through(srv, t, cid, 1)
    reason = failed["failed_reason"] or ""
    assert f"did not answer within {TIMEOUT_S:g} s" in reason and "after 2 tries" in reason, failed
    assert failed["memory_ids"] == []
    assert Model.slow_calls - before == 2  # the first try and one retry (ENGRAM_EXTRACTION_RETRIES=1)
    (letter,) = asyncio.run(dead_letters(srv.settings, t, cid))
    assert f"turns 1-1 failed: llm: the model did not answer within {TIMEOUT_S:g} s" in letter, letter
    assert letter.endswith("after 2 tries"), letter
