"""Errors are a stream of their own: a refused record goes to the dead-letter topic with its bytes,
its reason and where it came from, durably, before the projector's position moves past it."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from aiokafka.errors import MessageSizeTooLargeError
from engram.schemas.events import Position
from engram.streams import codec

log = logging.getLogger(__name__)

Headers = Sequence[tuple[str, bytes]]
DROPPED_HEADER = "dead-letter-dropped"


def too_large(exc: BaseException | None) -> bool:
    """Whether the broker or the client refused a record for its size, anywhere in the chain."""
    while exc is not None:
        if isinstance(exc, MessageSizeTooLargeError):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


async def send_dead_letter(
    dead_letters: Any,
    events_topic: str,
    key: bytes | None,
    value: bytes | None,
    headers: Headers,
    reason: str,
    *,
    origin: Position,
) -> None:
    """Send to ``dead_letters`` (a Faust topic) and wait until the log holds it. A record too large
    for the topic with the reason added is sent without its value: the reason is kept and the
    headers say where the bytes still are."""
    extra = [
        (codec.HEADER_REASON, reason[:2000].encode("utf-8", "backslashreplace")),
        ("original-topic", events_topic.encode()),
        ("original-partition", str(origin.partition).encode()),
        ("original-offset", str(origin.offset).encode()),
    ]
    kept = [(k, val) for k, val in headers if isinstance(k, str) and isinstance(val, bytes)]
    try:
        fut = await dead_letters.send(key=key, value=value, headers=[*kept, *extra])
        await fut  # durable before the position moves past the record
    except Exception as exc:
        if not too_large(exc):
            raise
        # a record at the broker's size limit plus our headers can exceed it (older topics
        # lack the larger dead-letter limit): keep the reason and where the bytes still are
        size = len(value or b"") + sum(len(val) for _, val in kept)
        dropped = (DROPPED_HEADER, f"{size} bytes of value and headers; read them at the origin".encode())
        fut = await dead_letters.send(key=key[:1024] if key else key, value=None, headers=[*extra, dropped])
        await fut
    log.warning("dead-lettered %r@%d:%d: %s", key, origin.partition, origin.offset, reason[:500])
