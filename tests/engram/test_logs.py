"""The log filter that summarises repeats (a broker outage's reconnect lines), on a fake clock."""

from __future__ import annotations

import asyncio
import io
import json
import logging

from engram.logs import Cancellations, JsonFormatter, Summarised


def logger_into(out: io.StringIO, interval_s: float, clock: list[float]) -> logging.Logger:
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(Summarised(interval_s, clock=lambda: clock[0]))
    log = logging.getLogger(f"test-logs-{id(out)}")
    log.handlers[:] = [handler]
    log.propagate = False
    log.setLevel(logging.DEBUG)
    return log


def lines(out: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_repeats_within_the_interval_are_counted_and_reported_on_the_next_line() -> None:
    out, clock = io.StringIO(), [100.0]
    log = logger_into(out, 10.0, clock)
    for attempt in range(500):  # 50 s of reconnect attempts, ten a second, to two addresses
        clock[0] = 100.0 + attempt / 10
        log.error("Unable connect to node with id %s: %s", 1, f"refused {attempt % 2}")
        log.error("Unable to update metadata from [1]")
    got = lines(out)
    assert len(got) == 10  # two kinds, one line each per 10 s
    assert [g.get("repeated", 0) for g in got if g["msg"].startswith("Unable connect")] == [0, 99, 99, 99, 99]
    assert got[0]["msg"] == "Unable connect to node with id 1: refused 0"


def test_info_lines_and_a_zero_interval_pass_untouched() -> None:
    out, clock = io.StringIO(), [0.0]
    log = logger_into(out, 10.0, clock)
    for _ in range(5):
        log.info("produced %d/%d events", 1, 2)
    assert len(lines(out)) == 5
    out, clock = io.StringIO(), [0.0]
    log = logger_into(out, 0.0, clock)
    for _ in range(5):
        log.warning("again")
    assert len(lines(out)) == 5 and "repeated" not in lines(out)[-1]


def test_kinds_remembered_are_bounded() -> None:
    summarised = Summarised(10.0, clock=lambda: 0.0)
    for i in range(Summarised.MAX_KINDS + 50):
        record = logging.LogRecord("x", logging.WARNING, __file__, 1, f"unique {i}", None, None)
        assert summarised.filter(record)
    assert len(summarised._kinds) == Summarised.MAX_KINDS


AGENT = "[^---Agent*: engram.project]"


def test_a_cancellation_reported_as_a_crash_is_one_info_line() -> None:
    """What Faust's agents and uvicorn's lifespan log when a process signalled while starting
    cancels them: a crash with a traceback each, though nothing went wrong."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(Cancellations())
    log = logging.getLogger(f"test-cancel-{id(out)}")
    log.handlers[:] = [handler]
    log.propagate = False
    try:
        raise asyncio.CancelledError
    except asyncio.CancelledError:
        log.exception(f"{AGENT}: Crashed reason=%r", asyncio.CancelledError())
    uvicorns = 'Traceback (most recent call last):\n  File "x.py"\nasyncio.exceptions.CancelledError\n'
    log.error(uvicorns)
    try:
        raise ValueError("a real one")
    except ValueError:
        log.exception("Crashed")
    got = lines(out)
    assert [(g["level"], g["msg"], "exc" in g) for g in got] == [
        ("info", f"{AGENT}: Crashed reason=CancelledError(): cancelled (the process is stopping)", False),
        ("info", "startup: cancelled (the process is stopping)", False),
        ("error", "Crashed", True),  # any other exception keeps its traceback
    ]
