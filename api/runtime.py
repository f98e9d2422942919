"""What the API process holds while it runs: stores, producer, the embedded projector."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import faust

from commands.writes import Commands
from engram.settings import Settings
from projections.knowledge import load_knowledge
from projections.progress import Progress
from projections.stores import TenantStores
from streams.embedder import Embedder, load_embedder
from streams.indexer import Indexer
from streams.keystore import KeyStore
from streams.lag import LagMonitor
from streams.producer import EventProducer
from streams.projector import create_app
from streams.topics import ensure_topics

log = logging.getLogger(__name__)


@dataclass
class Runtime:
    settings: Settings
    stores: TenantStores
    progress: Progress  # records applied to the graph (reads, readiness)
    indexed: Progress  # records whose memories are also searchable (recall, ?wait=true)
    embedder: Embedder
    indexer: Indexer
    producer: EventProducer
    projector: faust.App
    lag: LagMonitor
    commands: Commands


@asynccontextmanager
async def running(settings: Settings) -> AsyncIterator[Runtime]:
    """Start producer, projector (Faust, in this event loop) and lag monitor; stop them after."""
    await ensure_topics(settings)
    knowledge = load_knowledge(settings.ontology_dir.resolve(), settings.rules_dir.resolve())
    embedder = load_embedder(settings.embedder)
    stores = TenantStores(
        settings.tenants_dir,
        max_open=settings.max_open_stores,
        knowledge=knowledge,
        vectors=(embedder.name, embedder.dim),
        keys=KeyStore(settings.key_store_dir),
    )
    progress = Progress()
    indexed = Progress()
    indexer = Indexer(stores, indexed)
    producer = EventProducer(settings)
    runtime = Runtime(
        settings=settings,
        stores=stores,
        progress=progress,
        indexed=indexed,
        embedder=embedder,
        indexer=indexer,
        producer=producer,
        projector=create_app(settings, stores, progress, indexer),
        lag=LagMonitor(settings),
        commands=Commands(stores, producer, progress, indexed, embedder, settings.wait_timeout_s),
    )
    embedder.embed(["warm up"])  # load the model before the first request needs it
    await runtime.producer.start()
    await runtime.lag.start()
    await indexer.start()
    await runtime.projector.start()
    log.info("engram running: topic %s, data %s", settings.events_topic, settings.data_dir)
    try:
        yield runtime
    finally:
        await runtime.projector.stop()
        await indexer.stop()
        await runtime.lag.stop()
        await runtime.producer.stop()
        stores.close()
