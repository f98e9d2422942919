"""The key store on a real directory, and forgetting through the projector: after the key is gone a
rebuild from the same records equals the live store, and nothing of the memory is readable."""

from __future__ import annotations

import asyncio
import gc
import stat
from pathlib import Path
from typing import Any

import pytest
from engram.projections.read import export_nquads, get_memory
from engram.projections.stores import TenantStores
from engram.projections.tenant_graph import Status
from engram.schemas import sealing
from engram.schemas.events import Position
from engram.streams import keystore, projector
from engram.streams.keystore import KeyErased, KeyMissing, KeyStore, ReadOnlyKeys
from engram.streams.pipeline import Pipeline

from tests.factories import envelope, remembered


def test_keys_persist_are_wrapped_and_once_destroyed_are_never_made_again(tmp_path: Path) -> None:
    store = KeyStore(tmp_path)
    key = store.data_key("acme", "memory/m1", create=True)
    assert key is not None and len(key) == 32
    assert KeyStore(tmp_path).data_key("acme", "memory/m1") == key  # another process reads the same
    assert stat.S_IMODE((tmp_path / "master.key").stat().st_mode) == 0o600
    files = list((tmp_path / "acme").glob("*.key"))
    assert len(files) == 1 and key not in files[0].read_bytes()  # stored wrapped by the master key
    with pytest.raises(KeyMissing, match="never destroyed"):  # tenants' keys are apart, and a key
        store.data_key("other", "memory/m1")  # never in the store is not one that was destroyed
    assert store.destroy("acme", "memory/m1") and not store.destroy("acme", "memory/m1")
    assert store.data_key("acme", "memory/m1") is None
    assert KeyStore(tmp_path).data_key("acme", "memory/m1") is None
    with pytest.raises(KeyErased):
        KeyStore(tmp_path).data_key("acme", "memory/m1", create=True)
    assert ReadOnlyKeys(store).data_key("acme", "memory/m2", create=True) is None


def test_the_cache_of_unwrapped_keys_is_bounded_and_a_key_it_dropped_reads_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(keystore, "KEY_CACHE", 3)
    store = KeyStore(tmp_path)
    made = [store.data_key("acme", f"memory/m{i}", create=True) for i in range(5)]
    assert store.data_key("acme", "memory/m3") == made[3]  # used: kept over the older ones
    store.data_key("acme", "memory/m5", create=True)
    assert list(store._cache) == [("acme", "memory/m4"), ("acme", "memory/m3"), ("acme", "memory/m5")]
    assert [store.data_key("acme", f"memory/m{i}") for i in range(5)] == made  # dropped: read again


def records(lines: list[dict[str, Any]], keys: KeyStore) -> list[bytes]:
    good, bad = Pipeline(keys=keys).write_many(list(enumerate(lines)))
    assert not bad, bad
    return [f.value for _, f in good]


def feed(stores: TenantStores, values: list[bytes]) -> list[Status]:
    async def sink(*_: Any) -> None:
        raise AssertionError("nothing here is dead-lettered")

    out = []
    for offset, value in enumerate(values):
        rec = projector.Record(b"acme", value, [], Position(0, offset, 1_764_547_200_000 + offset))
        out.append(asyncio.run(projector.handle_record(rec, stores, sink, partitions=1)).outcome.status)
    return out


def test_forgetting_destroys_the_key_and_a_rebuild_then_equals_the_live_store(tmp_path: Path) -> None:
    keys = KeyStore(tmp_path / "keys")
    target = remembered(
        "t1", label="ROAS target for Kestrel-77", content="Keep ROAS above 3 for Kestrel-77",
        memory_class="PerformanceTargetMemory", properties={"metric": "roas", "goal": 3.0},
    )  # fmt: skip
    lines = [
        envelope("MemoryRemembered", target),
        envelope("MemoryRevised", {"memory_id": "t1", "changes": {"label": "Kestrel-77 ROAS"}}),
        envelope("MemoryRemembered", remembered("k1", label="kept", content="a memory that stays")),
    ]
    values = records(lines, keys)
    assert not any(b"Kestrel-77" in v for v in values)
    live = TenantStores(tmp_path / "live", keys=keys)
    assert feed(live, values) == [Status.APPLIED] * 3
    graph = live.get("acme")
    assert graph is not None and (get_memory(graph, "t1") or {})["label"] == "Kestrel-77 ROAS"
    forget = records([envelope("MemoryForgotten", {"memory_id": "t1", "reason": "gdpr"})], keys)
    assert feed(live, [*values, *forget])[-1] is Status.APPLIED
    assert keys.data_key("acme", sealing.key_id("t1")) is None
    assert keys.data_key("acme", sealing.key_id("k1")) is not None
    live_text = export_nquads(graph)
    assert [line for line in live_text.splitlines() if "Kestrel-77" in line] == []
    about = [line for line in live_text.splitlines() if line.startswith("<urn:engram:memory:t1>")]
    assert about and not [line for line in about if "PerformanceTarget" in line or "#metric" in line]
    rebuilt = TenantStores(tmp_path / "rebuilt", keys=ReadOnlyKeys(keys))
    assert feed(rebuilt, [*values, *forget]) == [Status.APPLIED] * 4
    again = rebuilt.get("acme")
    assert again is not None and export_nquads(again) == live_text
    assert (get_memory(again, "k1") or {})["content"] == "a memory that stays"
    with pytest.raises(Exception, match="forgotten"):
        records([envelope("MemoryRevised", {"memory_id": "t1", "changes": {"label": "back"}})], keys)


def test_a_forget_leaves_no_word_in_the_store_files_and_vacuum_changes_no_fact(tmp_path: Path) -> None:
    keys = KeyStore(tmp_path / "keys")
    secret = remembered("s1", label="Okapi-91 plan", content="Okapi-91 stays confidential")
    values = records([envelope("MemoryRemembered", secret)], keys)
    stores = TenantStores(tmp_path / "tenants", keys=keys)

    def hits() -> int:
        files = [p for p in (tmp_path / "tenants" / "acme").rglob("*") if p.is_file()]
        return sum(p.read_bytes().count(b"Okapi-91") for p in files)

    assert feed(stores, values) == [Status.APPLIED]
    assert hits() > 0  # the scan sees the words while the memory stands
    values += records([envelope("MemoryForgotten", {"memory_id": "s1", "reason": "gdpr"})], keys)
    assert feed(stores, values)[-1] is Status.APPLIED
    assert hits() == 0  # the projector rewrote the store as it applied the forget
    graph = stores.get("acme")
    assert graph is not None
    before = export_nquads(graph)
    assert "Okapi-91" not in before
    del graph  # the store has one opener: vacuum's
    assert stores.vacuum("acme") > 0
    again = stores.get("acme")
    assert again is not None and export_nquads(again) == before
    del again
    tick = records([envelope("ClockTicked", {"now": "2026-12-01T00:00:00Z"})], keys)
    assert feed(stores, [*values, *tick])[-1] is Status.APPLIED


def test_an_erasure_a_crash_cut_short_completes_when_the_store_is_next_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = KeyStore(tmp_path / "keys")
    secret = remembered("s1", label="Okapi-92 plan", content="Okapi-92 stays confidential")
    values = records([envelope("MemoryRemembered", secret)], keys)
    values += records([envelope("MemoryForgotten", {"memory_id": "s1", "reason": "gdpr"})], keys)

    async def crash(self: TenantStores, tenant: str) -> None:
        raise SystemExit("killed between the forget's commit and its erasure")

    monkeypatch.setattr(TenantStores, "erase", crash)
    stores = TenantStores(tmp_path / "tenants", keys=keys)
    with pytest.raises(SystemExit):
        feed(stores, values)
    stores.close()
    del stores
    monkeypatch.undo()

    def hits() -> int:
        files = [p for p in (tmp_path / "tenants" / "acme").rglob("*") if p.is_file()]
        return sum(p.read_bytes().count(b"Okapi-92") for p in files)

    assert hits() > 0 and (tmp_path / "tenants" / "acme" / "erasing").exists()
    gc.collect()
    reopened = TenantStores(tmp_path / "tenants", keys=keys).get("acme")
    assert reopened is not None and hits() == 0
    assert not (tmp_path / "tenants" / "acme" / "erasing").exists()
    assert "Okapi-92" not in export_nquads(reopened)


def feed_batch(stores: TenantStores, values: list[bytes], first: int = 0) -> list[Status]:
    """``values`` as one batch of the projector (one run of the tenant: planned, then committed)."""

    async def sink(*_: Any) -> None:
        raise AssertionError("nothing here is dead-lettered")

    recs = [
        projector.Record(b"acme", value, [], Position(0, first + n, 1_764_547_200_000 + n))
        for n, value in enumerate(values)
    ]
    results = asyncio.run(projector.handle_records(recs, stores, sink, partitions=1))
    return [r.outcome.status for r in results]


@pytest.mark.parametrize("batched", [False, True], ids=["apart", "one-batch"])
def test_forgetting_an_extracted_memory_destroys_its_evidence_turns_keys(
    tmp_path: Path, batched: bool
) -> None:
    keys = KeyStore(tmp_path / "keys")
    turn = {
        t: keys.data_key("acme", sealing.turn_key_id("c1", t), create=True) for t in ("c1-1", "c1-2", "c1-3")
    }
    assert all(turn.values())
    extracted = remembered(
        "x1", confidence=0.8, evidence={"conversation_id": "c1", "turn_ids": ["c1-1", "c1-2"]}
    )
    lines = [
        envelope("MemoryRemembered", extracted, source="extraction"),
        envelope("MemoryRemembered", remembered("k1", label="kept", content="a memory that stays")),
    ]
    forget = [envelope("MemoryForgotten", {"memory_id": "x1", "reason": "gdpr"})]
    stores = TenantStores(tmp_path / "live", keys=keys)
    if batched:  # remembered and forgotten in one run: its evidence is read from the run's facts
        assert feed_batch(stores, records([*lines, *forget], keys)) == [Status.APPLIED] * 3
    else:
        assert feed_batch(stores, records(lines, keys)) == [Status.APPLIED] * 2
        assert keys.data_key("acme", sealing.turn_key_id("c1", "c1-1")) is not None
        assert feed_batch(stores, records(forget, keys), first=2) == [Status.APPLIED]
    assert keys.data_key("acme", sealing.key_id("x1")) is None
    assert keys.data_key("acme", sealing.turn_key_id("c1", "c1-1")) is None
    assert keys.data_key("acme", sealing.turn_key_id("c1", "c1-2")) is None
    assert keys.data_key("acme", sealing.turn_key_id("c1", "c1-3")) == turn["c1-3"]  # not its evidence
    assert keys.data_key("acme", sealing.key_id("k1")) is not None
    graph = stores.get("acme")
    assert graph is not None and get_memory(graph, "x1") is not None  # the node and its ids stay


def test_a_key_missing_from_the_key_store_holds_the_record_then_dead_letters_it_and_erases_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not a forgotten memory (no tombstone), so never projected as erased: the projector waits
    for the key, saying why, then dead-letters the record with the reason and goes on, so one
    record no key store holds does not stop its partition for good (issue 34)."""
    keys = KeyStore(tmp_path / "keys")
    values = records(
        [envelope("MemoryRemembered", remembered(m, label=f"label {m}")) for m in ("m1", "m2")], keys
    )
    keys._path("acme", "memory/m1").rename(tmp_path / "aside")  # a partial restore lost m1's key
    keys._cache.clear()
    waited: list[float] = []

    async def wait(seconds: float) -> None:
        waited.append(seconds)

    monkeypatch.setattr(projector.asyncio, "sleep", wait)
    told: list[str | None] = []
    letters: list[str] = []

    async def sink(_record: Any, reason: str) -> None:
        letters.append(reason)

    batch = [
        projector.Record(b"acme", v, [], Position(0, offset, 1_764_547_200_000 + offset))
        for offset, v in enumerate(values)
    ]
    stores = TenantStores(tmp_path / "stores", keys=keys)
    results = asyncio.run(
        projector.handle_batch_with_retries(
            batch, stores, sink, partitions=1, hold=told.append, key_wait_s=3 * projector.LOCKED_RETRY_S
        )
    )
    assert [r.outcome.status for r in results] == [Status.REJECTED, Status.APPLIED], results
    assert sum(waited) == 3 * projector.LOCKED_RETRY_S  # waited, then gave up
    assert told[0] is not None and "not in the key store" in told[0] and told[-1] is None
    assert len(letters) == 1 and "did not come back in 15s (ENGRAM_KEY_WAIT_S)" in letters[0]
    graph = stores.get("acme")
    assert graph is not None
    assert get_memory(graph, "m1") is None  # absent (the log keeps it), not "(erased)"
    assert get_memory(graph, "m2")["label"] == "label m2"  # and the partition went on
