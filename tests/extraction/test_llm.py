"""The llm extractor against a real local HTTP server that speaks chat completions with canned answers.

This tests our client and our validation, not a model: the server answers by the requested model
name (a good tool call, one the shapes refuse, a malformed completion, a slow one, a 500, a 429, a
JSON array in the text), and records what it was sent.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from engram.projections.knowledge import load_knowledge
from engram.streams.extraction.extractor import ExtractionFailed, Known, Turn
from engram.streams.extraction.factory import load_extractor
from engram.streams.extraction.llm import LLMExtractor
from engram.streams.extraction.patterns import PatternExtractor

from engram.settings import Settings

AT = datetime(2026, 12, 5, tzinfo=UTC)
TURNS = [
    Turn("c1", "turn-1", 1, "dana", "user", "don't let Meta spend go over $40k this month", AT),
    Turn("c1", "turn-2", 2, "bot", "assistant", "Noted.", AT),
]
CAP = {
    "label": "Meta monthly cap",
    "content": "Never spend more than $40k a month on Meta.",
    "kind": "objective",
    "importance": 4,
    "confidence": 1.0,
    "memory_class": "BudgetConstraintMemory",
    "properties": {"platform": "meta", "amount": 40000, "currency": "USD", "period": "month"},
    "evidence": ["turn-1", "turn-99"],
    "reason": "a spend cap the user set",
}


def tool_calls(*arguments: Any) -> dict[str, Any]:
    calls = [
        {
            "id": f"call_{n}",
            "type": "function",
            "function": {"name": "remember", "arguments": a if isinstance(a, str) else json.dumps(a)},
        }
        for n, a in enumerate(arguments)
    ]
    return {"choices": [{"index": 0, "message": {"role": "assistant", "content": None, "tool_calls": calls}}]}


BAD_SHAPE = {**CAP, "properties": {"platform": "meta", "amount": -1, "currency": "dollars"}}
ANSWERS: dict[str, tuple[int, Any]] = {
    "good": (200, tool_calls(CAP, {**CAP, "memory_class": "LiveContext"})),
    "bad-shape": (200, tool_calls(BAD_SHAPE)),
    "malformed": (
        200,
        {"choices": [{"message": {"role": "assistant", "content": "Sure! I will remember that."}}]},
    ),
    "broken-arguments": (200, tool_calls('{"label": "unterminated')),
    "not-json": (200, "<html>oops</html>"),
    "array-in-text": (
        200,
        {
            "choices": [
                {
                    "message": {
                        "content": "```json\n" + json.dumps([{**CAP, "evidence": ["turn-1"]}]) + "\n```"
                    }
                }
            ]
        },
    ),
    "nothing": (200, {"choices": [{"message": {"content": "[]"}}]}),
    "invented-evidence": (200, tool_calls({**CAP, "evidence": ["turn-7"]})),
    "error": (500, {"error": "boom"}),
    "busy": (429, {"error": "rate limited"}),
    "unauthorised": (401, {"error": "bad key"}),
}


class Handler(BaseHTTPRequestHandler):
    seen: list[tuple[str, dict[str, str], dict[str, Any]]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Handler.seen.append((self.path, dict(self.headers), body))
        if body["model"] == "slow":
            time.sleep(1.5)
            status, answer = 200, tool_calls(CAP)
        else:
            status, answer = ANSWERS[body["model"]]
        data = answer.encode() if isinstance(answer, str) else json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1/"
    server.shutdown()
    server.server_close()


def extract(
    endpoint: str, model: str, *, timeout_s: float = 5.0, known: list[Known] | None = None
) -> list[Any]:
    extractor = LLMExtractor(
        load_knowledge(), base_url=endpoint, model=model, api_key="sk-test", timeout_s=timeout_s
    )
    return asyncio.run(extractor.extract(TURNS, known or []))


def test_a_good_tool_call_becomes_a_checked_candidate(
    endpoint: str, caplog: pytest.LogCaptureFixture
) -> None:
    known = [Known("m1", "Brand voice", "Plain and warm.", "BrandVoiceMemory")]
    [c] = extract(endpoint, "good", known=known)
    assert c.memory["properties"] == CAP["properties"]
    assert c.memory["confidence"] < 1  # clamped: a model's word is not a human's
    assert c.evidence == ("turn-1",)  # turn-99 was never given
    assert c.reason.startswith("llm:good:")
    assert "LiveContext is derived by the rules" in caplog.text  # the second call, dropped with its reason
    path, headers, body = Handler.seen[-1]
    assert path == "/v1/chat/completions" and headers["Authorization"] == "Bearer sk-test"
    [tool] = body["tools"]
    assert tool["type"] == "function" and tool["function"]["name"] == "remember"
    assert "BudgetConstraintMemory" in tool["function"]["parameters"]["properties"]["memory_class"]["enum"]
    assert body["tool_choice"] == "auto"
    prompt = body["messages"][-1]["content"]
    assert "[turn-1] dana (user): don't let Meta spend go over $40k this month" in prompt
    assert "do not repeat these" in prompt and "Plain and warm." in prompt


def test_a_candidate_the_shapes_refuse_is_dropped_with_the_reason(
    endpoint: str, caplog: pytest.LogCaptureFixture
) -> None:
    assert extract(endpoint, "bad-shape") == []
    assert ":amount must be > 0" in caplog.text and ":currency must match" in caplog.text


@pytest.mark.parametrize(
    ("model", "reason"),
    [
        ("malformed", "neither a remember tool call nor a JSON array"),
        ("broken-arguments", "arguments that are not JSON"),
        ("not-json", "not JSON"),
        ("unauthorised", "refused the request: 401"),
    ],
)
def test_a_completion_nothing_can_be_read_from_fails_for_good(endpoint: str, model: str, reason: str) -> None:
    with pytest.raises(ExtractionFailed) as failed:
        extract(endpoint, model)
    assert not failed.value.retryable
    assert reason in failed.value.reason


@pytest.mark.parametrize(("model", "reason"), [("error", "answered 500"), ("busy", "answered 429")])
def test_a_server_error_or_rate_limit_is_retried(endpoint: str, model: str, reason: str) -> None:
    with pytest.raises(ExtractionFailed) as failed:
        extract(endpoint, model)
    assert failed.value.retryable and reason in failed.value.reason


def test_a_slow_model_times_out_retryably(endpoint: str) -> None:
    with pytest.raises(ExtractionFailed) as failed:
        extract(endpoint, "slow", timeout_s=0.3)
    assert failed.value.retryable and "did not answer within 0.3 s" in failed.value.reason


def test_a_refused_connection_is_retried() -> None:
    with pytest.raises(ExtractionFailed) as failed:
        extract("http://127.0.0.1:9/v1", "good")
    assert failed.value.retryable and "cannot reach" in failed.value.reason


def test_a_json_array_in_the_text_is_read_and_an_empty_one_is_nothing(endpoint: str) -> None:
    [c] = extract(endpoint, "array-in-text")
    assert c.memory["memory_class"] == "BudgetConstraintMemory" and c.evidence == ("turn-1",)
    assert extract(endpoint, "nothing") == []


def test_evidence_naming_no_given_turn_drops_the_candidate(endpoint: str) -> None:
    assert extract(endpoint, "invented-evidence") == []


def test_load_extractor_follows_the_settings(endpoint: str) -> None:
    knowledge = load_knowledge()
    assert isinstance(load_extractor(Settings.model_construct(), knowledge), PatternExtractor)
    assert load_extractor(Settings.model_construct(extractor="none"), knowledge) is None
    llm = load_extractor(
        Settings.model_construct(
            extractor="llm", extraction_llm_base_url=endpoint, extraction_llm_model="good"
        ),
        knowledge,
    )
    assert isinstance(llm, LLMExtractor) and llm.api_key is None
    with pytest.raises(ValueError, match="ENGRAM_EXTRACTION_LLM_MODEL"):
        load_extractor(Settings.model_construct(extractor="llm", extraction_llm_base_url=endpoint), knowledge)
    with pytest.raises(ValueError, match="unknown extractor 'gpt'"):
        load_extractor(Settings.model_construct(extractor="gpt"), knowledge)
