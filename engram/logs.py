"""Structured logs: one JSON object per line on stderr, repeats summarised.

While the broker is down aiokafka and Faust log a line per reconnect attempt (~125 lines/s
measured): a ``Summarised`` filter lets the first warning of a kind through, counts the same kind
(logger and message template) for ``ENGRAM_LOG_SUMMARY_S``, and prints the next one after that
with ``"repeated": N`` saying how many were held back, so an outage writes a line per kind per
interval whatever its length.

A process signalled while it starts cancels what is starting: Faust's agents and uvicorn's lifespan
then log the cancellation as a crash with its traceback. ``Cancellations`` says each in one line
at INFO instead (the warning that the process stops without having started says why).
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        repeated = getattr(record, "repeated", 0)
        if repeated:
            entry["repeated"] = repeated  # lines like this one held back since the last printed
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


class Summarised(logging.Filter):
    """Lets through one warning (or worse) per logger and message template per ``interval_s``;
    the next one let through carries ``repeated``, the count held back meanwhile. Lines below
    WARNING pass untouched (they are not what floods during an outage). A message template is the
    record's unformatted ``msg``: the same attempt against another address is the same kind."""

    MAX_KINDS = 1024  # kinds remembered; past it the oldest are forgotten (memory bounded)

    def __init__(self, interval_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.interval_s = interval_s
        self.clock = clock
        self._kinds: dict[tuple[str, str], list[float | int]] = {}  # kind -> [printed at, held back]

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING or self.interval_s <= 0:
            return True
        kind = (record.name, str(record.msg))
        now = self.clock()
        seen = self._kinds.get(kind)
        if seen is not None and now - seen[0] < self.interval_s:
            seen[1] += 1
            return False
        record.repeated = int(seen[1]) if seen is not None else 0
        self._kinds.pop(kind, None)
        self._kinds[kind] = [now, 0]
        while len(self._kinds) > self.MAX_KINDS:
            del self._kinds[next(iter(self._kinds))]
        return True


class Cancellations(logging.Filter):
    """A record that only reports a cancellation (its exception, or the traceback text uvicorn
    logs, is a ``CancelledError``) becomes one INFO line: the first line of its message."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        raised = record.exc_info[1] if record.exc_info else None
        cancelled = isinstance(raised, asyncio.CancelledError) or (
            text.startswith("Traceback") and text.rstrip().endswith("CancelledError")
        )
        if cancelled:
            first = text.splitlines()[0] if not text.startswith("Traceback") else "startup"
            record.msg, record.args = f"{first}: cancelled (the process is stopping)", None
            record.exc_info, record.exc_text = None, None
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


def setup_logging(level: str = "INFO", summary_s: float = 10.0) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(Cancellations())
    handler.addFilter(Summarised(summary_s))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)
    for name in ("engram", "bench"):
        logging.getLogger(name).setLevel(level.upper())
