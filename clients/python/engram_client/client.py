"""The sync and async clients: each verb of :class:`~engram_client.calls.Calls`, sent with retries.

Both clients carry the read-your-writes position: every accepted write's ``partition:offset`` is
kept, and the next :meth:`context` read sends it as ``after=``, so the server answers once that
write is applied and searchable; an agent's next turn sees what it just wrote without waiting or
polling itself. A write that gets no answer, a 503 or a 429 is sent again with the same
idempotency key (waiting ``Retry-After`` when the server says), so it is applied once.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import os
import re
import time
from collections.abc import Callable, Coroutine, Iterable
from typing import Any, Concatenate, ParamSpec, TypeVar

import httpx

from engram_client.calls import (
    RETRY_ERRORS,
    RETRY_STATUSES,
    Call,
    Calls,
    Retry,
    Source,
    retry_after,
    tenant_of,
)
from engram_client.errors import ConnectionFailed, error_from

P = ParamSpec("P")
T = TypeVar("T")

__all__ = ["AsyncEngram", "Engram"]


class _Base:
    """What both clients share: the tenant, the calls, the retry policy and the position."""

    def __init__(self, base_url: str, token: str, tenant: str | None, source: Source, retry: Retry) -> None:
        self.base_url = base_url.rstrip("/")
        self.tenant = tenant or tenant_of(token)
        self.calls = Calls(self.tenant, source)
        self.retry = retry
        self.position: str | None = None
        self._headers = {"Authorization": f"Bearer {token}", "User-Agent": "engram-client/0.1"}

    def _note(self, answer: Any) -> None:
        """Keep the furthest position a write was accepted at (a retry answered with an older or
        no position does not move it back)."""
        if not isinstance(answer, dict):
            return
        partition, offset = answer.get("partition"), answer.get("offset")
        if not (isinstance(partition, int) and isinstance(offset, int)) or partition < 0 or offset < 0:
            return
        if self.position is not None:
            was_partition, was_offset = (int(x) for x in self.position.split(":"))
            if was_partition == partition and was_offset >= offset:
                return
        self.position = f"{partition}:{offset}"

    def _params(self, call: Call[Any]) -> list[tuple[str, str]]:
        if call.carries_position and self.position is not None:
            return [*call.params, ("after", self.position)]
        return list(call.params)

    def _answer(self, call: Call[T], response: httpx.Response) -> T:
        if response.status_code >= 400:
            raise error_from(response, retry_after(response))
        data = response.json() if response.content else None
        if call.is_write:
            for accepted in call.positions(data) if call.positions else [data]:
                self._note(accepted)
        return call.read(data)

    def _retryable(self, attempt: int, response: httpx.Response) -> bool:
        return response.status_code in RETRY_STATUSES and attempt + 1 < self.retry.attempts

    def _no_answer(self, attempt: int, call: Call[Any], exc: Exception) -> None:
        if attempt + 1 >= self.retry.attempts:
            raise ConnectionFailed(
                f"no answer from {self.base_url} for {call.method} {call.path} after {attempt + 1} "
                f"attempts: {type(exc).__name__}: {exc}"
            ) from exc


def _answers(verb: Callable[..., Any], build: Callable[..., Any]) -> None:
    """Show the verb's own signature with what it answers (``Recall``), not the ``Call[Recall]``
    its builder returns, nor the ``Iterator[Call[list[ItemAnswer]]]`` of a verb of several calls
    (``help()``, IDEs that read ``__signature__``)."""
    sig = inspect.signature(build)
    answer = re.sub(r"^Iterator\[(Call\[.*\])\]$", r"\1", str(sig.return_annotation))
    answer = re.sub(r"^Call\[(.*)\]$", r"\1", answer)
    verb.__signature__ = sig.replace(return_annotation=answer)  # type: ignore[attr-defined]


def _sync(build: Callable[Concatenate[Calls, P], Call[T]]) -> Callable[Concatenate[Engram, P], T]:
    @functools.wraps(build)
    def verb(self: Engram, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self.send(build(self.calls, *args, **kwargs))

    _answers(verb, build)
    return verb


def _sync_each(
    build: Callable[Concatenate[Calls, P], Iterable[Call[list[T]]]],
) -> Callable[Concatenate[Engram, P], list[T]]:
    """A verb of several calls (``remember_many``'s chunks): each sent in turn, as it is built, and
    their answers' lists joined in order."""

    @functools.wraps(build)
    def verb(self: Engram, /, *args: P.args, **kwargs: P.kwargs) -> list[T]:
        return [answer for call in build(self.calls, *args, **kwargs) for answer in self.send(call)]

    _answers(verb, build)
    return verb


def _async(
    build: Callable[Concatenate[Calls, P], Call[T]],
) -> Callable[Concatenate[AsyncEngram, P], Coroutine[Any, Any, T]]:
    @functools.wraps(build)
    async def verb(self: AsyncEngram, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await self.send(build(self.calls, *args, **kwargs))

    _answers(verb, build)
    return verb


def _async_each(
    build: Callable[Concatenate[Calls, P], Iterable[Call[list[T]]]],
) -> Callable[Concatenate[AsyncEngram, P], Coroutine[Any, Any, list[T]]]:
    @functools.wraps(build)
    async def verb(self: AsyncEngram, /, *args: P.args, **kwargs: P.kwargs) -> list[T]:
        return [answer for call in build(self.calls, *args, **kwargs) for answer in await self.send(call)]

    _answers(verb, build)
    return verb


class Engram(_Base):
    """A tenant's memory over HTTP (blocking). The tenant is the token's unless given.

    >>> mem = Engram("http://127.0.0.1:8000", token)          # doctest: +SKIP
    >>> mem.remember("Meta cap", "Meta spend stays under 40k a month", kind="fact")  # doctest: +SKIP
    >>> mem.context("budget").text                              # doctest: +SKIP
    """

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        tenant: str | None = None,
        source: Source = "agent",
        timeout: float = 30.0,
        retry: Retry | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        super().__init__(base_url, token, tenant, source, retry or Retry())
        self.http = httpx.Client(
            base_url=self.base_url, headers=self._headers, timeout=timeout, transport=transport
        )

    @classmethod
    def from_env(cls, **kw: Any) -> Engram:
        """``ENGRAM_URL`` and ``ENGRAM_TOKEN`` (and ``ENGRAM_TENANT`` if set) from the environment."""
        return cls(
            os.environ["ENGRAM_URL"], os.environ["ENGRAM_TOKEN"], tenant=os.environ.get("ENGRAM_TENANT"), **kw
        )

    def send(self, call: Call[T]) -> T:
        """Send one call, retrying what may be retried, and read its answer."""
        attempt = 0
        while True:
            try:
                response = self.http.request(
                    call.method, call.path, params=self._params(call), json=call.body, headers=call.headers()
                )
            except RETRY_ERRORS as exc:
                self._no_answer(attempt, call, exc)
                time.sleep(self.retry.wait(attempt, None))
                attempt += 1
                continue
            if self._retryable(attempt, response):
                time.sleep(self.retry.wait(attempt, response))
                attempt += 1
                continue
            return self._answer(call, response)

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Engram:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    remember = _sync(Calls.remember)
    remember_many = _sync_each(Calls.remember_many)
    revise = _sync(Calls.revise)
    supersede = _sync(Calls.supersede)
    restore = _sync(Calls.restore)
    forget = _sync(Calls.forget)
    proposals = _sync(Calls.proposals)
    accept_proposal = _sync(Calls.accept_proposal)
    reject_proposal = _sync(Calls.reject_proposal)
    get_memory = _sync(Calls.get_memory)
    list_memories = _sync(Calls.list_memories)
    lineage = _sync(Calls.lineage)
    recall = _sync(Calls.recall)
    context = _sync(Calls.context)
    memory_tool = _sync(Calls.memory_tool)
    onboard = _sync(Calls.onboard)
    onboarding = _sync(Calls.onboarding)
    observe_kpi = _sync(Calls.observe_kpi)
    observe_spend = _sync(Calls.observe_spend)
    recognize = _sync(Calls.recognize)
    justify = _sync(Calls.justify)
    resolve = _sync(Calls.resolve)
    summarise = _sync(Calls.summarise)
    check_plan = _sync(Calls.check_plan)
    record_decision = _sync(Calls.record_decision)
    get_decision = _sync(Calls.get_decision)
    justify_decision = _sync(Calls.justify_decision)
    decisions = _sync(Calls.decisions)
    associate = _sync(Calls.associate)
    remove_association = _sync(Calls.remove_association)
    start_session = _sync(Calls.start_session)
    end_session = _sync(Calls.end_session)
    record_episode = _sync(Calls.record_episode)
    record_tool_call = _sync(Calls.record_tool_call)
    episodes_in = _sync(Calls.episodes_in)


class AsyncEngram(_Base):
    """The same verbs as :class:`Engram`, as coroutines (one ``httpx.AsyncClient``)."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        tenant: str | None = None,
        source: Source = "agent",
        timeout: float = 30.0,
        retry: Retry | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        super().__init__(base_url, token, tenant, source, retry or Retry())
        self.http = httpx.AsyncClient(
            base_url=self.base_url, headers=self._headers, timeout=timeout, transport=transport
        )

    @classmethod
    def from_env(cls, **kw: Any) -> AsyncEngram:
        """``ENGRAM_URL`` and ``ENGRAM_TOKEN`` (and ``ENGRAM_TENANT`` if set) from the environment."""
        return cls(
            os.environ["ENGRAM_URL"], os.environ["ENGRAM_TOKEN"], tenant=os.environ.get("ENGRAM_TENANT"), **kw
        )

    async def send(self, call: Call[T]) -> T:
        """Send one call, retrying what may be retried, and read its answer."""
        attempt = 0
        while True:
            try:
                response = await self.http.request(
                    call.method, call.path, params=self._params(call), json=call.body, headers=call.headers()
                )
            except RETRY_ERRORS as exc:
                self._no_answer(attempt, call, exc)
                await asyncio.sleep(self.retry.wait(attempt, None))
                attempt += 1
                continue
            if self._retryable(attempt, response):
                await asyncio.sleep(self.retry.wait(attempt, response))
                attempt += 1
                continue
            return self._answer(call, response)

    async def aclose(self) -> None:
        await self.http.aclose()

    async def __aenter__(self) -> AsyncEngram:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    remember = _async(Calls.remember)
    remember_many = _async_each(Calls.remember_many)
    revise = _async(Calls.revise)
    supersede = _async(Calls.supersede)
    restore = _async(Calls.restore)
    forget = _async(Calls.forget)
    proposals = _async(Calls.proposals)
    accept_proposal = _async(Calls.accept_proposal)
    reject_proposal = _async(Calls.reject_proposal)
    get_memory = _async(Calls.get_memory)
    list_memories = _async(Calls.list_memories)
    lineage = _async(Calls.lineage)
    recall = _async(Calls.recall)
    context = _async(Calls.context)
    memory_tool = _async(Calls.memory_tool)
    onboard = _async(Calls.onboard)
    onboarding = _async(Calls.onboarding)
    observe_kpi = _async(Calls.observe_kpi)
    observe_spend = _async(Calls.observe_spend)
    recognize = _async(Calls.recognize)
    justify = _async(Calls.justify)
    resolve = _async(Calls.resolve)
    summarise = _async(Calls.summarise)
    check_plan = _async(Calls.check_plan)
    record_decision = _async(Calls.record_decision)
    get_decision = _async(Calls.get_decision)
    justify_decision = _async(Calls.justify_decision)
    decisions = _async(Calls.decisions)
    associate = _async(Calls.associate)
    remove_association = _async(Calls.remove_association)
    start_session = _async(Calls.start_session)
    end_session = _async(Calls.end_session)
    record_episode = _async(Calls.record_episode)
    record_tool_call = _async(Calls.record_tool_call)
    episodes_in = _async(Calls.episodes_in)
