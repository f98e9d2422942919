"""Request limits as pure ASGI middleware: body size, body read time, allowed Host names, and the
rate limit's charge for what a request cost.

* ``RequestLimits``: a declared ``Content-Length`` over the limit is answered 413 before a byte
  of the body is read; a chunked (or lying) body is counted as it is received and refused with
  413 as soon as it passes the limit. The whole body must arrive within ``body_timeout_s`` of the
  request's start, or the answer is 408 and the connection is closed.
* ``Charges``: after a request, charges its principal's rate-limit bucket for the event-loop time
  the request's own code took (``RateLimits``), so a flood of expensive reads reaches 429 as a
  flood of cheap ones does.
* ``AllowedHosts``: Starlette's ``TrustedHostMiddleware`` matching (``*``, ``*.example.com``),
  answered in the API's one error shape.

Both errors raised while the app reads the body are ``HTTPException`` subclasses, so FastAPI lets
them through to the API's error handler; if they escape anyway, the middleware answers itself.
"""

from __future__ import annotations

import asyncio
import gc
import json
import threading
import time
from collections import OrderedDict
from collections.abc import Coroutine, Generator
from typing import Any

from engram.api.errors import body as error_body
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class BodyTooLarge(HTTPException):
    def __init__(self, limit: int) -> None:
        super().__init__(
            413,
            [
                {
                    "loc": ["body"],
                    "msg": f"request body over the limit of {limit} bytes (ENGRAM_MAX_BODY_BYTES)",
                    "type": "payload_too_large",
                }
            ],
        )


class BodyTimeout(HTTPException):
    def __init__(self, timeout: float) -> None:
        super().__init__(
            408,
            [
                {
                    "loc": ["body"],
                    "msg": f"request body not received within {timeout:g}s (ENGRAM_BODY_TIMEOUT_S)",
                    "type": "request_timeout",
                }
            ],
            headers={"Connection": "close"},
        )


async def send_error(send: Send, exc: HTTPException) -> None:
    payload = json.dumps(error_body(exc.detail, exc.status_code), ensure_ascii=True).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    headers += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in (exc.headers or {}).items()]
    await send({"type": "http.response.start", "status": exc.status_code, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


class RequestLimits:
    def __init__(self, app: ASGIApp, *, max_body_bytes: int, body_timeout_s: float) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.body_timeout_s = body_timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = Headers(scope=scope).get("content-length")
        if declared is not None and declared.strip().isdigit() and int(declared) > self.max_body_bytes:
            await send_error(send, BodyTooLarge(self.max_body_bytes))
            return

        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.body_timeout_s
        received = 0
        body_done = False
        started = False

        async def limited_receive() -> Message:
            nonlocal received, body_done
            if body_done:  # later receives wait for a disconnect: no deadline on those
                return await receive()
            try:
                async with asyncio.timeout(max(deadline - loop.time(), 0)):
                    message = await receive()
            except TimeoutError:
                raise BodyTimeout(self.body_timeout_s) from None
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_body_bytes:
                    raise BodyTooLarge(self.max_body_bytes)
                body_done = not message.get("more_body", False)
            else:
                body_done = True
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except (BodyTooLarge, BodyTimeout) as exc:
            if started:
                raise
            await send_error(send, exc)


class AllowedHosts(TrustedHostMiddleware):
    """The Host allow-list; a request for another host is a 400 in the one error shape."""

    def __init__(self, app: ASGIApp, allowed_hosts: list[str]) -> None:
        super().__init__(app, allowed_hosts=allowed_hosts, www_redirect=False)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.allow_any or scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        host = Headers(scope=scope).get("host", "")
        host = host[: host.index("]") + 1] if host.startswith("[") and "]" in host else host.split(":")[0]
        if any(
            host == pattern or (pattern.startswith("*") and host.endswith(pattern[1:]))
            for pattern in self.allowed_hosts
        ):
            await self.app(scope, receive, send)
            return
        shown: Any = host[:100]
        await send_error(
            send,
            HTTPException(
                400,
                [
                    {
                        "loc": ["header", "host"],
                        "msg": f"host {shown!r} is not served here (ENGRAM_ALLOWED_HOSTS)",
                        "type": "invalid_host",
                    }
                ],
            ),
        )


CHARGED = "engram.charged"  # the scope key of the (tenant, subject) a request is charged to


class RateLimits:
    """A token bucket per principal (tenant and subject): ``per_s`` tokens a second, ``burst`` at
    once. Buckets of principals not seen for a while are dropped (at most ``keep`` are held).

    A request takes one token to be admitted; once it has run, it is charged one more token per
    ``cost_s`` of event-loop CPU time beyond the first (``charge``), so its total cost is
    max(1, time / cost_s). The bucket may go below zero: the principal then waits until the rate
    has paid the debt back. Time is what every read and write shares (one event loop per process),
    so it prices a 261 ms list of a large tenant as 52 cheap reads at 5 ms, whatever made it slow.
    A principal's bucket is charged for its own requests' time only (``Busy``): one tenant's flood
    costs another tenant nothing.
    """

    def __init__(self, per_s: float, burst: int, keep: int = 100_000, cost_s: float = 0.005) -> None:
        self.per_s, self.burst, self.keep, self.cost_s = per_s, burst, keep, cost_s
        self._buckets: OrderedDict[tuple[str, str], tuple[float, float]] = OrderedDict()

    def _tokens(self, key: tuple[str, str], now: float) -> float:
        tokens, at = self._buckets.pop(key, (float(self.burst), now))
        return min(float(self.burst), tokens + (now - at) * self.per_s)

    def _keep(self, key: tuple[str, str], tokens: float, now: float) -> None:
        self._buckets[key] = (tokens, now)
        while len(self._buckets) > self.keep:
            self._buckets.popitem(last=False)

    def take(self, key: tuple[str, str], now: float | None = None) -> float:
        """0 if the request may go; else the seconds until it may."""
        now = time.monotonic() if now is None else now
        tokens = self._tokens(key, now)
        wait = 0.0 if tokens >= 1 else (1 - tokens) / self.per_s
        self._keep(key, tokens - 1 if wait == 0 else tokens, now)
        return wait

    def charge(self, key: tuple[str, str], busy_s: float, now: float | None = None) -> float:
        """Charge an admitted request for ``busy_s`` of event-loop time; the tokens charged."""
        extra = busy_s / self.cost_s - 1
        if extra <= 0:
            return 0.0
        now = time.monotonic() if now is None else now
        self._keep(key, self._tokens(key, now) - extra, now)
        return extra


class Collections:
    """The CPU time the garbage collector takes on each thread, added up (``seconds()``).

    A collection runs inside whichever request's allocation crosses the collector's threshold and
    walks everyone's objects: a full one took 60-130 ms in a server flooded by one tenant's large
    pages, charged to a cheap read of another tenant (25-65 tokens at a 2 ms cost: its whole burst,
    a 429 for a principal that had done nothing). It is the process's cost, not the request's, so
    ``Busy`` leaves it out."""

    _local = threading.local()

    @classmethod
    def install(cls) -> None:
        """Start counting (idempotent: one callback per process)."""
        if cls._on_collect not in gc.callbacks:
            gc.callbacks.append(cls._on_collect)

    @classmethod
    def _on_collect(cls, phase: str, info: dict[str, int]) -> None:
        here = cls._local
        if phase == "start":
            here.started = time.thread_time()
        elif getattr(here, "started", None) is not None:
            here.seconds = getattr(here, "seconds", 0.0) + time.thread_time() - here.started
            here.started = None

    @classmethod
    def seconds(cls) -> float:
        """This thread's collections so far, in CPU seconds."""
        return getattr(cls._local, "seconds", 0.0)  # type: ignore[no-any-return]


class Busy:
    """Awaits a coroutine as ``await`` would, adding up the CPU time its own steps take on the
    event loop's thread (``seconds``): the time it waits (for the client, the log, a thread) is not
    counted, nor the time other requests run while it waits, nor the time the operating system
    gives the core to other processes (a loaded machine must not make a cheap read look dear), nor
    the garbage collector's time (``Collections``: everyone's garbage, whoever's step it ran in)."""

    def __init__(self, coro: Coroutine[Any, Any, Any]) -> None:
        self.coro, self.seconds = coro, 0.0

    def __await__(self) -> Generator[Any, Any, Any]:
        value: Any = None
        thrown: BaseException | None = None
        while True:
            start, collected = time.thread_time(), Collections.seconds()
            try:
                step = self.coro.send(value) if thrown is None else self.coro.throw(thrown)
            except StopIteration as done:
                return done.value
            finally:
                self.seconds += time.thread_time() - start - (Collections.seconds() - collected)
            try:
                value, thrown = (yield step), None
            except GeneratorExit:
                self.coro.close()
                raise
            except BaseException as exc:  # a cancellation, passed on to the request's code
                value, thrown = None, exc


class Charges:
    """After each request, charge the principal ``api.deps.get_principal`` named (``CHARGED`` in
    the scope) for the event-loop time it took."""

    def __init__(self, app: ASGIApp, *, limits: RateLimits) -> None:
        self.app, self.limits = app, limits
        Collections.install()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        busy = Busy(self.app(scope, receive, send))
        try:
            await busy
        finally:
            key = scope.get(CHARGED)
            if key is not None:
                self.limits.charge(key, busy.seconds)
