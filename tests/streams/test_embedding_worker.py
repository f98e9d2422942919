"""The query embedding worker: a real child process with the real MiniLM model.

Whatever happens to the child, a query gets the vector the server's own process would compute.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator

import numpy as np
import pytest
from engram.streams import embedding_worker
from engram.streams.embedder import MiniLM
from engram.streams.embedding_worker import EmbeddingWorker

Q = "What did Caroline say about the adoption agency?"


@pytest.fixture(scope="module")
def minilm() -> MiniLM:
    return MiniLM()


@pytest.fixture
def worker(minilm: MiniLM) -> Iterator[EmbeddingWorker]:
    w = EmbeddingWorker(minilm, "minilm")
    ready(w)
    yield w
    w.close()


def ready(w: EmbeddingWorker, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not w._usable():
        assert time.monotonic() < deadline, "the worker never became ready"
        time.sleep(0.05)


def test_the_workers_vector_is_the_in_process_one(worker: EmbeddingWorker, minilm: MiniLM) -> None:
    wait = worker.begin(Q)
    assert wait is not None
    vector, ms = wait()
    assert np.array_equal(vector, minilm.embed([Q])[0])  # bit for bit: same model, same code
    assert vector.dtype == np.float32 and ms > 0
    assert wait() is wait()  # collected once


def test_an_uncollected_reply_never_answers_the_next_query(worker: EmbeddingWorker, minilm: MiniLM) -> None:
    assert worker.begin("the first query, whose caller went away") is not None
    wait = worker.begin(Q)
    assert wait is not None
    assert np.array_equal(wait()[0], minilm.embed([Q])[0])


def test_a_text_the_pipe_cannot_carry_is_left_to_the_caller(worker: EmbeddingWorker) -> None:
    assert worker.begin("lone \ud800 surrogate") is None


def test_a_killed_worker_falls_back_then_is_replaced(
    worker: EmbeddingWorker, minilm: MiniLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    child = worker._child
    assert child is not None
    wait = worker.begin(Q)
    assert wait is not None
    os.kill(child.pid, signal.SIGKILL)  # mid-request
    child.wait()
    assert np.array_equal(wait()[0], minilm.embed([Q])[0])  # answered in process instead
    assert worker.begin(Q) is None  # dead and not yet due for a restart: the caller embeds
    monkeypatch.setattr(embedding_worker, "RESTART_AFTER_S", 0.0)
    worker.begin(Q)  # starts a new child
    ready(worker)
    assert worker._child is not None and worker._child.pid != child.pid
    again = worker.begin(Q)
    assert again is not None and np.array_equal(again()[0], minilm.embed([Q])[0])


def test_a_stalled_worker_is_replaced_and_the_query_still_answered(
    worker: EmbeddingWorker, minilm: MiniLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    child = worker._child
    assert child is not None
    monkeypatch.setattr(embedding_worker, "REPLY_TIMEOUT_S", 0.5)
    os.kill(child.pid, signal.SIGSTOP)
    try:
        wait = worker.begin(Q)
        assert wait is not None
        started = time.monotonic()
        assert np.array_equal(wait()[0], minilm.embed([Q])[0])
        assert time.monotonic() - started < 5
        assert worker._child is None  # the stuck one was stopped
    finally:
        with contextlib.suppress(ProcessLookupError):  # close() killed and reaped it
            os.kill(child.pid, signal.SIGCONT)
