"""The projector's batches: a tenant's run planned together and committed once equals the same
records handled one at a time: the same outcomes, the same dead letters, byte-identical stores."""

from __future__ import annotations

import asyncio
import gc
import random
import tempfile
from pathlib import Path

from engram.projections.read import export_nquads
from engram.projections.stores import TenantStores
from engram.schemas.events import Position, event_from_json
from engram.streams import codec, projector
from engram.streams.topics import partition_for
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.factories import random_stream

PARTITIONS = 2
TENANTS = ["acme", "beta", "gamma"]  # acme and gamma share a partition of 2


def hostile_records(seed: int, n: int) -> list[projector.Record]:
    """Tenants' streams interleaved, with what a hostile or careless producer adds: the same event
    again, an event id reused for another event, bytes that are not an event, a record on the wrong
    partition, a key that is no tenant, an event naming another tenant."""
    rng = random.Random(seed)
    streams = {t: random_stream(rng, t, n)[0] for t in TENANTS}
    lines = []
    while any(streams.values()):
        t = rng.choice([t for t in TENANTS if streams[t]])
        lines.append((t, streams[t].pop(0)))
    records: list[projector.Record] = []
    offsets = dict.fromkeys(range(PARTITIONS), 0)

    def put(key: bytes | None, value: bytes, partition: int) -> None:
        records.append(
            projector.Record(key, value, [], Position(partition, offsets[partition], 1_764_547_200_000))
        )
        offsets[partition] += 1

    for tenant, line in lines:
        home = partition_for(tenant, PARTITIONS)
        value = codec.encode(event_from_json(line))
        put(tenant.encode(), value, home)
        roll = rng.random()
        if roll < 0.08:
            put(tenant.encode(), value, home)  # the same event again
        elif roll < 0.12:
            reused = {**line, "payload": {**line["payload"]}}
            reused["type"], reused["payload"] = "ClockTicked", {"now": "2026-12-31T00:00:00Z"}
            put(tenant.encode(), codec.encode(event_from_json(reused)), home)  # an id reused
        elif roll < 0.15:
            put(tenant.encode(), b"\xc3\x01 not avro", home)
        elif roll < 0.17:
            put(tenant.encode(), value, (home + 1) % PARTITIONS)  # off its tenant's partition
        elif roll < 0.19:
            put(b"no tenant\n", value, home)
        elif roll < 0.21:
            other = next(t for t in TENANTS if t != tenant)
            put(other.encode(), value, partition_for(other, PARTITIONS))  # names another tenant
    # a tenant whose first records are refused, then one applies: its store begins there
    late = [b"\xc3\x01 junk", codec.encode(event_from_json(random_stream(rng, "late", 1)[0][0]))]
    for value in late:
        put(b"late", value, partition_for("late", PARTITIONS))
    return records


def run(records: list[projector.Record], root: Path, sizes: list[int]) -> tuple[list, list, dict[str, str]]:
    stores = TenantStores(root)
    letters: list[tuple[Position, str]] = []

    async def sink(record: projector.Record, reason: str) -> None:
        letters.append((record.position, reason))

    async def go() -> list[projector.Result]:
        out: list[projector.Result] = []
        start, cuts = 0, iter(sizes * len(records))
        while start < len(records):
            batch = records[start : start + next(cuts)]
            out += await projector.handle_batch_with_retries(batch, stores, sink, partitions=PARTITIONS)
            start += len(batch)
        return out

    results = asyncio.run(go())
    graphs = {t: export_nquads(g) for t in stores.tenants() if (g := stores.get(t)) is not None}
    stores.close()
    outcomes = [(r.tenant, r.outcome, r.memory_ids) for r in results]
    return outcomes, letters, graphs


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32), st.lists(st.integers(1, 40), min_size=1, max_size=10))
def test_batches_of_random_sizes_equal_one_record_at_a_time(seed: int, sizes: list[int]) -> None:
    records = hostile_records(seed, 25)
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
        one = run(records, Path(tmp) / "one", [1])
        batched = run(records, Path(tmp) / "batched", sizes)
    assert batched[0] == one[0]  # outcomes, with reasons and the memories to reindex
    # dead letters: which records and why (a batch sends them tenant by tenant, not in log order)
    assert sorted(batched[1], key=str) == sorted(one[1], key=str)
    assert batched[2] == one[2] and set(one[2]) == {*TENANTS, "late"}


def test_a_batch_redelivered_after_a_crash_changes_nothing(tmp_path: Path) -> None:
    """Kafka redelivers from the last committed offset: a batch already committed, or half of one
    (some tenants' runs committed, the rest not), is skipped where applied and applied where not."""
    records = hostile_records(7, 30)
    once = run(records, tmp_path / "once", [len(records)])
    again = run(records + records[: len(records) // 2] + records, tmp_path / "again", [17])
    assert again[2] == once[2]
    assert sorted(again[1], key=str) == sorted(once[1], key=str)  # nothing dead-lettered twice


def checkpoint(stores: TenantStores, tenant: str) -> Position | None:
    graph = stores.get(tenant)
    return graph.checkpoint() if graph is not None else None


class Crash(BaseException):
    """What kill -9 leaves: the process gone at that instant, nothing after it run."""


def test_a_crash_in_the_middle_of_a_batch_loses_and_doubles_nothing(tmp_path: Path) -> None:
    """The process dies while a batch is applied, some tenants' runs committed and the rest not
    (here at a dead letter of the last tenant's run, before its commit); Kafka redelivers the whole
    batch to the restarted worker, which skips what was committed and applies the rest."""
    records = hostile_records(11, 30)
    reference = run(records, tmp_path / "reference", [len(records)])
    first = list(dict.fromkeys(r.key for r in records if r.key in {t.encode() for t in TENANTS}))
    home_records = [
        r.key for r in records if r.position.partition == partition_for(r.key.decode(), PARTITIONS)
    ]
    # runs are applied shortest first, tenants of equal runs in the order they first appear
    order = sorted(first, key=home_records.count)
    victim = order[-1]
    home = partition_for(victim.decode(), PARTITIONS)
    root = tmp_path / "crashed"
    stores = TenantStores(root)
    letters: list[tuple[Position, str]] = []

    async def dying_sink(record: projector.Record, reason: str) -> None:
        if record.key == victim and record.position.partition == home:
            raise Crash
        letters.append((record.position, reason))

    crashed = False
    try:  # not pytest.raises: its traceback would keep the store, and its RocksDB lock, alive
        asyncio.run(projector.handle_batch_with_retries(records, stores, dying_sink, partitions=PARTITIONS))
    except Crash:
        crashed = True
    assert crashed
    committed = {t for t in TENANTS if checkpoint(stores, t) is not None}
    assert committed == {t.decode() for t in order[:-1]}  # the crash fell in the middle of the batch
    del stores
    gc.collect()  # RocksDB's lock goes with the last handle, as with a dead process
    again = run(records, root, [len(records)])
    assert again[2] == reference[2]  # every tenant byte-identical to an uninterrupted run
    assert sorted(letters + again[1], key=str) == sorted(reference[1], key=str)  # none twice, none lost
