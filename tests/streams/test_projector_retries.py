"""The projector's policy for unexpected errors: retry, then dead-letter and move on."""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path
from typing import Any

import pytest
from engram.projections.stores import TenantStores
from engram.projections.tenant_graph import Status, TenantGraph
from engram.schemas.events import Position
from engram.streams import codec, projector

from tests.factories import event, remembered


class FlakyStores(TenantStores):
    """Real stores whose first ``failures`` lookups fail the way a full disk would."""

    def __init__(self, root: Path, failures: int) -> None:
        super().__init__(root)
        self.failures = failures

    def get(self, tenant: str, *, create: bool = False) -> TenantGraph | None:
        if self.failures > 0:
            self.failures -= 1
            raise OSError("No space left on device")
        return super().get(tenant, create=create)


def record(offset: int = 0) -> projector.Record:
    ev = event("MemoryRemembered", remembered("m1"))
    return projector.Record(b"acme", codec.encode(ev), codec.headers(ev), Position(0, offset, 1))


@pytest.fixture(autouse=True)
def no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    async def instant(_: float) -> None:
        return None

    monkeypatch.setattr(projector.asyncio, "sleep", instant)


def run(stores: TenantStores, rec: projector.Record) -> tuple[projector.Result, list[str]]:
    letters: list[str] = []

    async def sink(_record: Any, reason: str) -> None:
        letters.append(reason)

    return asyncio.run(projector.handle_with_retries(rec, stores, sink, partitions=1)), letters


def test_a_transient_error_is_retried_and_nothing_is_dead_lettered(tmp_path: Path) -> None:
    stores = FlakyStores(tmp_path, failures=2)
    result, letters = run(stores, record())
    assert result.outcome.status is Status.APPLIED and letters == []


def test_a_persistent_error_is_dead_lettered_after_the_last_attempt(tmp_path: Path) -> None:
    stores = FlakyStores(tmp_path, failures=projector.MAX_ATTEMPTS)
    result, letters = run(stores, record())
    assert result.outcome.status is Status.REJECTED
    assert letters == [
        f"projection error after {projector.MAX_ATTEMPTS} attempts: OSError: No space left on device"
    ]


def test_a_store_another_process_holds_is_waited_for_never_dead_lettered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lock is the deployment's fault, not the record's: dead-lettering would skip a valid
    event for good. The record waits (well past MAX_ATTEMPTS) and applies once the lock is free."""
    holder = TenantStores(tmp_path)
    assert holder.get("acme", create=True) is not None  # a real RocksDB lock, held here
    waits: list[float] = []

    async def wait(seconds: float) -> None:
        waits.append(seconds)
        if len(waits) == 3 * projector.MAX_ATTEMPTS:  # the other opener goes away
            holder.close()
            holder._open.clear()
            gc.collect()

    monkeypatch.setattr(projector.asyncio, "sleep", wait)
    result, letters = run(TenantStores(tmp_path), record())
    assert letters == [] and result.outcome.status is Status.APPLIED
    assert waits == [projector.LOCKED_RETRY_S] * (3 * projector.MAX_ATTEMPTS)
