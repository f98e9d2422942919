"""Regressions of the hostile-input probe (issue 6), one per defect class, on real stores.

Each test names the item of the issue it keeps fixed. Events go through the same functions the
projector and replay run (``handle_record``, ``TenantGraph.apply``); nothing here is mocked.
"""

from __future__ import annotations

import asyncio
import json
import math
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from engram.projections.read import get_memory
from engram.projections.stores import TenantStores
from engram.projections.tenant_graph import Status, TenantGraph
from engram.projections.terms import ASSERTED, CLOCK, INFERRED, e, time_literal
from engram.projections.terms import value_literal as literal_of
from engram.schemas import payloads as ev
from engram.schemas import vocabulary as v
from engram.schemas.checks import InvalidEvent
from engram.schemas.events import Actor, Event, Position, content_digest, event_from_json
from engram.streams import codec, projector
from engram.streams.pipeline import MAX_EVENT_BYTES, parse_lines
from engram.streams.topics import partition_for
from hypothesis import given, settings
from hypothesis import strategies as st
from pyoxigraph import NamedNode, Quad, Store

from tests.factories import envelope, event, remembered, unchecked_event
from tests.tenant import Tenant

NOBODY = {"user_id": None, "team_ids": []}
ID = "00000000-0000-4000-8000-{:012x}".format


# -- 1. one canonical form per literal -----------------------------------------------------------


def _stored(term: Any) -> str:
    """What the store gives back for ``term``: the canonical form."""
    store = Store()
    store.add(Quad(NamedNode("urn:s"), NamedNode("urn:p"), term))
    return str(next(iter(store)).object)


@settings(max_examples=300, deadline=None)
@given(
    st.datetimes(min_value=datetime(1970, 1, 2), max_value=datetime(9999, 1, 1), timezones=st.just(UTC)).map(
        lambda d: d.replace(microsecond=d.microsecond // 1000 * 1000)
    )
)
def test_time_literals_are_written_in_the_stores_canonical_form(when: datetime) -> None:
    lit = time_literal(when)
    assert str(lit) == _stored(lit)
    assert time_literal(when.astimezone(timezone_plus_5())) == lit  # one instant, one literal


def timezone_plus_5() -> Any:
    from datetime import timezone

    return timezone(timedelta(hours=5))


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.floats(allow_nan=False, allow_infinity=False),
        st.integers(-(2**63), 2**63 - 1),
        st.booleans(),
        st.text(),
    )
)
def test_value_literals_are_written_in_the_stores_canonical_form(value: Any) -> None:
    try:
        value.encode("utf-8") if isinstance(value, str) else None
    except UnicodeEncodeError:
        return  # refused by validation before it can reach a literal (tested below)
    lit = literal_of(value)
    assert str(lit) == _stored(lit)


def test_value_literals_refuse_non_finite_numbers() -> None:
    for bad in (math.nan, math.inf, -math.inf):
        with pytest.raises(InvalidEvent, match="finite"):
            literal_of(bad)


def test_two_identical_clock_ticks_keep_the_clock(tenant: Tenant) -> None:
    tick = {"now": "2026-12-01T10:00:00.510Z"}
    assert tenant.apply(event("ClockTicked", tick, event_id=ID(1))) is Status.APPLIED
    assert tenant.apply(event("ClockTicked", tick, event_id=ID(2))) is Status.APPLIED
    assert tenant.objects(CLOCK, e("now")) == [
        str(time_literal(datetime(2026, 12, 1, 10, 0, 0, 510_000, UTC)))
    ]


def test_a_kpi_posted_twice_with_the_same_time_keeps_observed_at(tenant: Tenant) -> None:
    kpi = {"metric": "roas", "value": 2.5, "period": "2026-12"}
    at = "2026-12-01T10:00:00.100Z"
    tenant.apply(event("KpiObserved", kpi, event_id=ID(1), occurred_at=at))
    tenant.apply(event("KpiObserved", kpi, event_id=ID(2), occurred_at=at))
    k = NamedNode("urn:engram:kpi:roas:2026-12")
    assert len(tenant.objects(k, e("observedAt"))) == 1 and len(tenant.objects(k, e("value"))) == 1


def test_revising_expiry_to_its_current_value_keeps_it(tenant: Tenant) -> None:
    tenant.apply(event("MemoryRemembered", remembered("m1", expires_at="2027-01-01T00:00:00.500Z")))
    same = {"memory_id": "m1", "changes": {"expires_at": "2027-01-01T00:00:00.5Z"}}
    assert tenant.apply(event("MemoryRevised", same)) is Status.APPLIED
    assert get_memory(tenant.graph, "m1")["expires_at"] == "2027-01-01T00:00:00.5Z"  # type: ignore[index]


def test_remember_then_revise_at_the_same_append_time_keeps_updated_at(tenant: Tenant) -> None:
    tenant.apply(event("MemoryRemembered", remembered("m1")), timestamp_ms=1_764_547_200_510)
    tenant.apply(
        event("MemoryRevised", {"memory_id": "m1", "changes": {"label": "x"}}), timestamp_ms=1_764_547_200_510
    )
    m = get_memory(tenant.graph, "m1")
    assert m is not None and m["updated_at"] == "2025-12-01T00:00:00.51Z"


# -- 2. exactly once by event id -----------------------------------------------------------------


def test_the_same_event_id_twice_changes_nothing_whatever_its_offset(tenant: Tenant) -> None:
    high = event("KpiObserved", {"metric": "roas", "value": 2.0, "period": "2026-11"}, event_id=ID(1))
    low = event("KpiObserved", {"metric": "roas", "value": 4.0, "period": "2026-11"}, event_id=ID(2))
    assert tenant.apply(high) is Status.APPLIED
    assert tenant.apply(low) is Status.APPLIED
    before = facts(tenant.graph)
    again = event("KpiObserved", {"metric": "roas", "value": 2.0, "period": "2026-11"}, event_id=ID(1))
    assert tenant.apply(again) is Status.SKIPPED and "already applied" in tenant.reason
    assert facts(tenant.graph) == before
    assert tenant.objects(NamedNode("urn:engram:kpi:roas:2026-11"), e("value")) == [str(literal_of(4.0))]


def facts(graph: TenantGraph) -> set[Quad]:
    return {*graph.quads(ASSERTED), *graph.quads(INFERRED)}


def test_a_retry_with_a_new_default_time_is_the_same_event(tenant: Tenant) -> None:
    line = envelope("KpiObserved", {"metric": "roas", "value": 2.0, "period": "2026-11"})
    first, second = event_from_json(dict(line)), event_from_json(dict(line))
    assert first.event_id == second.event_id  # produce's default id: a uuid5 of the line
    assert tenant.apply(first) is Status.APPLIED
    assert tenant.apply(second) is Status.SKIPPED


def test_the_same_id_with_another_named_time_is_a_conflict_and_the_same_named_time_a_retry(
    tenant: Tenant,
) -> None:
    kpi = {"metric": "roas", "value": 2.0, "period": "2026-11"}
    at = envelope("KpiObserved", kpi, event_id=ID(30), occurred_at="2026-11-01T00:00:00Z")
    assert tenant.apply(event_from_json(dict(at))) is Status.APPLIED
    assert tenant.apply(event_from_json(dict(at))) is Status.SKIPPED
    later = {**at, "occurred_at": "2026-11-02T00:00:00Z"}
    assert tenant.apply(event_from_json(later)) is Status.REJECTED
    assert "already used for a different event" in tenant.reason
    unnamed = {k: val for k, val in at.items() if k != "occurred_at"}
    assert tenant.apply(event_from_json(unnamed)) is Status.REJECTED  # a time named once, not now


def test_a_field_at_its_avro_default_is_not_part_of_the_digest() -> None:
    """So a schema that gains a field with a default keeps old events' digests (and retries)."""
    base = event("MemoryRemembered", remembered("m1"), event_id=ID(31))
    p = base.payload
    assert isinstance(p, ev.MemoryRemembered)
    explicit = replace(base, payload=replace(p, confidence=1.0, on_conflict=v.OnConflict.ASK), purpose=None)
    assert content_digest(explicit) == content_digest(base)
    assert content_digest(replace(base, purpose="audit")) != content_digest(base)
    assert content_digest(replace(base, payload=replace(p, confidence=0.5))) != content_digest(base)
    record = base.to_avro()
    record.pop("purpose"), record.pop("occurred_at_given")  # as an older writer had it
    assert content_digest(Event.from_avro({**record, "purpose": None})) == content_digest(base)


def test_an_event_id_reused_for_different_content_is_a_conflict(tenant: Tenant) -> None:
    tenant.apply(event("MemoryRemembered", remembered("m1"), event_id=ID(7)))
    reused = event("MemoryRemembered", remembered("m2"), event_id=ID(7))
    assert tenant.apply(reused) is Status.REJECTED
    assert "already used for a different event" in tenant.reason
    assert get_memory(tenant.graph, "m2") is None


def test_a_taken_memory_id_is_a_conflict(tenant: Tenant) -> None:
    tenant.apply(event("MemoryRemembered", remembered("m1"), event_id=ID(1)))
    assert (
        tenant.apply(event("MemoryRemembered", remembered("m1", label="other"), event_id=ID(2)))
        is Status.REJECTED
    )
    assert "already exists" in tenant.reason


def test_event_ids_are_canonical() -> None:
    upper = event("ClockTicked", {"now": "2026-01-01T00:00:00Z"}, event_id=ID(10).upper())
    assert upper.event_id == ID(10)
    raw = unchecked_event(
        ID(10).upper(),
        "acme",
        datetime.now(UTC),
        Actor("a", "b"),
        "system",
        "ClockTicked",
        {"now": datetime.now(UTC)},
    )
    with pytest.raises(InvalidEvent, match="canonical"):
        from engram.schemas.events import validate

        validate(raw)


# -- 3, 5, 6: the projector's decisions ----------------------------------------------------------


def handle(
    stores: TenantStores, key: bytes | None, value: bytes | None, offset: int
) -> tuple[projector.Result, list[str]]:
    letters: list[str] = []

    async def sink(_record: Any, reason: str) -> None:
        letters.append(reason)

    rec = projector.Record(key, value, [], Position(0, offset, 1_764_547_200_000))
    return asyncio.run(projector.handle_with_retries(rec, stores, sink, partitions=1)), letters


def raw_event(ev: Event) -> bytes:
    """Encode without the domain checks, as a hostile producer would."""
    return codec.encode(ev)


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        (b"ghost", b"not avro", "missing C3 01"),
        (b"ghost\n", b"x", "not a tenant id"),
        (b"\xff\xfe", b"x", "not a tenant id"),
        (None, b"x", "not a tenant id"),
        (b"ghost", None, "missing C3 01"),
        (
            b"ghost",
            raw_event(event("KpiObserved", {"metric": "roas", "value": 1.0, "period": "2026-11"})),
            "differs from record key",
        ),
        (
            b"ghost",
            raw_event(
                event("MemoryRevised", {"memory_id": "nope", "changes": {"label": "x"}}, tenant="ghost")
            ),
            "memory nope not found",
        ),
    ],
    # named by what is refused: the encoded events hold the time they were made, and test processes
    # must collect the same ids (pytest-xdist)
    ids=["not-avro", "newline-key", "not-utf8-key", "no-key", "no-value", "other-tenant", "unknown-memory"],
)
def test_a_refused_record_never_creates_a_tenant(
    tmp_path: Path, key: bytes | None, value: bytes | None, reason: str
) -> None:
    stores = TenantStores(tmp_path)
    result, letters = handle(stores, key, value, 0)
    assert result.outcome.status is Status.REJECTED and len(letters) == 1 and reason in letters[0]
    assert stores.tenants() == [] and not (tmp_path / "ghost").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["_refused"]  # where it was refused, no more


def test_a_refused_record_redelivered_after_a_crash_is_dead_lettered_once(tmp_path: Path) -> None:
    first, letters = handle(TenantStores(tmp_path), b"ghost", b"not avro", 7)
    again, letters_again = handle(TenantStores(tmp_path), b"ghost", b"not avro", 7)  # a new process
    assert first.outcome.status is again.outcome.status is Status.REJECTED
    assert len(letters) == 1 and letters_again == []
    _, letters_later = handle(TenantStores(tmp_path), b"ghost", b"not avro", 8)
    assert len(letters_later) == 1  # the next offset is a record of its own


def test_a_record_off_its_tenants_partition_is_refused_and_leaves_the_checkpoint(tmp_path: Path) -> None:
    stores = TenantStores(tmp_path)
    good = codec.encode(event("KpiObserved", {"metric": "roas", "value": 1.0, "period": "2026-11"}))
    letters: list[str] = []

    async def sink(_record: Any, reason: str) -> None:
        letters.append(reason)

    def at(partition: int, offset: int) -> projector.Result:
        rec = projector.Record(b"acme", good, [], Position(partition, offset, 1_764_547_200_000))
        return asyncio.run(projector.handle_with_retries(rec, stores, sink, partitions=4))

    home = partition_for("acme", 4)
    assert at(home, 3).outcome.status is Status.APPLIED
    stray = at((home + 1) % 4, 9)
    assert stray.outcome.status is Status.REJECTED and "the one its key hashes to" in letters[0]
    graph = stores.get("acme")
    assert graph is not None and graph.checkpoint() == Position(home, 3)


def hostile(**payload: Any) -> Event:
    """A KPI event whose payload skips the domain checks (as raw bytes on Kafka would)."""
    base = {"metric": "roas", "value": 1.0, "period": "2026-11"}
    return unchecked_event(
        ID(99),
        "acme",
        datetime(2026, 1, 1, tzinfo=UTC),
        Actor("a", "r"),
        "pipeline",
        "KpiObserved",
        {**base, **payload},
    )


@pytest.mark.parametrize(
    ("ev", "reason"),
    [
        (hostile(metric="roas\n"), "metric must match"),
        (hostile(value=math.nan), "finite"),
        (hostile(value=math.inf), "finite"),
        (
            unchecked_event(
                ID(98),
                "acme",
                datetime(2026, 1, 1, tzinfo=UTC),
                Actor("a", "r"),
                "operator",
                "MemoryRemembered",
                {**remembered("x\n"), "stakeholders": NOBODY},
            ),
            "memory_id must match",
        ),
        (
            unchecked_event(
                ID(97),
                "acme",
                datetime(2026, 1, 1, tzinfo=UTC),
                Actor("a", "r"),
                "operator",
                "MemoryRemembered",
                {**remembered("x", properties={"p\n": 1}), "stakeholders": NOBODY},
            ),
            "property name",
        ),
        (
            unchecked_event(
                ID(96),
                "acme",
                datetime(2026, 1, 1, tzinfo=UTC),
                Actor("a", "r"),
                "operator",
                "StakeholderChanged",
                {"user_id": "u\n", "team_ids": [], "role": "user"},
            ),
            "user_id must match",
        ),
    ],
)
def test_hostile_values_are_dead_lettered_at_once_and_the_tenant_goes_on(
    tmp_path: Path, ev: Event, reason: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    stores = TenantStores(tmp_path)
    assert (
        handle(stores, b"acme", raw_event(event("ClockTicked", {"now": "2026-01-01T00:00:00Z"})), 0)[
            0
        ].outcome.status
        is Status.APPLIED
    )
    attempts = 0
    original = projector.handle_record

    async def counting(*args: Any, **kwargs: Any) -> projector.Result:
        nonlocal attempts
        attempts += 1
        return await original(*args, **kwargs)

    monkeypatch.setattr(projector, "handle_record", counting)
    value = codec.encode(ev)
    result, letters = handle(stores, b"acme", value, 1)
    assert result.outcome.status is Status.REJECTED and attempts == 1, "deterministic: not retried"
    assert len(letters) == 1 and reason in letters[0]
    graph = stores.get("acme")
    assert graph is not None and graph.checkpoint() == Position(0, 1)
    assert (
        handle(stores, b"acme", raw_event(event("ClockTicked", {"now": "2026-01-02T00:00:00Z"})), 2)[
            0
        ].outcome.status
        is Status.APPLIED
    )


def test_a_surrogate_encoded_in_the_avro_bytes_is_dead_lettered(tmp_path: Path) -> None:
    data = codec.encode(hostile(period="SURR"))
    data = data.replace(b"SURR", b"\xed\xa0\x80\x41")  # UTF-8 cannot carry a lone surrogate
    stores = TenantStores(tmp_path)
    result, letters = handle(stores, b"acme", data, 0)
    assert result.outcome.status is Status.REJECTED and "corrupt Avro body" in letters[0]
    assert stores.tenants() == []


# -- 4. trailing bytes ---------------------------------------------------------------------------


def test_a_frame_with_trailing_bytes_is_refused() -> None:
    data = codec.encode(event("ClockTicked", {"now": "2026-01-01T00:00:00Z"}))
    assert codec.decode(data).type == "ClockTicked"
    for extra in (b"\x00", b"garbage", data):
        with pytest.raises(codec.UndecodableEvent, match="unexpected bytes after the Avro record"):
            codec.decode(data + extra)


# -- 6, 7. ids, names and values at the domain layer (produce, Kafka, HTTP all call it) ----------


@pytest.mark.parametrize(
    ("etype", "payload", "extra", "reason"),
    [
        ("MemoryRemembered", remembered("x\n"), {}, "memory_id must match"),
        ("MemoryRemembered", remembered("x", properties={"p\n": 1}), {}, "property name"),
        ("MemoryRemembered", remembered("x", replaces="y\n"), {}, "replaces must match"),
        ("KpiObserved", {"metric": "roas\n", "value": 1.0, "period": "2026-11"}, {}, "metric must match"),
        (
            "SpendObserved",
            {"platform": "meta\n", "amount": 1.0, "currency": "USD", "period": "2026-11"},
            {},
            "platform must match",
        ),
        (
            "SpendObserved",
            {"platform": "meta", "amount": 1.0, "currency": "USD\n", "period": "2026-11"},
            {},
            "currency",
        ),
        ("ClockTicked", {"now": "2026-01-01T00:00:00Z"}, {"tenant": "probe-nl\n"}, "tenant must match"),
        ("KpiObserved", {"metric": "roas", "value": math.nan, "period": "2026-11"}, {}, "finite"),
        ("KpiObserved", {"metric": "roas", "value": math.inf, "period": "2026-11"}, {}, "finite"),
        (
            "KpiObserved",
            {"metric": "roas", "value": True, "period": "2026-11"},
            {},
            "value must be a finite number",
        ),
        ("MemoryRemembered", remembered("x", importance=True), {}, "importance must be an integer"),
        ("MemoryRemembered", remembered("x", confidence=math.nan), {}, "finite"),
        ("MemoryRemembered", remembered("x", properties={"goal": -math.inf}), {}, "finite"),
        ("MemoryRemembered", remembered("x", label="\udc00"), {}, "lone surrogates"),
        ("MemoryRemembered", remembered("x", properties={"big": 10**30}), {}, "64 bits"),
        ("MemoryRevised", {"memory_id": "x", "property_changes": {"big": -(2**63) - 1}}, {}, "64 bits"),
        ("MemoryRemembered", remembered("x", properties={"\ud800": 1}), {}, "lone surrogates"),
        ("MemoryRevised", {"memory_id": "x", "changes": {"confidence": math.inf}}, {}, "finite"),
        ("ClockTicked", {"now": "2026-01-01T00:00:00Z"}, {"actor": {"id": 5, "role": "r"}}, "actor must be"),
        ("ClockTicked", {"now": "2026-01-01T00:00:00Z"}, {"purpose": "\ud800"}, "lone surrogates"),
    ],
)
def test_hostile_values_are_refused_with_a_reason(
    etype: str, payload: dict, extra: dict, reason: str
) -> None:
    obj = {**envelope(etype, payload), **extra}
    with pytest.raises(InvalidEvent, match=reason):
        event_from_json(obj)


def test_every_broken_rule_of_an_event_is_named() -> None:
    with pytest.raises(InvalidEvent) as err:
        event_from_json(
            envelope("MemoryRemembered", remembered("bad id", importance=9, kind="wish", confidence=2))
        )
    text = str(err.value)
    for part in (
        "memory_id must match",
        "importance must be an integer",
        "kind must be one of",
        "confidence",
    ):
        assert part in text


# -- 11. engram produce --------------------------------------------------------------------------


def test_produce_reports_every_bad_line_and_keeps_every_good_one() -> None:
    good = envelope("ClockTicked", {"now": "2026-01-01T00:00:00Z"})
    lines = [
        json.dumps(good),
        json.dumps(
            envelope("MemoryRemembered", remembered("m1", embedding=["a"], embedding_model="m"))
        ),  # not a vector of numbers
        '{"type": "ClockTicked", "type": "KpiObserved"}',
        json.dumps(envelope("MemoryRemembered", remembered("m2\n"))),
        json.dumps(
            envelope(
                "MemoryRemembered",
                remembered("m3", content="x" * 30_000, properties={f"p{i}": "y" * 30_000 for i in range(40)}),
            )
        ),
        json.dumps(envelope("KpiObserved", {"metric": "roas", "value": math.nan, "period": "2026-11"})),
        "",
        json.dumps(envelope("ClockTicked", {"now": "2026-01-02T00:00:00Z"})) + "\n",
    ]
    produced, failed = parse_lines(lines)
    assert [n for n, _ in produced] == [1, 8]
    reasons = dict(failed)
    assert sorted(reasons) == [2, 3, 4, 5, 6]
    assert "finite 32-bit floats" in reasons[2]  # the domain rules see it before Avro
    assert "repeated keys" in reasons[3]
    assert "memory_id must match" in reasons[4]
    assert f"the limit is {MAX_EVENT_BYTES:,}" in reasons[5]
    assert "finite" in reasons[6]


def test_produce_reports_numbers_python_cannot_read_deep_nesting_and_nested_properties() -> None:
    deep = json.dumps(envelope("MemoryRemembered", remembered("m6", properties={"p": "X"})))
    lines = [
        '{"type": "ClockTicked", "n": ' + "1" * 5000 + "}",
        '{"type": "ClockTicked", "payload": ' + "[" * 5000 + "]" * 5000 + "}",
        deep.replace('"X"', "[" * 900 + "]" * 900),
        json.dumps(envelope("MemoryRemembered", remembered("m8", properties={"p": {"a": [1]}}))),
        json.dumps(envelope("ClockTicked", {"now": "2026-01-02T00:00:00Z"})),
    ]
    produced, failed = parse_lines(lines)
    assert [n for n, _ in produced] == [5]
    reasons = dict(failed)
    assert "4300 digits" in reasons[1]
    assert "nested too deeply" in reasons[2]
    assert "must be a string, number, boolean or null, not a list" in reasons[3]
    assert "not a dict" in reasons[4]
    assert all(len(r) < 1200 for r in reasons.values())
