"""The HTTP server's own limits: header read timeout, body backstop, header size, connection cap.

Uvicorn's h11 protocol has a keep-alive timeout but no read timeout: a client that sends half a
request line (or nothing at all) holds its connection forever. ``TimedH11Protocol`` arms one
timer per request: from the connection's start (or the end of the previous request) until its
headers are complete (``header_timeout_s``), then until its body is complete
(``body_timeout_s``, a backstop behind the app's own 408 for bodies nobody reads). A timer is
armed once per phase, so dripping a byte at a time does not extend it.
"""

from __future__ import annotations

import json
import re
from typing import Any

import h11
import uvicorn
from engram.api.errors import body as error_body
from uvicorn.protocols.http.h11_impl import STATUS_PHRASES, H11Protocol

from engram.settings import Settings

HEAD_END = re.compile(rb"\r?\n\r?\n")
BODY_GRACE_S = 1.0  # the app answers 408 at body_timeout_s; the protocol closes a little later


class TimedH11Protocol(H11Protocol):
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0 + BODY_GRACE_S

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._phase: str | None = None
        self._timer: Any = None

    # -- timers ---------------------------------------------------------------------------------
    def _arm(self, phase: str, seconds: float) -> None:
        self._disarm()
        self._phase = phase
        self._timer = self.loop.call_later(seconds, self._expired)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer, self._phase = None, None

    def _track(self) -> None:
        if self.transport is None or self.transport.is_closing():
            self._disarm()
            return
        state = self.conn.their_state
        if state is h11.IDLE:
            if self._phase != "headers":
                self._arm("headers", self.header_timeout_s)
        elif state is h11.SEND_BODY:
            if self._phase != "body":
                self._arm("body", self.body_timeout_s)
        else:
            self._disarm()

    def _expired(self) -> None:
        phase, self._timer, self._phase = self._phase, None, None
        if self.transport.is_closing():
            return
        if phase == "headers" and self.conn.their_state is h11.IDLE:
            if self.conn.our_state is h11.IDLE and self.conn.trailing_data[0]:
                self._write_error(
                    408,
                    "request_timeout",
                    f"request headers not received within {self.header_timeout_s:g}s "
                    "(ENGRAM_HEADER_TIMEOUT_S)",
                    raw=True,
                )
            self.transport.close()
        elif phase == "body" and self.conn.their_state is h11.SEND_BODY:
            self.transport.close()

    # -- uvicorn hooks --------------------------------------------------------------------------
    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        self._track()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        """Refuse a request head over ENGRAM_MAX_HEADER_BYTES (431), whole or in pieces.

        h11's own limit only counts an incomplete head, so a large head that arrives in one piece
        would pass; this counts the head however it arrives.
        """
        limit = self.config.h11_max_incomplete_event_size
        if limit is not None and self.conn.their_state is h11.IDLE and self.conn.our_state is h11.IDLE:
            head = self.conn.trailing_data[0] + data
            end = HEAD_END.search(head)
            if (end is None and len(head) > limit) or (end is not None and end.start() > limit):
                self._unset_keepalive_if_required()
                self._disarm()
                self._write_error(
                    431,
                    "header_too_large",
                    f"request headers over {limit} bytes (ENGRAM_MAX_HEADER_BYTES)",
                    raw=True,
                )
                self.transport.close()
                return
        super().data_received(data)

    def handle_events(self) -> None:
        super().handle_events()
        self._track()

    def send_400_response(self, msg: str) -> None:
        """A malformed request (or headers over ENGRAM_MAX_HEADER_BYTES: 431) in the one error shape."""
        limit = self.config.h11_max_incomplete_event_size
        if limit is not None and len(self.conn.trailing_data[0]) > limit:
            self._write_error(
                431, "header_too_large", f"request headers over {limit} bytes (ENGRAM_MAX_HEADER_BYTES)"
            )
        else:
            self._write_error(400, "bad_request", msg)
        self.transport.close()

    def _write_error(self, status: int, type_: str, msg: str, *, raw: bool = False) -> None:
        payload = json.dumps(error_body([{"loc": ["header"], "msg": msg, "type": type_}], status)).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(payload)).encode()),
            (b"connection", b"close"),
        ]
        if raw:  # h11 may not send a response before a request: write it ourselves
            head = b"HTTP/1.1 %d %s\r\n" % (status, STATUS_PHRASES[status])
            head += b"".join(k + b": " + v + b"\r\n" for k, v in headers)
            self.transport.write(head + b"\r\n" + payload)
            return
        self.transport.write(
            self.conn.send(h11.Response(status_code=status, headers=headers, reason=STATUS_PHRASES[status]))
        )
        self.transport.write(self.conn.send(h11.Data(data=payload)))
        self.transport.write(self.conn.send(h11.EndOfMessage()))


def protocol_class(settings: Settings) -> type[TimedH11Protocol]:
    return type(
        "EngramH11Protocol",
        (TimedH11Protocol,),
        {
            "header_timeout_s": settings.header_timeout_s,
            "body_timeout_s": settings.body_timeout_s + BODY_GRACE_S,
        },
    )


def uvicorn_config(app: Any, settings: Settings) -> uvicorn.Config:
    """The server engram serves with: its own protocol, header size limit and connection cap."""
    return uvicorn.Config(
        app,
        host=settings.api_host,
        port=settings.api_port,
        log_config=None,
        http=protocol_class(settings),
        h11_max_incomplete_event_size=settings.max_header_bytes,
        limit_concurrency=settings.max_connections,
    )
