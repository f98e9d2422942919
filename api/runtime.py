"""What the API reads while it runs: stores, producer, the embedded projector (composed by
``engram.process``, which builds this for the API and the projector alone for a worker)."""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import faust
import numpy as np
from engram.commands.conversations import ConversationCommands
from engram.commands.extraction import ExtractionWorkflow
from engram.commands.writes import Commands
from engram.projections.progress import Progress
from engram.projections.sparql_sandbox import Sandbox
from engram.projections.stores import TenantStores
from engram.streams.asof import AsOfProjections
from engram.streams.embedder import Embedder
from engram.streams.embedding_worker import EmbeddingWorker
from engram.streams.group import Membership
from engram.streams.indexer import Indexer
from engram.streams.lag import LagMonitor
from engram.streams.producer import EventProducer
from engram.streams.snapshots import Snapshots

from engram.settings import Settings

log = logging.getLogger(__name__)

RECENT_QUERIES = 256  # query vectors kept (1.5 KB each at 384 dimensions)


@dataclass
class Runtime:
    settings: Settings
    stores: TenantStores
    snapshots: Snapshots  # taken on demand, listed (the projector takes them every N events)
    progress: Progress  # records applied to the graph (reads, readiness)
    indexed: Progress  # records whose memories are also searchable (recall, ?wait=true)
    embedder: Embedder
    indexer: Indexer
    producer: EventProducer
    projector: faust.App
    lag: LagMonitor
    commands: Commands
    query_worker: EmbeddingWorker | None = None
    past: AsOfProjections | None = None  # as_of reads: tenants replayed to a point of system time
    sparql: Sandbox | None = None  # the SPARQL route's evaluators (no network, killed at the limit)
    capture: ExtractionWorkflow | None = None  # conversation turns to memories; None when off
    membership: Membership | None = None  # the consumer group's assignment: where a tenant's requests go
    conversations: ConversationCommands | None = None  # conversation turns in and out (capture)
    # called after each record the conversation store applies (capture's trigger): (tenant,
    # conversation id, what changed)
    turn_listeners: list[Callable[[str, str, Any], Awaitable[None]]] = field(default_factory=list)
    recent_queries: OrderedDict[str, np.ndarray] = field(default_factory=OrderedDict)

    def query_vector(self, text: str | None) -> PendingVector:
        """Start embedding a query (in the worker process when there is one); read the graph
        meanwhile, then call the result for the vector. An agent's turn often sends the same text
        to recall and to context, so the last few vectors are kept (a vector is a function of its
        text: nothing to invalidate)."""
        if text is not None and (known := self.recent_queries.get(text)) is not None:
            self.recent_queries.move_to_end(text)
            return PendingVector(None, self.embedder, text, known=known)
        return PendingVector(self.query_worker, self.embedder, text, self._remember)

    def _remember(self, text: str, vector: np.ndarray) -> None:
        self.recent_queries[text] = vector
        while len(self.recent_queries) > RECENT_QUERIES:
            self.recent_queries.popitem(last=False)


class PendingVector:
    """A query's embedding on its way. With a worker process it is computed on the other core
    while this one reads the graph; without one (or when the worker cannot take it) it is computed
    here when first asked for. ``ms`` is how long the embedding itself took."""

    def __init__(
        self,
        worker: EmbeddingWorker | None,
        embedder: Embedder,
        text: str | None,
        done: Callable[[str, np.ndarray], None] | None = None,
        *,
        known: np.ndarray | None = None,
    ) -> None:
        self.ms = 0.0
        self._text = text if text is not None and text.strip() else None
        self._embedder = embedder
        self._done = done
        self._vector = known
        self._wait = None
        if known is None and worker is not None and self._text is not None:
            self._wait = worker.begin(self._text)

    def __call__(self) -> np.ndarray | None:
        if self._vector is None and self._text is not None:
            if self._wait is not None:
                self._vector, self.ms = self._wait()
            else:
                started = time.perf_counter()
                self._vector = self._embedder.embed([self._text])[0]
                self.ms = (time.perf_counter() - started) * 1e3
            if self._done is not None:
                self._done(self._text, self._vector)
        return self._vector
