"""The sandboxed SPARQL evaluator: a child process (``python -m projections.sparql_evaluator``)
that answers queries over tenants' stores with no network at all.

First thing, before pyoxigraph is imported, it installs the seccomp filter of
``projections.no_network``; if that fails it writes ``N`` + a 4-byte length + the reason and
exits, and the server answers SPARQL 503 (fail closed). Otherwise it writes ``R`` and answers
requests until its stdin closes: a 4-byte big-endian length + JSON ``{path, token, query, accept,
max_rows}`` in; a 4-byte length + JSON ``{status, body, media_type, truncated}`` or ``{status,
reason}`` out. Each query is evaluated, read and dropped on this process's one thread.

A store is opened read-only (RocksDB replays the server's write-ahead log, so it sees every
committed write) and kept while the server's ``token`` for it (the graph's identity and write
generation) is unchanged; a new token reopens it.
"""

from __future__ import annotations

import functools
import json
import os
import struct
import sys
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from engram.projections.no_network import SandboxUnavailable, deny_network

OPEN_STORES = 4  # read-only handles kept, most recently used
# a read-only handle does not hold the writer's table files: a compaction may delete one it has not
# opened yet, even one just opened (the writer compacts in the background). Opened afresh and
# asked again, so many times, this far apart (seconds), before the server answers 503
FRESH_OPENS = (0.0, 0.05, 0.1, 0.2, 0.4)


def read_exactly(fd: int, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = os.read(fd, n - got)
        if not chunk:
            raise EOFError("the other side closed the pipe")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


_T = TypeVar("_T")


def with_fresh_opens(
    ask: Callable[[], _T],
    forget: Callable[[], None],
    pauses: Sequence[float] = FRESH_OPENS,
    sleep: Callable[[float], None] = time.sleep,
) -> _T:
    """``ask()``; when a table file was compacted away (``compacted_away``), ``forget`` the handle
    and ask again after each pause in turn; the last error is raised."""
    failed: Exception | None = None
    for pause in (None, *pauses):
        if pause is not None:
            forget()
            sleep(pause)
        try:
            return ask()
        except Exception as exc:
            if not compacted_away(exc):
                raise
            failed = exc
    assert failed is not None
    raise failed


def compacted_away(exc: Exception) -> bool:
    """An I/O error, or RocksDB's report of a table file gone ("Corruption: IO error: No such file
    or directory: While open a file for random read: …/000018.sst"), whatever type carries it."""
    return isinstance(exc, OSError) or "No such file or directory" in str(exc)


def frame(message: dict[str, Any]) -> bytes:
    data = json.dumps(message).encode()
    return struct.pack(">I", len(data)) + data


def main() -> None:
    stdin, out = sys.stdin.fileno(), os.dup(sys.stdout.fileno())
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # a stray print must not corrupt the replies
    try:
        deny_network()
    except (SandboxUnavailable, OSError, AttributeError) as exc:
        reason = str(exc).encode()
        write_all(out, b"N" + struct.pack(">I", len(reason)) + reason)
        return
    from engram.projections.sparql import QueryRefused, answer
    from pyoxigraph import Store

    stores: OrderedDict[str, tuple[str, Store]] = OrderedDict()

    def store(path: str, token: str) -> Store:
        found = stores.pop(path, None)
        if found is None or found[0] != token:
            found = (token, Store.read_only(path))
        stores[path] = found
        while len(stores) > OPEN_STORES:
            stores.popitem(last=False)
        return found[1]

    def evaluate(request: dict[str, Any]) -> Any:
        store_ = store(request["path"], request["token"])
        return answer(store_, request["query"], request["accept"], max_rows=request["max_rows"])

    write_all(out, b"R")
    while True:
        try:
            (n,) = struct.unpack(">I", read_exactly(stdin, 4))
            request = json.loads(read_exactly(stdin, n))
        except EOFError:
            return  # the server closed our input: it stopped, or died
        try:
            got = with_fresh_opens(
                functools.partial(evaluate, request), functools.partial(stores.pop, request["path"], None)
            )
            reply = {
                "status": 200,
                "body": got.body,
                "media_type": got.media_type,
                "truncated": got.truncated,
            }
        except QueryRefused as exc:
            reply = {"status": exc.status, "reason": str(exc)}
        except Exception as exc:  # the store could not be read: the server answers 503
            reply = {"status": 503, "reason": f"the tenant's store could not be read ({exc}); retry shortly"}
        write_all(out, frame(reply))


if __name__ == "__main__":
    main()
