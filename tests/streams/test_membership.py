"""The consumer group's pure parts: which group a process joins, the key store it must share, and
what ``Membership`` says about a tenant's owner through a rebalance (Faust's assignor faked: the
real one runs in tests/streams/test_group.py)."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from engram.projections.batch import Outcome, Status
from engram.projections.progress import Progress
from engram.streams.group import Membership, NotShared, check_shared_keys, projector_group
from engram.streams.objects import LocalObjects
from engram.streams.topics import partition_for
from faust.types import TP

from engram.settings import Settings, load_settings

TOPIC = "engram.events"


def settings(tmp_path: Path, name: str, **extra: Any) -> Settings:
    return load_settings(data_dir=tmp_path / name, **extra)


def test_memory_mode_processes_sharing_an_object_store_share_one_group(tmp_path: Path) -> None:
    objects = LocalObjects(tmp_path / "objects")
    a, b = settings(tmp_path, "a", store="memory"), settings(tmp_path, "b", store="memory")
    first = projector_group(a, objects)
    assert first == a.projector_group()  # the first keeps its own data directory's group (its offsets)
    assert projector_group(b, objects) == first != b.projector_group()
    other = LocalObjects(tmp_path / "other")  # another object store: another group
    assert projector_group(b, other) == b.projector_group() != first


def test_processes_starting_at_once_agree_on_the_group_and_the_key_store(tmp_path: Path) -> None:
    objects = LocalObjects(tmp_path / "objects")
    group = [settings(tmp_path, f"p{i}", store="memory", keys_dir=tmp_path / "keys") for i in range(3)]
    with ThreadPoolExecutor(3) as pool:  # as compose starts its workers
        groups = set(pool.map(lambda s: projector_group(s, objects), group))
        list(pool.map(lambda s: check_shared_keys(s, objects), group))  # none refused
    assert len(groups) == 1


def test_disk_mode_keeps_a_group_per_data_directory(tmp_path: Path) -> None:
    objects = LocalObjects(tmp_path / "objects")
    a, b = settings(tmp_path, "a"), settings(tmp_path, "b")
    assert projector_group(a, objects) == a.projector_group() != projector_group(b, objects)
    assert objects.list() == []  # nothing claimed in the object store


def test_a_process_with_another_key_store_is_refused(tmp_path: Path) -> None:
    objects = LocalObjects(tmp_path / "objects")
    shared = tmp_path / "keys"
    check_shared_keys(settings(tmp_path, "a", store="memory", keys_dir=shared), objects)
    check_shared_keys(settings(tmp_path, "b", store="memory", keys_dir=shared), objects)  # same: fine
    with pytest.raises(NotShared, match="ENGRAM_KEYS_DIR"):
        check_shared_keys(settings(tmp_path, "c", store="memory"), objects)  # its own <data dir>/keys
    check_shared_keys(settings(tmp_path, "d"), objects)  # disk mode joins no group: no check


class Assignor:
    def __init__(self) -> None:
        self.distribution: dict[str, dict[str, list[int]]] = {}

    def external_topics_metadata(self) -> dict[str, dict[str, list[int]]]:
        return self.distribution


def tps(partitions: list[int]) -> set[TP]:
    return {TP(TOPIC, p) for p in partitions}


def test_membership_names_each_tenants_owner_and_waits_through_a_rebalance() -> None:
    async def run() -> None:
        progress = Progress()
        me, other = "http://a:8000", "http://b:8000"
        m = Membership(load_settings(), progress, me)
        m.partitions, m.assignor = 4, Assignor()
        here = next(t for t in (f"t{i}" for i in range(50)) if partition_for(t, 4) in (0, 1))
        there = next(t for t in (f"t{i}" for i in range(50)) if partition_for(t, 4) == 2)
        assert await m.owner(here, 0.05) is None  # no assignment yet: wait, then none
        assert m.owns(here) and m.owns(there)  # before the first assignment nothing is refused

        m.assignor.distribution = {me: {TOPIC: [0, 1, 2, 3]}}
        m.assigned(tps([0, 1, 2, 3]))  # alone in the group: nothing to catch up
        assert await m.owner(there, 0.05) == me

        m.revoked(tps([0, 1, 2, 3]))
        assert await m.owner(here, 0.05) is None and not m.owns(here)  # moving
        m.assignor.distribution = {me: {TOPIC: [0, 1]}, other: {TOPIC: [2, 3]}}
        m.assigned(tps([0, 1]))
        assert await m.owner(here, 0.05) == me and await m.owner(there, 0.05) == other
        assert m.owns(here) and not m.owns(there)
        assert m.describe()["members"] == [me, other]

        # partition 2 comes back: catching up until the projector handles what the log held
        m.revoked(tps([0, 1]))
        m.assignor.distribution = {me: {TOPIC: [0, 1, 2, 3]}}
        m._ask_targets = _never  # type: ignore[method-assign]
        m.assigned(tps([0, 1, 2, 3]))
        m._targets[2] = 10  # the end offset when it was assigned
        m._targets[3] = -1  # nothing to catch up on
        waiting = asyncio.ensure_future(m.owner(there, 2.0))
        await asyncio.sleep(0.1)
        assert not waiting.done() and await m.owner(here, 0.05) == me  # partition 0 was kept
        progress.record("x", 2, 9, Outcome(Status.APPLIED))  # the last record it held
        m.handled()
        assert await waiting == me
        assert m.describe()["catching_up"] == []

    asyncio.run(run())


async def _never(partitions: list[int]) -> None:
    return None
