"""The live data's compiled path (``streams.live_path``) against the projection in Python.

The same records go through the projector twice, batch by batch: once with the compiled core (which
takes the runs of plainly valid live data) and once with ``ENGRAM_RULE_ENGINE=reference`` (Python
throughout). After every batch the outcomes and every quad of the two stores (asserted, inferred,
the event records and the checkpoint) must be equal: where the core takes a run it decides it as
Python does, and where it does not, Python decides.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from engram.projections import batch as planning
from engram.projections.knowledge import load_knowledge
from engram.projections.rules.core import engine_for
from engram.projections.stores import TenantStores
from engram.schemas.checks import InvalidEvent
from engram.schemas.events import Position, event_from_json
from engram.streams import codec, live_path
from engram.streams.objects import LocalObjects
from engram.streams.projector import Record, handle_records
from engram.streams.snapshots import Snapshots
from engram.streams.topics import partition_for
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

PARTITIONS = 4
SNAPSHOT_EVERY = 7
KNOWLEDGE = load_knowledge()
REFERENCE = dataclasses.replace(KNOWLEDGE, engine=engine_for(KNOWLEDGE.engine.program, "reference"))

floats = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False, width=64),
    st.sampled_from([0.0, -0.0, 3.0, 1e16, 1e-5, 0.0001, 1.5e-7, 123456789012345.0, 2.0000000000000004]),
)
GOOD_PERIODS = [
    "unspecified",
    "2026",
    "2026-Q4",
    "2026-11",
    "2026-W49",
    "2026-W53",
    "2026-11-30",
    "2024-02-29",
]
periods = st.one_of(
    st.sampled_from([*GOOD_PERIODS, "2025-W53"]),
    st.sampled_from(
        ["2024-02-29", "2023-02-29", "2026-13", "2026-Q5", "1899-12", "9999-12", "26-11", "2026-W00"]
    ),
    st.from_regex(r"\A[0-9]{4}(-(Q[0-9]|W[0-9]{2}|[0-9]{2}(-[0-9]{2})?))?\Z"),
)
BASE = datetime(2026, 12, 1, tzinfo=UTC)
times = st.integers(0, 400 * 86_400_000).map(lambda ms: (BASE + timedelta(milliseconds=ms)).isoformat())
names = st.one_of(st.sampled_from(["roas", "cpa", "meta", "google"]), st.from_regex(r"\A[A-Za-z_0-9]{1,6}\Z"))


ODD = ("memory", "actor", "role", "source", "period", "currency", "amount", "reused")


@st.composite
def live_event(draw: st.DrawFn, tenants: list[str]) -> dict[str, Any]:
    """Mostly plainly valid live data (runs the core takes), one in fifteen with one oddity: what the
    core must leave to Python (refused there, or a memory among the live data, or an id reused)."""
    odd = draw(st.sampled_from(ODD)) if draw(st.integers(0, 14)) == 0 else None
    kind = draw(st.sampled_from(["KpiObserved", "KpiObserved", "SpendObserved", "ClockTicked"]))
    good_periods = periods if odd == "period" else st.sampled_from(GOOD_PERIODS)
    if odd == "memory":
        kind = "MemoryRemembered"
        payload: dict[str, Any] = {
            "label": "a",
            "content": "b",
            "kind": "fact",
            "scope": "company",
            "importance": 3,
        }
    elif kind == "KpiObserved":
        payload = {"metric": draw(names), "value": draw(floats), "period": draw(good_periods)}
    elif kind == "SpendObserved":
        amount = draw(floats) if odd == "amount" else abs(draw(floats))
        currency = (
            draw(st.sampled_from(["usd", "US", "EURO"]))
            if odd == "currency"
            else draw(st.sampled_from(["USD", "EUR"]))
        )
        payload = {
            "platform": draw(names),
            "amount": amount,
            "currency": currency,
            "period": draw(good_periods),
        }
    else:
        payload = {"now": draw(times)}
    role = "operator" if kind == "MemoryRemembered" else draw(st.sampled_from(["pipeline", "operator"]))
    body: dict[str, Any] = {
        "type": kind,
        "tenant": draw(st.sampled_from(tenants)),
        "source": draw(st.sampled_from(["pipeline", "operator", "system", "agent"])),
        "actor": {
            "id": draw(
                st.sampled_from([" ", "\x1c", "\u2003"])
                if odd == "actor"
                else st.sampled_from(["p", "feed-1", "é"])
            ),
            "role": draw(st.sampled_from(["user", "agent", "auditor", "nobody"])) if odd == "role" else role,
        },
        "payload": payload,
    }
    if odd == "source":
        body["actor"]["on_behalf_of"] = "sam"
    if draw(st.booleans()):
        body["occurred_at"] = draw(times)
    if draw(st.integers(0, 3)) == 0:
        body["purpose"] = draw(st.text(max_size=8))
    if draw(st.integers(0, 3)) == 0:
        body["correlation_id"] = draw(st.text(max_size=8))
    if odd == "reused":  # an id used before: the same event again, or another one
        body["event_id"] = draw(
            st.sampled_from(["7a0c5e6e-4f4e-4d35-9f5e-2c1d6f3b9a01", "7a0c5e6e-4f4e-4d35-9f5e-2c1d6f3b9a02"])
        )
    return body


def records_of(bodies: list[dict[str, Any]]) -> list[Record]:
    out, offsets = [], {p: 0 for p in range(PARTITIONS)}
    for i, body in enumerate(bodies):
        try:
            event = event_from_json(body)
        except InvalidEvent:
            continue  # refused at the edge: never in the log
        part = partition_for(event.tenant, PARTITIONS)
        position = Position(part, offsets[part], 1_764_547_200_000 + i)
        offsets[part] += 1
        out.append(Record(event.tenant.encode(), codec.encode(event), [], position))
    return out


async def _sink(*_: Any) -> None:
    return None


def state(stores: TenantStores, tenant: str) -> set[str]:
    graph = stores.get(tenant)
    return set() if graph is None else {str(q) for q in graph.store.quads_for_pattern(None, None, None, None)}


def run(
    tmp: Path,
    bodies: list[dict[str, Any]],
    cuts: list[int],
    tenants: list[str],
    min_live: int = 1,
    every: int = SNAPSHOT_EVERY,
) -> int:
    """Both paths over the same batches, equal after each; how many groups the core planned. Every
    stretch of live data is the core's (``min_live``), so the cuts between the two paths are tried
    wherever they can fall."""
    records = records_of(bodies)
    core = TenantStores(tmp / "core", knowledge=KNOWLEDGE)
    python = TenantStores(tmp / "python", knowledge=REFERENCE)
    for stores, name in ((core, "core"), (python, "python")):  # as a server has them: runs cut at snapshots
        stores.snapshots = Snapshots(LocalObjects(tmp / f"objects-{name}"), every=every)
    took = 0
    plan_live_group = planning.plan_live_group

    def counted(*args: Any) -> Any:
        nonlocal took
        planned = plan_live_group(*args)
        took += planned is not None
        return planned

    planning.plan_live_group = counted
    shortest, live_path.MIN_LIVE_RUN = live_path.MIN_LIVE_RUN, min_live
    try:
        start = 0
        for cut in [*cuts, len(records)]:
            batch, start = records[start : start + max(cut, 1)], start + max(cut, 1)
            if not batch:
                break
            ours = asyncio.run(handle_records(batch, core, _sink, partitions=PARTITIONS))
            theirs = asyncio.run(handle_records(batch, python, _sink, partitions=PARTITIONS))
            assert [(r.outcome.status, r.outcome.reason) for r in ours] == [
                (r.outcome.status, r.outcome.reason) for r in theirs
            ]
            for tenant in tenants:
                assert state(core, tenant) == state(python, tenant)
    finally:
        planning.plan_live_group = plan_live_group
        live_path.MIN_LIVE_RUN = shortest
        core.close()
        python.close()
    return took


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    bodies=st.lists(live_event(["t1", "t2"]), min_size=6, max_size=40),
    cuts=st.lists(st.integers(1, 8), min_size=2, max_size=6),
)
def test_the_core_plans_live_data_as_python_does(
    tmp_path_factory: pytest.TempPathFactory, bodies, cuts
) -> None:
    run(tmp_path_factory.mktemp("live"), bodies, cuts, ["t1", "t2"])


FEED = {"source": "pipeline", "actor": {"id": "feed", "role": "pipeline"}, "tenant": "t1"}
MEMORY = {
    "type": "MemoryRemembered",
    "tenant": "t1",
    "source": "operator",
    "actor": {"id": "dana", "role": "operator"},
    "payload": {"label": "a", "content": "b", "kind": "fact", "scope": "company", "importance": 3},
}


def kpis(n: int, metric: str, period: str) -> list[dict[str, Any]]:
    """``n`` updates of one KPI by the feed, each a value of its own (so each its own event)."""
    return [
        {**FEED, "type": "KpiObserved", "payload": {"metric": metric, "value": 2 + i / 100, "period": period}}
        for i in range(n)
    ]


def test_the_core_takes_a_run_of_live_data_and_leaves_a_memory_to_python(tmp_path: Path) -> None:
    feed = kpis(12, "roas", "2026-12")
    # the first run makes the store (Python); then live data alone (the core); then a memory among
    # it, with too few live records beside it to be worth a commit of their own
    took = run(
        tmp_path, [*feed, MEMORY, feed[0]], [1, 9], ["t1"], min_live=live_path.MIN_LIVE_RUN, every=1000
    )
    assert took == 1


def test_a_memory_among_live_data_cuts_the_run(tmp_path: Path) -> None:
    """Live stretches of at least ``MIN_LIVE_RUN`` records either side of a memory are the core's."""
    feed = kpis(24, "cpa", "2026-W49")
    mixed = [feed[0], *feed[1:11], MEMORY, *feed[11:21], MEMORY, *feed[21:]]
    assert 3 < live_path.MIN_LIVE_RUN <= 10  # stretches of 10, 10 and 3: the last is too short
    assert run(tmp_path, mixed, [1], ["t1"], min_live=live_path.MIN_LIVE_RUN, every=1000) == 2


def test_the_envelope_is_the_layout_the_core_reads() -> None:
    """A change of the Envelope or of a live-data record must change the core's reader too: with
    another layout it reads nothing (every run through Python), which this test would show."""
    assert live_path.live_codec() is not None
    spelt, sources, branches = live_path.layout()
    assert len(set(branches)) == 3 and "pipeline" in sources
    assert list(itertools.islice(spelt, 2)) == ["event_id:string", "tenant:string"]
