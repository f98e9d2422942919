"""An extractor that asks a model, through any OpenAI-compatible chat endpoint (OpenAI, Ollama, vLLM).

Off by default (``ENGRAM_EXTRACTOR=llm`` turns it on): the deterministic patterns need no model,
and a model is the slow, costly, fallible part. The model is shown the same typed ``remember`` tool
an agent is (``projections.memory_tool``, generated from the ontology and shapes), plus the turns
and the memories already known; it answers with tool calls (or, as a fallback, a JSON array in its
text). Nothing it says is trusted: every candidate is checked as the write it would become
(``checks.refusal``) and dropped with a logged reason if refused, its evidence is cut to turn ids
it was actually given, and its confidence is kept below 1. How a failure is retried is the
workflow's: a timeout, a refused connection, a 429 or a 5xx is ``retryable``; a completion nothing
can be read from is not (it would fail the same way again).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any

import httpx
from engram.projections.knowledge import Knowledge
from engram.projections.memory_tool import memory_tool
from engram.streams.extraction.checks import refusal
from engram.streams.extraction.extractor import Candidate, ExtractionFailed, Known, Turn

log = logging.getLogger(__name__)

MAX_CONFIDENCE = 0.95  # a model's word is never a human's
DEFAULT_CONFIDENCE = 0.7
SYSTEM_PROMPT = (
    "You extract durable memories from a conversation for a business's AI agents. Call the `remember` "
    "tool once for each belief worth keeping beyond this conversation that a person stated: targets, "
    "budget caps, rules (always/never), preferences, durable facts about the business, hiring criteria, "
    "candidate assessments, sourcing channels. Choose the most specific memory_class and give the "
    "properties it requires. Do not extract chit-chat, questions, hypotheticals, past or retracted "
    "statements, or what the assistant said. Do not repeat a memory listed as already known. Cite the "
    "turn ids a memory rests on in `evidence`. If nothing is worth remembering, reply with []."
)
JSON_ARRAY = re.compile(r"\[.*\]", re.S)


class LLMExtractor:
    """Turns → candidates by one chat completion with the typed ``remember`` tool."""

    name = "llm"

    def __init__(
        self,
        knowledge: Knowledge,
        *,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout_s: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.knowledge = knowledge
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.api_key = api_key
        self.timeout_s = timeout_s
        self.transport = transport
        tool = memory_tool(knowledge)
        parameters = json.loads(json.dumps(tool["parameters"]))
        parameters["properties"]["evidence"] = {
            "type": "array",
            "items": {"type": "string"},
            "description": "The ids of the turns this memory rests on.",
        }
        parameters["properties"]["reason"] = {"type": "string", "description": "Why it is worth remembering."}
        self.tool = {
            "type": "function",
            "function": {"name": tool["name"], "description": tool["description"], "parameters": parameters},
        }

    def request(self, turns: Sequence[Turn], known: Sequence[Known]) -> dict[str, Any]:
        """The chat-completions request body (deterministic for the same input: temperature 0)."""
        lines = [f"[{t.turn_id}] {t.speaker} ({t.role}): {t.text}" for t in turns]
        already = [
            json.dumps(
                {
                    "memory_class": k.memory_class,
                    "label": k.label,
                    "content": k.content,
                    "properties": dict(k.properties),
                },
                sort_keys=True,
                default=str,
            )
            for k in known
        ]
        user = "Conversation turns:\n" + "\n".join(lines)
        user += "\n\nAlready known (do not repeat these):\n" + ("\n".join(already) if already else "(none)")
        return {
            "model": self.model,
            "temperature": 0,
            "messages": [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}],
            "tools": [self.tool],
            "tool_choice": "auto",
        }

    async def extract(self, turns: Sequence[Turn], known: Sequence[Known]) -> list[Candidate]:
        if not turns:
            return []
        body = await self._complete(self.request(turns, known))
        raw = parse_completion(body)
        return self.candidates(raw, turns)

    async def _complete(self, request: dict[str, Any]) -> Any:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        try:
            async with httpx.AsyncClient(timeout=self.timeout_s, transport=self.transport) as client:
                response = await client.post(self.url, json=request, headers=headers)
        except httpx.TimeoutException as exc:
            raise ExtractionFailed(
                f"the model did not answer within {self.timeout_s:g} s ({type(exc).__name__})", retryable=True
            ) from exc
        except httpx.TransportError as exc:
            raise ExtractionFailed(
                f"cannot reach {self.url}: {type(exc).__name__}: {exc}", retryable=True
            ) from exc
        if response.status_code == 429 or response.status_code >= 500 or response.status_code == 408:
            raise ExtractionFailed(f"{self.url} answered {response.status_code}", retryable=True)
        if response.status_code >= 400:
            raise ExtractionFailed(
                f"{self.url} refused the request: {response.status_code} {response.text[:200]}",
                retryable=False,
            )
        try:
            return response.json()
        except ValueError as exc:
            raise ExtractionFailed(
                f"the completion is not JSON: {response.text[:200]!r}", retryable=False
            ) from exc

    def candidates(self, raw: Sequence[Mapping[str, Any]], turns: Sequence[Turn]) -> list[Candidate]:
        """Checked candidates from the model's ``remember`` arguments; the refused are logged and dropped."""
        ids = [t.turn_id for t in turns]
        out: list[Candidate] = []
        for n, args in enumerate(raw):
            cited = args.get("evidence")
            reason = args.get("reason")
            memory = {k: args[k] for k in args if k not in ("evidence", "reason", "scope", "stakeholders")}
            if "confidence" not in memory or not isinstance(memory["confidence"], int | float):
                memory["confidence"] = DEFAULT_CONFIDENCE
            memory["confidence"] = min(max(float(memory["confidence"]), 0.0), MAX_CONFIDENCE)
            if cited is None:
                evidence = tuple(ids)  # the model cited nothing: the whole tail is what it read
            elif isinstance(cited, list):
                evidence = tuple(dict.fromkeys(str(c) for c in cited if str(c) in ids))
            else:
                evidence = ()
            if not evidence:
                log.warning("extraction candidate %d dropped: it cites no turn it was given (%r)", n, cited)
                continue
            why = refusal(self.knowledge, memory)
            if why is not None:
                log.warning("extraction candidate %d dropped: %s", n, why)
                continue
            text = reason if isinstance(reason, str) and reason.strip() else "remember"
            out.append(
                Candidate(memory=memory, evidence=evidence, reason=f"{self.name}:{self.model}: {text[:200]}")
            )
        return out


def parse_completion(body: Any) -> list[dict[str, Any]]:
    """The ``remember`` arguments in a chat completion: its tool calls, else a JSON array in its text.

    Raises ``ExtractionFailed(retryable=False)`` when nothing can be read: the same completion would
    fail the same way again.
    """
    try:
        message = body["choices"][0]["message"]
    except (KeyError, IndexError, TypeError) as exc:
        raise ExtractionFailed(
            f"the completion has no choices[0].message: {str(body)[:200]}", retryable=False
        ) from exc
    if not isinstance(message, dict):
        raise ExtractionFailed("choices[0].message is not an object", retryable=False)
    calls = message.get("tool_calls") or []
    if calls:
        out, bad = [], []
        for call in calls:
            function = call.get("function") if isinstance(call, dict) else None
            if not isinstance(function, dict) or function.get("name") != "remember":
                bad.append(f"a call of {function.get('name') if isinstance(function, dict) else call!r}")
                continue
            args = function.get("arguments")
            try:
                parsed = json.loads(args) if isinstance(args, str) else args
            except ValueError:
                bad.append(f"arguments that are not JSON: {str(args)[:120]!r}")
                continue
            if isinstance(parsed, dict):
                out.append(parsed)
            else:
                bad.append(f"arguments that are not an object: {str(parsed)[:120]!r}")
        if not out:
            raise ExtractionFailed("no tool call could be read: " + "; ".join(bad), retryable=False)
        for reason in bad:
            log.warning("extraction tool call skipped: %s", reason)
        return out
    content = message.get("content")
    if isinstance(content, str):
        found = JSON_ARRAY.search(content)
        if found:
            try:
                items = json.loads(found.group(0))
            except ValueError:
                items = None
            if isinstance(items, list) and all(isinstance(i, dict) for i in items):
                return items
    raise ExtractionFailed(
        f"the completion has neither a remember tool call nor a JSON array: {str(content)[:200]!r}",
        retryable=False,
    )
