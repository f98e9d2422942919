"""SPARQL queries evaluated in a small pool of long-lived sandboxed child processes
(``projections.sparql_evaluator``): no query reaches the network, and one past its time limit is
really stopped.

oxigraph evaluates ``SERVICE`` with its own HTTP client and offers no switch to turn it off, and a
query it is evaluating cannot be interrupted. So the evaluators have no network (seccomp), and a
query over its limit is stopped by killing its evaluator (SIGKILL): its place is free at once, and
a replacement starts so the next query does not wait for a cold start. If the sandbox cannot be
set up here, every query is refused (503) rather than evaluated without it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import struct
import sys
from contextlib import suppress
from dataclasses import dataclass, field

from engram.projections.sparql import Answer, QueryRefused

log = logging.getLogger(__name__)

COMMAND = (sys.executable, "-m", "engram.projections.sparql_evaluator")
START_TIMEOUT_S = 30.0  # an evaluator not ready by then is given up on (and the pool says why)


class Unavailable(RuntimeError):
    """The sandbox is not set up (or not yet): queries are refused, never evaluated without it."""


@dataclass(eq=False)  # kept in a set, by identity
class Evaluator:
    proc: asyncio.subprocess.Process

    async def ask(self, request: dict[str, object]) -> dict[str, object]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        data = json.dumps(request).encode()
        self.proc.stdin.write(struct.pack(">I", len(data)) + data)
        await self.proc.stdin.drain()
        (n,) = struct.unpack(">I", await self.proc.stdout.readexactly(4))
        return json.loads(await self.proc.stdout.readexactly(n))  # type: ignore[no-any-return]

    async def stop(self, kill: bool) -> None:
        if self.proc.returncode is None:
            if kill:
                self.proc.kill()
            elif self.proc.stdin is not None:
                self.proc.stdin.close()  # it exits when its input closes
        with suppress(ProcessLookupError):
            await self.proc.wait()


@dataclass
class Sandbox:
    """At most ``size`` queries evaluate at once, each in an evaluator of its own; another is
    refused (``Busy``) rather than queued."""

    timeout_s: float
    size: int = 2
    command: tuple[str, ...] = COMMAND
    unavailable: str | None = None  # why queries are refused, once known
    _idle: asyncio.Queue[Evaluator] = field(default_factory=asyncio.Queue)
    _running: int = 0
    _all: set[Evaluator] = field(default_factory=set)
    _starting: set[asyncio.Task[None]] = field(default_factory=set)

    async def start(self) -> Sandbox:
        """Start the evaluators and wait until they are ready (or the sandbox is known not to be)."""
        await asyncio.gather(*(self._spawn() for _ in range(self.size)))
        return self

    async def _spawn(self) -> None:
        try:
            proc = await asyncio.create_subprocess_exec(
                *self.command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
            )
        except OSError as exc:
            self._refuse(f"the query sandbox could not be started ({exc})")
            return
        evaluator = Evaluator(proc)
        assert proc.stdout is not None
        try:
            mark = await asyncio.wait_for(proc.stdout.readexactly(1), START_TIMEOUT_S)
            if mark == b"R":
                self._all.add(evaluator)
                self._idle.put_nowait(evaluator)
                return
            if mark == b"N":
                (n,) = struct.unpack(">I", await proc.stdout.readexactly(4))
                reason = (await proc.stdout.readexactly(n)).decode("utf-8", "replace")
                self._refuse(f"the query sandbox cannot be set up here: {reason}")
            else:
                self._refuse(f"the query sandbox sent {mark!r} instead of its ready mark")
        except (TimeoutError, asyncio.IncompleteReadError) as exc:
            self._refuse(f"the query sandbox did not start ({type(exc).__name__})")
        await evaluator.stop(kill=True)

    def _refuse(self, reason: str) -> None:
        if self.unavailable is None:  # said once, at the first failure
            self.unavailable = reason
            log.error("SPARQL queries are refused (503): %s", reason)

    def _replace(self) -> None:
        task = asyncio.create_task(self._spawn())
        self._starting.add(task)
        task.add_done_callback(self._starting.discard)

    @property
    def busy(self) -> bool:
        return self._running >= self.size

    async def query(self, path: str, token: str, query: str, accept: str, *, max_rows: int) -> Answer:
        """The answer, or ``QueryRefused`` (its status: 406, 422 or 503); ``Unavailable`` when the
        sandbox is not set up. The caller checks ``busy`` first."""
        if self.unavailable:
            raise Unavailable(self.unavailable)
        self._running += 1
        evaluator: Evaluator | None = None
        done = False
        try:
            evaluator = await asyncio.wait_for(self._idle.get(), START_TIMEOUT_S)
            request = {"path": path, "token": token, "query": query, "accept": accept, "max_rows": max_rows}
            try:
                reply = await asyncio.wait_for(evaluator.ask(request), self.timeout_s)
            except TimeoutError:
                raise QueryRefused("the query took longer than its time limit; narrow it") from None
            except (asyncio.IncompleteReadError, ConnectionError) as exc:
                raise QueryRefused(f"the query's evaluator stopped ({exc}); retry shortly", 503) from None
            done = True
        except TimeoutError:  # no evaluator became ready
            raise Unavailable(self.unavailable or "the query sandbox is not ready") from None
        finally:
            self._running -= 1
            if evaluator is not None:
                if done:
                    self._idle.put_nowait(evaluator)
                else:  # past its limit, broken, or the request went away: stopped, and replaced
                    self._all.discard(evaluator)
                    await asyncio.shield(evaluator.stop(kill=True))
                    self._replace()
        status = int(reply["status"])  # type: ignore[call-overload]
        if status != 200:
            raise QueryRefused(str(reply["reason"]), status)
        return Answer(str(reply["body"]), str(reply["media_type"]), bool(reply["truncated"]))

    async def close(self) -> None:
        for task in list(self._starting):
            task.cancel()
        await asyncio.gather(*self._starting, return_exceptions=True)
        for evaluator in list(self._all):
            await evaluator.stop(kill=False)
        self._all.clear()
