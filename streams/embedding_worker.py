"""A query embedder in a child process, so a request's query is embedded while its graph is read.

In one process the two do not overlap: the forward pass is ~150 numpy calls, and each needs the
GIL back from a thread that is busy in Python (measured: a worker thread saved nothing). A child
process on the other core does overlap. The protocol, over the child's stdin and stdout: the child
writes ``R`` once its model is loaded; then, per request, a 4-byte big-endian length and the UTF-8
text in, and ``V`` + a float32 of the milliseconds spent + the float32 vector out (or ``E`` + a
4-byte length + a message). The child exits when its stdin closes, so it never outlives its parent.

Whatever goes wrong with the child (not loaded yet, dead, too slow, a text it cannot take), the
caller embeds in its own process instead: a query is never refused for the helper's sake.
"""

from __future__ import annotations

import logging
import os
import select
import struct
import subprocess
import sys
import time
from collections.abc import Callable

import numpy as np
from engram.streams.embedder import Embedder, load_embedder

log = logging.getLogger(__name__)

REPLY_TIMEOUT_S = 5.0  # a query takes ~15 ms; a child this late is stuck, and is replaced
RESTART_AFTER_S = 30.0  # a child that died is started again at most this often


class EmbeddingWorker:
    """One child process embedding one query at a time with ``embedder``'s model."""

    def __init__(self, embedder: Embedder, configured: str) -> None:
        self.embedder = embedder
        self.configured = configured  # the name the child loads the same model by
        self._child: subprocess.Popen[bytes] | None = None
        self._ready = False
        self._pending: Callable[[], tuple[np.ndarray, float]] | None = None
        self._started_at = 0.0
        self._start()

    def _start(self) -> None:
        self._started_at = time.monotonic()
        self._ready = False
        try:
            self._child = subprocess.Popen(
                [sys.executable, "-m", "engram.streams.embedding_worker", self.configured],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                bufsize=0,
                env=child_environment(),
            )
        except OSError as exc:
            log.warning("query embedding worker not started (%s); embedding in process", exc)
            self._child = None

    def _usable(self) -> bool:
        child = self._child
        if child is None or child.poll() is not None:
            if child is not None:
                log.warning("query embedding worker exited (%s); embedding in process", child.returncode)
                self._child = None
            if time.monotonic() - self._started_at >= RESTART_AFTER_S:
                self._start()
            return False
        if not self._ready:
            assert child.stdout is not None
            readable, _, _ = select.select([child.stdout], [], [], 0)
            if readable:
                self._ready = os.read(child.stdout.fileno(), 1) == b"R"
                if not self._ready:
                    self._stop("sent no ready mark")
        return self._ready

    def begin(self, text: str) -> Callable[[], tuple[np.ndarray, float]] | None:
        """Send ``text`` to the child now; the function returned waits for (vector, ms). None when
        the child cannot take it: the caller embeds it itself."""
        if self._pending is not None:  # a caller that never collected its reply: drain it first
            self._pending()
        if not self._usable():
            return None
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError:
            return None  # a lone surrogate: the in-process path gives the error it always gave
        child = self._child
        assert child is not None and child.stdin is not None
        try:
            _write_all(child.stdin.fileno(), struct.pack(">I", len(data)) + data)
        except OSError:
            self._stop("closed its input")
            return None
        got: list[tuple[np.ndarray, float]] = []

        def wait() -> tuple[np.ndarray, float]:
            if not got:
                self._pending = None
                got.append(self._reply(child, text))
            return got[0]

        self._pending = wait
        return wait

    def _reply(self, child: subprocess.Popen[bytes], text: str) -> tuple[np.ndarray, float]:
        assert child.stdout is not None
        out = child.stdout.fileno()
        try:
            kind = _read(out, 1, REPLY_TIMEOUT_S)
            if kind == b"V":
                reply = _read(out, 4 + 4 * self.embedder.dim, REPLY_TIMEOUT_S)
                (ms,) = struct.unpack("<f", reply[:4])
                return np.frombuffer(reply[4:], dtype="<f4").copy(), float(ms)
            if kind == b"E":
                (n,) = struct.unpack(">I", _read(out, 4, REPLY_TIMEOUT_S))
                reason = _read(out, n, REPLY_TIMEOUT_S).decode("utf-8", "replace")
                log.warning("query embedding worker: %s", reason)
            else:
                self._stop(f"replied {kind!r}")
        except (OSError, EOFError, TimeoutError) as exc:
            self._stop(str(exc))
        return self._here(text)

    def _here(self, text: str) -> tuple[np.ndarray, float]:
        started = time.perf_counter()
        vector = self.embedder.embed([text])[0]
        return vector, (time.perf_counter() - started) * 1e3

    def _stop(self, why: str) -> None:
        log.warning("query embedding worker %s; replacing it, embedding in process meanwhile", why)
        self.close()

    def close(self) -> None:
        child, self._child = self._child, None
        self._ready = False
        if child is None:
            return
        if child.stdin is not None:
            child.stdin.close()
        try:
            child.wait(timeout=2)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        if child.stdout is not None:
            child.stdout.close()


def child_environment() -> dict[str, str]:
    """The child's OpenBLAS pool is one thread from the start: it embeds one query at a time on
    one thread anyway (``MiniLM.blas_threads``), and shrinking a bigger pool to one and growing it
    back around every query cost ~1.4 ms of its ~13 (child, 300 queries, medians of 5 runs each)."""
    return {**os.environ, "OPENBLAS_NUM_THREADS": "1"}


def _read(fd: int, n: int, timeout: float | None) -> bytes:
    """Exactly ``n`` bytes (EOFError when the other side closes first)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    chunks, got = [], 0
    while got < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError(f"no reply within {timeout}s")
        chunk = os.read(fd, n - got)
        if not chunk:
            raise EOFError("the other side closed the pipe")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def serve(name: str) -> None:
    """The child: load the model, say so, then answer texts until stdin closes."""
    stdin, stdout = sys.stdin.fileno(), os.dup(sys.stdout.fileno())
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # a stray print must not corrupt the replies
    embedder = load_embedder(name)
    embedder.embed(["warm up"])
    _write_all(stdout, b"R")
    while True:
        try:
            (n,) = struct.unpack(">I", _read(stdin, 4, timeout=None))
            text = _read(stdin, n, timeout=None).decode("utf-8")
        except EOFError:
            return  # the parent closed our input: it stopped, or died
        started = time.perf_counter()
        try:
            vector = np.ascontiguousarray(embedder.embed([text])[0], dtype="<f4")
        except Exception as exc:  # the reason goes back to the parent, which carries on
            message = f"{type(exc).__name__}: {exc}".encode()[:1000]
            _write_all(stdout, b"E" + struct.pack(">I", len(message)) + message)
            continue
        ms = (time.perf_counter() - started) * 1e3
        _write_all(stdout, b"V" + struct.pack("<f", ms) + vector.tobytes())


if __name__ == "__main__":
    serve(sys.argv[1])
