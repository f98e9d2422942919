"""Calls that arrive in one turn of the event loop, answered by one call over all of them.

A pass of the rules over a scratch store costs about the same for one new memory as for dozens
(``projections.conflicts.keys_of_many``), and under load the requests that need one are ready on
the loop side by side. ``Together`` queues each call and runs the batch function once, as the
next callback of the loop: every request already ready in this turn joins the batch; a lone call
waits for nothing but the callbacks ahead of it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class Together(Generic[T, R]):
    """``await together(item)`` is ``many([item, ...])``'s answer for ``item``; at most ``most``
    items a call, so a crowd (a bulk request's thousand) holds the loop a bounded while at a time."""

    def __init__(self, many: Callable[[Sequence[T]], Sequence[R]], most: int = 64) -> None:
        self.many = many
        self.most = most
        self._waiting: list[tuple[T, asyncio.Future[R]]] = []

    async def __call__(self, item: T) -> R:
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[R] = loop.create_future()
        self._waiting.append((item, answer))
        if len(self._waiting) == 1:
            loop.call_soon(self._answer)
        return await answer

    def _answer(self) -> None:
        batch, self._waiting = self._waiting[: self.most], self._waiting[self.most :]
        if self._waiting:  # the rest after the callbacks that were waiting behind this one
            asyncio.get_running_loop().call_soon(self._answer)
        try:
            answers = self.many([item for item, _ in batch])
        except Exception as exc:  # each caller gets the error its own call would have raised
            for _, answer in batch:
                if not answer.done():
                    answer.set_exception(exc)
            return
        for (_, answer), result in zip(batch, answers, strict=True):
            if not answer.done():
                answer.set_result(result)
