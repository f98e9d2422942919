"""Process composition: the parts of a running engram, built from settings in one place.

Two processes run the projector: ``engram serve`` (the API with the projector in its event loop)
and ``engram worker`` (the projector alone, for scale-out: more workers in one consumer group).
Both compose it here, so a worker is the server's projector without FastAPI, and the API layer
receives its runtime instead of building it.

Both run capture (conversation turns to memories, ``commands.extraction``) for the tenants they
own, and the conversations agent it reads from (``streams.conversations``: every turn into the
conversation store): a conversation is extracted once, by its tenant's owner, whichever process
its turns came through. A worker with ``ENGRAM_ADVERTISED_URL`` serves the API like ``engram
serve`` (the group routes its tenants' requests, writes included, to it); one without it serves
no HTTP and starts none of the parts only requests use (``as_of`` replays, the SPARQL sandbox, the
query embedding process).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Coroutine
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass

import faust

from engram.api.runtime import Runtime
from engram.commands.conversations import ConversationCommands
from engram.commands.extraction import ExtractionSettings, ExtractionWorkflow
from engram.commands.writes import Commands
from engram.projections.conversation_rows import Applied
from engram.projections.conversations import ConversationStore
from engram.projections.knowledge import Knowledge, load_knowledge
from engram.projections.progress import Progress
from engram.projections.sparql_sandbox import Sandbox
from engram.projections.stores import TenantStores
from engram.settings import Settings
from engram.streams.archiver import archive_until
from engram.streams.asof import AsOfProjections
from engram.streams.conversations import ConversationLog, create_conversations_app
from engram.streams.embedder import Embedder, HashingEmbedder, load_embedder, memory_embedding
from engram.streams.embedding_worker import EmbeddingWorker
from engram.streams.extraction.factory import load_extractor
from engram.streams.group import Membership, check_shared_keys, projector_group
from engram.streams.indexer import Indexer
from engram.streams.keystore import KeyStore
from engram.streams.lag import LagMonitor
from engram.streams.log_keys import check_log_keys
from engram.streams.objects import open_objects
from engram.streams.producer import EventProducer
from engram.streams.projector_app import create_app
from engram.streams.snapshots import Snapshots
from engram.streams.topics import ensure_topics

log = logging.getLogger(__name__)

STOP_STARTING_S = 10.0  # what a process signalled while starting gives the parts it started to stop
# What the parts that talk to the broker get to stop, together: with the broker down a Faust app's
# consumer retries its group coordinator for ever, and a stop waited for it (SIGTERM hung); within
# a container's usual 10 s grace, the stores' flush after it included
STOP_BROKER_PARTS_S = 6.0
LAST_STEP_S = 1.0  # what a part gets once that time is spent


# The stops cut short, and what each stopped: their tasks may run on (see ``bounded``)
CUT_SHORT: dict[asyncio.Future[object], str] = {}


async def bounded(step: Awaitable[object], what: str, deadline: float) -> None:
    """Await ``step`` (a part's stop) until ``deadline`` (the loop's clock; at least ``LAST_STEP_S``
    from now); past it, it is said and left behind, and the stop goes on, so the stores are still
    flushed and closed. Left, not cancelled into: a Faust app's stop takes a cancellation as the
    end of one child's stop and awaits the next (mode's ``Service.stop``), so a timeout around it
    did not bound it (a clean-clone run hung there); the step runs as its own task, which is
    cancelled and kept in ``CUT_SHORT`` for ``exit_past_stuck_stops``."""
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(step)
    try:
        await asyncio.wait({task}, timeout=max(deadline - loop.time(), LAST_STEP_S))
    except asyncio.CancelledError:
        task.cancel()
        raise
    if task.done():
        task.result()  # a stop that failed raises, as awaited
        return
    task.cancel()
    CUT_SHORT[task] = what
    # its own line, not a template the log's summary would fold into the first part's
    log.warning(f"{what} did not stop in time (is the broker down?): cut short")


def exit_past_stuck_stops(code: int = 0, grace_s: float = 2.0) -> int:
    """``code``, once the threads a stop left behind have ended. One still running after ``grace_s``
    (a Faust consumer's, retrying a broker that is down) would keep the process alive for ever, so
    it exits without them (``os._exit``: the stores were flushed and closed by then, and the log is
    consumed again from the committed offsets). Called by the commands (``run_command``), never
    inside a test's process."""
    deadline = time.monotonic() + grace_s
    others = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon]
    for thread in others:
        thread.join(max(0.0, deadline - time.monotonic()))
    return _exit_without([t.name for t in others if t.is_alive()], code)


def _exit_without(stuck: list[str], code: int) -> int:
    if not stuck:
        return code
    log.warning("exiting without what did not stop: %s", ", ".join(stuck))
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def run_command(main: Coroutine[object, object, None]) -> int:
    """``asyncio.run(main)`` for a command that stops its parts (``serve``, ``worker``), and its
    exit code. A stop cut short (``bounded``) that takes no cancellation would hang ``asyncio.run``,
    which cancels every task left and waits for them: the process exits first, without them; then
    ``exit_past_stuck_stops`` for the threads."""

    async def then_exit() -> None:
        try:
            await main
        except BaseException:
            _exit_without(cut_short(), 1)
            raise
        _exit_without(cut_short(), 0)

    asyncio.run(then_exit())
    return exit_past_stuck_stops(0)


def cut_short() -> list[str]:
    """The stops ``bounded`` left behind that still run."""
    return [what for task, what in CUT_SHORT.items() if not task.done()]


@dataclass
class Projection:
    """The projector and what it writes to: tenants' stores, their snapshots and search indexes."""

    knowledge: Knowledge
    embedder: Embedder
    stores: TenantStores
    snapshots: Snapshots
    progress: Progress  # records applied to the graph
    indexed: Progress  # records whose memories are also searchable
    indexer: Indexer
    projector: faust.App
    membership: Membership  # which partitions (tenants) are this process's, and whose the others are

    async def start(self) -> None:
        await self.indexer.start()
        await self.membership.start()
        await self.projector.start()

    async def stop(self, deadline: float | None = None) -> None:
        """``deadline`` (the loop's clock) bounds the parts that talk to the broker."""
        if deadline is None:
            deadline = asyncio.get_running_loop().time() + STOP_BROKER_PARTS_S
        if (held := getattr(self.projector, "held_acks", None)) is not None:
            await held.drain()  # in memory: every tenant saved, every offset free to commit
        await bounded(self.projector.stop(), "the projector's consumer", deadline)
        await bounded(self.membership.stop(), "the group membership", deadline)
        await self.indexer.stop()
        for tenant, graph in self.stores.unsaved():  # in memory: a restart need not consume them again
            await asyncio.to_thread(self.snapshots.take, tenant, graph)


def compose_projection(settings: Settings, url: str, kind: str = "serve") -> Projection:
    """The projector's parts, not yet started (the embedder names the vector indexes' model).
    ``url``: where the group's other processes send this one the requests for its tenants;
    ``kind``: ``serve`` or ``worker``, the command running it (``engram status`` shows it)."""
    knowledge = load_knowledge(
        settings.ontology_dir.resolve(), settings.rules_dir.resolve(), settings.rule_engine
    )
    embedder = load_embedder(settings.embedder)
    stores = TenantStores(
        settings.tenants_dir,
        max_open=settings.max_open_stores,
        max_open_bytes=settings.open_stores_mb << 20,
        knowledge=knowledge,
        vectors=(embedder.name, embedder.dim),
        keys=KeyStore(settings.key_store_dir),
        embed=memory_embedding(embedder),
        memory=settings.store == "memory",
        cached=settings.tenants_move,  # on disk: a cache of the tenant's snapshots
    )
    objects = open_objects(settings)
    snapshots = Snapshots(objects, settings.snapshot_interval, keep=settings.snapshot_keep)
    stores.snapshots = snapshots
    progress, indexed = Progress(), Progress()
    indexer = Indexer(stores, indexed)
    membership = Membership(settings, progress, url, kind)
    group = projector_group(settings, objects)
    check_shared_keys(settings, objects)  # a moved tenant must unseal its memories wherever it goes
    return Projection(
        knowledge=knowledge,
        embedder=embedder,
        stores=stores,
        snapshots=snapshots,
        progress=progress,
        indexed=indexed,
        indexer=indexer,
        projector=create_app(settings, stores, progress, indexer, group=group, membership=membership),
        membership=membership,
    )


@asynccontextmanager
async def capturing(
    settings: Settings, runtime: Runtime, store: ConversationStore
) -> AsyncIterator[ExtractionWorkflow | None]:
    """The extraction workflow, told of every record the conversation store applies (entered
    before the conversations agent starts, so no turn goes by unseen) and swept every quarter of
    ``ENGRAM_EXTRACTION_IDLE_S``; None when capture is off (``ENGRAM_EXTRACTION=false`` or
    ``ENGRAM_EXTRACTOR=none``)."""
    extractor = load_extractor(settings, runtime.stores.knowledge) if settings.extraction else None
    if extractor is None:
        yield None
        return
    conversation_log = ConversationLog(settings, store)
    workflow = ExtractionWorkflow(
        runtime.commands,
        store,
        runtime.stores.keys,
        conversation_log,
        extractor,
        ExtractionSettings.of(settings),
        owns=runtime.membership.holds if runtime.membership is not None else lambda tenant: True,
    )
    await conversation_log.start()
    runtime.turn_listeners.append(workflow.on_applied)
    sweeping = asyncio.create_task(workflow.sweep_forever())
    log.info(
        "capture on: %s extracts at %d turns or %.1f s idle",
        extractor.name,
        settings.extraction_turns,
        settings.extraction_idle_s,
    )
    try:
        yield workflow
    finally:
        runtime.turn_listeners.remove(workflow.on_applied)
        sweeping.cancel()
        await asyncio.gather(sweeping, return_exceptions=True)
        await workflow.stop()  # a range cut short is extracted again on restart: same event ids
        await conversation_log.stop()


@asynccontextmanager
async def running(
    settings: Settings,
    *,
    url: str | None = None,
    api: bool = True,
    kind: str = "serve",
    keys_checked: bool = False,
) -> AsyncIterator[Runtime]:
    """The API's runtime: producer, projector (Faust, in this event loop), lag monitor, capture,
    as_of replays, the SPARQL sandbox and (when enabled) the archiver; stopped after. ``url``: where
    the group sends this process its tenants' requests (default ``settings.api_url()``); ``api``
    False (a worker that serves no HTTP): the parts only requests use are not started; ``kind``:
    the command running it, ``serve`` or ``worker``; ``keys_checked``: the caller has checked the
    log's key store already (``engram serve``, before uvicorn starts)."""
    await ensure_topics(settings)
    if not keys_checked:
        await check_log_keys(settings)  # never project a log this key store cannot unseal
    parts = compose_projection(settings, url or settings.api_url(), kind)
    embedder, stores = parts.embedder, parts.stores
    producer = EventProducer(settings, write_timeout_s=settings.write_timeout_s)
    runtime = Runtime(
        settings=settings,
        stores=stores,
        snapshots=parts.snapshots,
        progress=parts.progress,
        indexed=parts.indexed,
        embedder=embedder,
        indexer=parts.indexer,
        producer=producer,
        projector=parts.projector,
        lag=LagMonitor(settings, group=parts.membership.group),
        membership=parts.membership,
        commands=Commands(
            stores,
            producer,
            parts.progress,
            parts.indexed,
            embedder,
            settings.wait_timeout_s,
            queue_limit=settings.write_queue,
        ),
        # a hashing embedder costs microseconds: a process to overlap it with would cost more
        query_worker=EmbeddingWorker(embedder, settings.embedder)
        if api and settings.query_embedding_worker and not isinstance(embedder, HashingEmbedder)
        else None,
    )
    conversation_store = ConversationStore(settings.data_dir / "conversations", stores.keys)
    stored_turns = Progress()
    runtime.conversations = ConversationCommands(
        conversation_store, stores.keys, producer, stored_turns, settings.wait_timeout_s
    )

    async def on_applied(tenant: str, conversation_id: str, applied: Applied) -> None:
        for listener in list(runtime.turn_listeners):  # capture's workflow, when it runs
            await listener(tenant, conversation_id, applied)

    conversations_app = create_conversations_app(
        settings, conversation_store, stores.keys, on_applied=on_applied, progress=stored_turns
    )
    if api:
        runtime.past = AsOfProjections(
            settings,
            parts.knowledge,
            (embedder.name, embedder.dim),
            parts.snapshots,
            embed=memory_embedding(embedder),
        )
        stores.erasure_listeners.append(runtime.past.forget_tenant)
        runtime.sparql = await Sandbox(settings.sparql_timeout_s).start()
    archive_stop = asyncio.Event()
    archiving: asyncio.Task[None] | None = None
    capture = AsyncExitStack()

    async def stop() -> None:
        deadline = asyncio.get_running_loop().time() + STOP_BROKER_PARTS_S
        if archiving is not None:  # the open segments are written before it returns
            archive_stop.set()
            await bounded(archiving, "the archiver", deadline)
        await bounded(conversations_app.stop(), "the conversations' consumer", deadline)
        await bounded(capture.aclose(), "capture", deadline)
        await parts.stop(deadline)
        await bounded(runtime.lag.stop(), "the lag probe", deadline)
        await bounded(runtime.producer.stop(), "the producer", deadline)
        if runtime.query_worker is not None:
            runtime.query_worker.close()
        if runtime.sparql is not None:
            await runtime.sparql.close()
        stores.close()
        conversation_store.close()
        if runtime.past is not None:
            runtime.past.close()

    try:
        embedder.embed(["warm up"])  # load the model before the first request needs it
        await runtime.producer.start()
        await runtime.lag.start()
        await parts.start()  # the Faust apps' starts wait for their group's first assignment
        runtime.capture = await capture.enter_async_context(capturing(settings, runtime, conversation_store))
        await conversations_app.start()
        if settings.archive_enabled:
            archiving = asyncio.create_task(archive_until(settings, archive_stop))
    except BaseException:  # a start cut short (a signal, ``started``): what started stops, or its
        async with asyncio.timeout(STOP_STARTING_S):  # threads would keep the process alive
            await stop()
        raise
    log.info("engram running: topic %s, data %s", settings.events_topic, settings.data_dir)
    try:
        yield runtime
    finally:
        await stop()


async def work_until_signalled(settings: Settings) -> None:
    """``engram worker`` without a URL: project (and capture) until SIGTERM or SIGINT, then stop
    cleanly (stores flushed). It serves no HTTP: it advertises a ``worker://`` URL, so a request
    for one of its tenants is answered 503 with the reason by the process it reached."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        async with AsyncExitStack() as stack:
            parts = running(
                settings, url=f"worker://{socket.gethostname()}/{os.getpid()}", api=False, kind="worker"
            )
            if not await started(stack, parts, stop, "engram worker"):
                return
            log.info("engram worker projecting: topic %s, data %s", settings.events_topic, settings.data_dir)
            await stop.wait()
            log.info("engram worker stopping (signalled)")
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)


async def started(
    stack: AsyncExitStack, parts: AbstractAsyncContextManager[object], stop: asyncio.Event, what: str
) -> bool:
    """Enter ``parts`` in ``stack`` unless ``stop`` is set first: a start can wait for ever (the
    projector's consumer waits for the group to assign it partitions; a join the broker refuses
    is retried), and a signal must still end the process. False (the start cancelled, what had
    started stopped) when it was."""
    entering = asyncio.ensure_future(stack.enter_async_context(parts))
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({entering, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
    if entering.done():
        entering.result()  # a start that failed raises here
        return True
    log.warning(
        "%s signalled while starting: it has not joined its consumer groups yet (see any errors "
        "above); stopping without having started",
        what,
    )
    entering.cancel()
    await asyncio.gather(entering, return_exceptions=True)
    return False
