"""The log, projected into tenants' stores: what the Faust agent (``streams.projector_app``) and
replay both run on a batch of records.

``project`` is the whole of what happens to a batch of records (each tenant's run planned in log
order and committed once), shared by the live agent and by replay through
``handle_batch_with_retries``, so a replayed store is built by exactly the code that built the
live one; ``handle_record`` is a batch of one. Errors are a stream of their own: a record that
cannot be decoded, validated or applied goes to the dead-letter topic with its reason and the
stream goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from engram.projections.batch import LiveGroup, Overlay, Step, plan_batch
from engram.projections.read import evidence_turn_keys
from engram.projections.rules.core import CoreEngine
from engram.projections.stores import TenantStores
from engram.projections.tenant_graph import Outcome, Planned, Status, StoreLocked, TenantGraph
from engram.projections.validation import PLAN_ERRORS, rejection_reason
from engram.schemas import payloads as ev
from engram.schemas import sealing
from engram.schemas import vocabulary as v
from engram.schemas.checks import InvalidEvent
from engram.schemas.events import Event, Position
from engram.streams import codec, fetch_guard, live_path
from engram.streams.keystore import KeyMissing, KeyStore
from engram.streams.pipeline import read_record
from engram.streams.snapshots import Snapshots
from engram.streams.topics import partition_for

from engram import metrics

log = logging.getLogger(__name__)

Headers = Sequence[tuple[str, bytes]]
# a refused record (its headers without the unreadable mark) and the reason
DeadLetterSink = Callable[["Record", str], Awaitable[None]]
# told of the records a tenant's run has just committed: (index in the batch, result) each
RunCommitted = Callable[[Sequence[tuple[int, "Result"]]], Awaitable[None]]


@dataclass(frozen=True)
class Record:
    """One Kafka record as the projector sees it."""

    key: bytes | None
    value: bytes | None
    headers: Headers
    position: Position


@dataclass(frozen=True)
class Result:
    tenant: str | None
    outcome: Outcome
    memory_ids: tuple[str, ...] = ()  # memories whose searchable text or vector the event changed


def reindexes(event: Event) -> str | None:
    """The memory whose searchable text or vector ``event`` changes, if any."""
    p = event.payload
    return p.memory_id if isinstance(p, ev.MemoryEvent) and p.reindexes else None


def record_tenant(key: bytes | None) -> str | None:
    """The tenant a record's key names, or None if the key is not a tenant id."""
    try:
        tenant = (key or b"").decode("utf-8")
    except UnicodeDecodeError:
        return None
    return tenant if v.full_match(v.TENANT_RE, tenant) else None


@dataclass(frozen=True)
class _Screened:
    """A record after the checks that need no store: a step of its tenant's run, or refused with
    no tenant (a key that is not a tenant id, a record off its tenant's partition)."""

    tenant: str | None
    step: Step | None = None
    refusal: str | None = None


def _placed(record: Record, partitions: int) -> _Screened | None:
    """The checks of a record that need neither its body nor a store: None when it passes them."""
    tenant = record_tenant(record.key)
    home = tenant is not None and record.position.partition == partition_for(tenant, partitions)
    if (unreadable := fetch_guard.unreadable_reason(record.headers)) is not None:
        return (
            _Screened(tenant, Step(record.position, refusal=unreadable))
            if home
            else _Screened(tenant, refusal=unreadable)
        )
    if tenant is None:
        return _Screened(None, refusal=f"record key is not a tenant id: {record.key!r:.100}")
    if not home:
        return _Screened(
            tenant,
            refusal=f"record of tenant {tenant!r} is on partition {record.position.partition}, not on "
            f"{partition_for(tenant, partitions)}, the one its key hashes to (its replay reads only that)",
        )
    return None


def _screen(record: Record, stores: TenantStores, partitions: int) -> _Screened:
    tenant = record_tenant(record.key)
    if (placed := _placed(record, partitions)) is not None:
        return placed
    try:
        event = read_record(record.value or b"", stores.keys)
        if event.tenant != tenant:
            raise InvalidEvent(f"event tenant {event.tenant!r:.100} differs from record key {tenant!r}")
    except (codec.UndecodableEvent, *PLAN_ERRORS) as exc:
        return _Screened(tenant, Step(record.position, refusal=rejection_reason(exc)))
    return _Screened(tenant, Step(record.position, event))


async def project(
    records: Sequence[Record],
    results: list[Result | None],
    stores: TenantStores,
    dead_letter: DeadLetterSink,
    *,
    partitions: int,
    committed: RunCommitted | None = None,
) -> None:
    """Decode, validate and apply the records whose ``results`` entry is None, filling it in.

    Each tenant's records form one run, planned in log order against the facts the records before
    them leave and committed as one net delta with the tenant's new checkpoint (then one rule
    update): a run is all or nothing, so a failure part-way leaves the results of the tenants
    already committed and nothing of the rest. A record refused (dead-lettered with its reason)
    moves its tenant's checkpoint like any other.

    Every refusal here is deterministic (the same bytes against the same facts), so replay,
    which runs this same function, refuses the same records. A refused record never creates a
    tenant's store: only an event that applies does. ``partitions`` is the events topic's
    partition count: a tenant's events are on the one partition its key hashes to, the only one
    its replay reads, so a record anywhere else is refused live too (and leaves the tenant's
    checkpoint, which is a position on its own partition, alone).

    In a tenant's run, each stretch of live data the compiled core reads whole (KPIs, spend, the
    clock: ``streams.live_path``) is one group the core plans in its place from the records' bytes;
    the rest is decoded here and planned in Python. The run is committed once either way.

    The runs are committed shortest first (tenants are independent, so any order gives the same
    stores), and ``committed`` is told of each as it commits: a write is reported applied when
    its tenant's run commits, and a lone write behind a backlog of other tenants' records in the
    same batch goes first.
    """
    # a record refused with no store to remember it is dead-lettered once: the marks of earlier
    # batches say which were (before a crash); this batch's own refusals may come in any order
    marks = {p: stores.refused_mark(p) for p in {r.position.partition for r in records}}

    async def refuse_storeless(i: int, tenant: str | None, reason: str) -> None:
        record = records[i]
        if record.position.offset > marks[record.position.partition]:
            await dead_letter(_kept_headers(record), reason)
            stores.note_refused(record.position)
        results[i] = Result(tenant, Outcome(Status.REJECTED, reason))

    placed: dict[str, list[int]] = {}
    marked: set[str] = set()  # tenants with a record the fetch guard marked unreadable
    for i, record in enumerate(records):
        if results[i] is not None:
            continue
        tenant = record_tenant(record.key)
        graph = await stores.get_async(tenant) if tenant is not None else None
        if graph is not None and graph.already_applied(record.position):
            results[i] = Result(tenant, Outcome(Status.SKIPPED))
            continue
        refused = _placed(record, partitions)
        if refused is None:
            assert tenant is not None
            placed.setdefault(tenant, []).append(i)
        elif refused.step is None:
            await refuse_storeless(i, refused.tenant, refused.refusal or "refused")
        else:
            assert refused.tenant is not None
            placed.setdefault(refused.tenant, []).append(i)
            marked.add(refused.tenant)
    graph = None  # no handle kept across the runs: an erasure closes and replaces the store
    for tenant, indices in sorted(placed.items(), key=lambda item: len(item[1])):
        core = tenant not in marked and _compiled(stores)
        for piece in _snapshot_pieces(tenant, indices, stores):
            run = _steps(tenant, piece, records, stores, partitions, core=core)
            await _apply_run(tenant, run, records, results, stores, dead_letter, refuse_storeless)
        if committed is not None:
            await committed([(i, r) for i in indices if (r := results[i]) is not None])


def _steps(
    tenant: str,
    indices: list[int],
    records: Sequence[Record],
    stores: TenantStores,
    partitions: int,
    *,
    core: bool,
) -> list[tuple[int, Step]]:
    """A tenant's records as the steps of its run: each stretch of live data the core reads whole
    one group, the rest decoded here."""
    run: list[tuple[int, Step]] = []
    for live, cut in live_path.segments(tenant, [records[i].value or b"" for i in indices], core):
        part = indices[cut.start : cut.stop]
        group = _live_group(tenant, part, records, stores, partitions) if live else None
        if group is not None:
            run.extend((i, Step(records[i].position, live=(group, k))) for k, i in enumerate(part))
            continue
        for i in part:
            screened = _screen(records[i], stores, partitions)
            assert screened.step is not None  # placed: refused, if at all, as a step of its run
            run.append((i, screened.step))
    return run


def _compiled(stores: TenantStores) -> bool:
    """Whether the core plans live data here: with the compiled rule engine (``reference`` is the
    projection in Python throughout)."""
    return isinstance(stores.knowledge.engine, CoreEngine)


def _live_group(
    tenant: str, part: list[int], records: Sequence[Record], stores: TenantStores, partitions: int
) -> LiveGroup | None:
    """A stretch of live data decoded by the core, to be planned in its place in the run (each
    record decoded in Python instead if the core declines the plan); None if the core does not
    read it whole."""
    run = live_path.decode(tenant, [records[i].value or b"" for i in part])
    if run is None:
        return None

    def fallback(k: int) -> Step:
        step = _screen(records[part[k]], stores, partitions).step
        assert step is not None
        return step

    return LiveGroup(run, [records[i].position for i in part], fallback)


def _snapshot_pieces(tenant: str, run: list[int], stores: TenantStores) -> list[list[int]]:
    """A run (its records' indices) cut where the tenant's handled count reaches a multiple of the
    snapshot interval, so snapshots fall every N events whatever the batches (a batch's result does
    not depend on where it is cut: the batch tests hold incremental == from scratch for any cut).
    Cut before the steps are made, so no group of live data straddles a snapshot."""
    every = stores.snapshots.every if stores.snapshots is not None else 0
    if every <= 0:
        return [run]
    graph = stores.get(tenant)
    handled = graph.handled() if graph is not None else 0
    pieces, start = [], 0
    for n in range(len(run)):
        if (handled + n + 1) % every == 0:
            pieces.append(run[start : n + 1])
            start = n + 1
    return [*pieces, run[start:]] if start < len(run) else pieces


def _kept_headers(record: Record) -> Record:
    """The record as it is dead-lettered: without the mark the fetch guard put on it."""
    kept = [(k, val) for k, val in record.headers if k != fetch_guard.UNREADABLE]
    return dataclasses.replace(record, headers=kept)


async def _apply_run(
    tenant: str,
    run: list[tuple[int, Step]],
    records: Sequence[Record],
    results: list[Result | None],
    stores: TenantStores,
    dead_letter: DeadLetterSink,
    refuse_storeless: Callable[[int, str | None, str], Awaitable[None]],
) -> None:
    """One tenant's run: planned, its refusals dead-lettered, forgotten keys destroyed, committed."""
    steps = [step for _, step in run]
    graph = stores.get(tenant)
    if graph is not None:
        planned = graph.plan(steps)
    else:  # a tenant's first events: only one that applies creates the store
        overlay = Overlay(None)
        outcomes = plan_batch(stores.knowledge, overlay, steps)
        first = next((n for n, o in enumerate(outcomes) if o.status is Status.APPLIED), len(steps))
        for (i, _), outcome in zip(run[:first], outcomes, strict=False):
            await refuse_storeless(i, tenant, outcome.reason or "refused")
        run, steps, outcomes = run[first:], steps[first:], outcomes[first:]
        if not run:
            return
        planned = Planned(outcomes, overlay.net(), steps[-1].position, len(steps))

    for (i, _), outcome in zip(run, planned.outcomes, strict=True):
        if outcome.status is Status.REJECTED:
            await dead_letter(_kept_headers(records[i]), outcome.reason or "rejected")
    forgotten = [
        step.event.payload.memory_id
        for step, outcome in zip(steps, planned.outcomes, strict=True)
        if outcome.status is Status.APPLIED
        and step.event is not None
        and isinstance(step.event.payload, ev.MemoryForgotten)
    ]
    erasing = bool(forgotten) and isinstance(stores.keys, KeyStore)  # the live projection, not a replay
    if erasing:
        stores.begin_erasure(tenant)
    for key_id in _forgotten_keys(graph, planned, forgotten) if stores.keys else ():
        # before the commit: a crash between the two applies the forget again, never skips it
        stores.keys.destroy(tenant, key_id)
    graph = graph or await stores.get_async(tenant, create=True)  # a new tenant's store: made to commit into
    assert graph is not None
    before = graph.handled()
    graph.commit_planned(planned)
    if erasing:  # the words leave the store's files, the text index, the snapshots, the caches
        del graph
        await stores.erase(tenant)
        try:
            graph = stores.get(tenant)
        except StoreLocked:  # a read still holds the old store: no snapshot now, the next is due later
            graph = None
        if stores.snapshots is not None and stores.snapshots.every > 0:
            before = -stores.snapshots.every  # a fresh snapshot now: the earlier ones are gone
    if graph is not None:
        await _snapshot_if_due(tenant, graph, before, planned, stores.snapshots)
    for (i, step), outcome in zip(run, planned.outcomes, strict=True):
        touched = None
        if outcome.status is Status.APPLIED and step.event is not None:
            touched = reindexes(step.event)
        results[i] = Result(tenant, outcome, (touched,) if touched else ())


def _forgotten_keys(graph: TenantGraph | None, planned: Planned, forgotten: list[str]) -> list[str]:
    """The keys a run's forgets destroy: each memory's, and the turns it was extracted from (their
    ids stay, as the memory's node does). Evidence is read from the facts the run leaves, so a
    memory remembered in the same run counts; no handle on the store is kept (an erasure follows)."""
    if not forgotten:
        return []
    after = Overlay(graph.store if graph is not None else None)
    after.apply(planned.delta)
    return [k for m in forgotten for k in (sealing.key_id(m), *evidence_turn_keys(after, m))]


async def _snapshot_if_due(
    tenant: str, graph: TenantGraph, before: int, planned: Planned, snapshots: Snapshots | None
) -> None:
    """Every ``snapshot_every`` handled events, a snapshot of the store just committed (in a thread:
    the loop keeps serving reads). A snapshot that fails is logged and skipped: it only saves a
    replay some work, and the next one is due after as many events again."""
    if snapshots is None or planned.last is None or not snapshots.due(before, graph.handled()):
        return
    try:
        await asyncio.to_thread(snapshots.take, tenant, graph)
    except Exception:
        log.exception("snapshot of %s at %s failed; the projection goes on", tenant, planned.last)


async def handle_records(
    records: Sequence[Record], stores: TenantStores, dead_letter: DeadLetterSink, *, partitions: int
) -> list[Result]:
    """``project`` over every record: one result per record, in their order."""
    results: list[Result | None] = [None] * len(records)
    await project(records, results, stores, dead_letter, partitions=partitions)
    return [r for r in results if r is not None]


async def handle_record(
    record: Record, stores: TenantStores, dead_letter: DeadLetterSink, *, partitions: int
) -> Result:
    """One record, as a batch of one."""
    return (await handle_records([record], stores, dead_letter, partitions=partitions))[0]


MAX_ATTEMPTS = 5
LOCKED_RETRY_S = 5.0
KEY_WAIT_S = 300.0  # ENGRAM_KEY_WAIT_S's default


Hold = Callable[[str | None], None]  # told why the projector waits (a reason), and when it goes on (None)


def _no_hold(reason: str | None) -> None:
    pass


async def handle_with_retries(
    record: Record,
    stores: TenantStores,
    sink: DeadLetterSink,
    *,
    partitions: int,
    hold: Hold = _no_hold,
    key_wait_s: float = KEY_WAIT_S,
    key_waited_s: float = 0.0,
) -> Result:
    """An unexpected error (disk, a bug) is retried with backoff before the record is given up
    on: dead-lettered with the error, and the tenant's position moved past it. A store another
    process holds is no fault of the record's: it is waited for, however long, and nothing is
    dead-lettered or skipped meanwhile. A data key missing from the key store (``KeyMissing``:
    not destroyed, so the memory is not erased) is waited for up to ``key_wait_s``, ``hold``
    told why (readiness says it), nothing projected as erased; then the record is dead-lettered
    with that reason, so one record no key store holds (a producer with a key store of its own)
    does not stop its partition for good. The log keeps it: a rebuild once the key is back has it."""
    attempt = 0
    waited = key_waited_s  # a batch this record was in may have waited for the key already
    while True:
        attempt += 1
        try:
            result = await handle_record(record, stores, sink, partitions=partitions)
            hold(None)
            return result
        except StoreLocked as exc:
            attempt = 0
            pos = record.position
            log.error("%s; the record at %d:%d waits for it", exc, pos.partition, pos.offset)
            await asyncio.sleep(LOCKED_RETRY_S)
            continue
        except KeyMissing as exc:
            pos = record.position
            if waited < key_wait_s:
                log.error("%s; the record at %d:%d waits for it", exc, pos.partition, pos.offset)
                hold(_missing(exc))
                await asyncio.sleep(LOCKED_RETRY_S)
                waited += LOCKED_RETRY_S
                continue
            reason = f"its data key did not come back in {key_wait_s:g}s (ENGRAM_KEY_WAIT_S): {exc}"
            log.error("the record at %d:%d is dead-lettered: %s", pos.partition, pos.offset, reason)
            hold(None)
            await sink(_kept_headers(record), reason)
            _reject(stores, record)
            return Result(None, Outcome(Status.REJECTED, reason))
        except Exception as exc:
            pos = record.position
            if attempt < MAX_ATTEMPTS:
                log.warning(
                    "projection failed at %d:%d (attempt %d): %s; retrying",
                    pos.partition,
                    pos.offset,
                    attempt,
                    exc,
                )
                await asyncio.sleep(min(0.1 * 2**attempt, 5.0))
                continue
            log.exception("projection failed at %d:%d; dead-lettering", pos.partition, pos.offset)
            reason = f"projection error after {attempt} attempts: {type(exc).__name__}: {exc}"
            await sink(_kept_headers(record), reason)
            _reject(stores, record)
            return Result(None, Outcome(Status.REJECTED, reason))


def _reject(stores: TenantStores, record: Record) -> None:
    """Move the record's tenant's position past a record given up on."""
    tenant = record_tenant(record.key)
    with contextlib.suppress(Exception):
        if tenant is not None and (graph := stores.get(tenant)) is not None:
            graph.reject(record.position)


async def handle_batch_with_retries(
    records: Sequence[Record],
    stores: TenantStores,
    sink: DeadLetterSink,
    *,
    partitions: int,
    committed: RunCommitted | None = None,
    hold: Hold = _no_hold,
    key_wait_s: float = KEY_WAIT_S,
) -> list[Result]:
    """``project`` over a batch, retried as ``handle_with_retries`` retries one record: a store
    another process holds is waited for; any other error is retried with backoff, each retry only
    over the tenants not yet committed, and after the last attempt the rest go one record at a
    time, so only a record that fails on its own is dead-lettered. ``committed`` hears of each
    tenant's run as ``project`` commits it; the records it was not told of are the caller's to
    report from the results."""
    results: list[Result | None] = [None] * len(records)
    attempt = 0
    waited = 0.0  # for a missing key: past key_wait_s, the batch goes one record at a time
    while len(records) > 1 and attempt < MAX_ATTEMPTS and None in results and waited < key_wait_s:
        attempt += 1
        try:
            await project(records, results, stores, sink, partitions=partitions, committed=committed)
            hold(None)
        except StoreLocked as exc:
            attempt = 0
            log.error("%s; a batch of %d records waits for it", exc, len(records))
            await asyncio.sleep(LOCKED_RETRY_S)
        except KeyMissing as exc:
            attempt = 0
            log.error("%s; a batch of %d records waits for it", exc, len(records))
            hold(_missing(exc))
            await asyncio.sleep(LOCKED_RETRY_S)
            waited += LOCKED_RETRY_S
        except Exception as exc:
            log.warning(
                "projecting a batch of %d failed (attempt %d): %s; retrying", len(records), attempt, exc
            )
            await asyncio.sleep(min(0.1 * 2**attempt, 5.0))
    for i, record in enumerate(records):
        if results[i] is None:
            results[i] = await handle_with_retries(
                record,
                stores,
                sink,
                partitions=partitions,
                hold=hold,
                key_wait_s=key_wait_s,
                key_waited_s=waited,
            )
    return [r for r in results if r is not None]


def _missing(exc: KeyMissing) -> str:
    metrics.keys_missing.inc()
    return f"projection waits: {exc}"
