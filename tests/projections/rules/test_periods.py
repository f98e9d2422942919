"""Observations per period: a backfill never replaces the current figure, a correction does, and
the clock decides which period is current (rules/observations.dlog)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from engram.projections.context import snapshot
from engram.schemas.checks import InvalidEvent, Problems
from engram.schemas.payloads import KpiObserved, SpendObserved
from engram.schemas.periods import parse_period

from tests.factories import remembered
from tests.projections.rules.test_rule_files import cap, target
from tests.tenant import Tenant, from_scratch

NOW = datetime(2026, 12, 4, tzinfo=UTC)


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.mark.parametrize(
    ("label", "kind", "start", "end"),
    [
        ("2026", "year", "2026-01-01", "2027-01-01"),
        ("2026-Q4", "quarter", "2026-10-01", "2027-01-01"),
        ("2026-Q1", "quarter", "2026-01-01", "2026-04-01"),
        ("2026-12", "month", "2026-12-01", "2027-01-01"),
        ("2026-02", "month", "2026-02-01", "2026-03-01"),
        ("2026-W49", "week", "2026-11-30", "2026-12-07"),
        ("2026-W01", "week", "2025-12-29", "2026-01-05"),
        ("2024-02-29", "day", "2024-02-29", "2024-03-01"),
    ],
)
def test_a_period_label_is_its_utc_interval(label: str, kind: str, start: str, end: str) -> None:
    p = parse_period(label, NOW)
    assert (p.kind, p.start, p.end) == (kind, at(start), at(end))


def test_unspecified_is_the_instant_observed() -> None:
    p = parse_period("unspecified", NOW)
    assert (p.kind, p.start, p.end) == ("unspecified", NOW, NOW)


@pytest.mark.parametrize(
    "label",
    ["p", "", "2026-13", "2026-00", "2026-Q5", "2026-W54", "2025-W53", "2026-02-30", "0000", "9999-12-31",
     "2026-12\n", " 2026", "\uff12\uff10\uff12\uff16", "2026-1", "\udc00", "Unspecified"],
)  # fmt: skip
def test_anything_but_a_calendar_period_is_refused_with_the_forms(label: str) -> None:
    with pytest.raises(ValueError, match="2026-Q4, 2026-11, 2026-W49"):
        parse_period(label, NOW)
    for cls, payload in (
        (KpiObserved, {"metric": "roas", "value": 1.0}),
        (SpendObserved, {"platform": "meta", "amount": 1.0, "currency": "USD"}),
    ):
        problems = Problems()
        cls.check({**payload, "period": label}, problems)
        with pytest.raises(InvalidEvent, match="period must be a calendar period"):
            problems.raise_if_any()


def spend(amount: float, period: str, platform: str = "meta", currency: str = "USD") -> dict[str, Any]:
    return {"platform": platform, "amount": amount, "currency": currency, "period": period}


def kpi(value: float, period: str, metric: str = "roas") -> dict[str, Any]:
    return {"metric": metric, "value": value, "period": period}


def test_a_backfill_is_stored_but_never_replaces_the_current_spend(tenant: Tenant) -> None:
    tenant.apply("MemoryRemembered", cap("meta-cap"))  # 40,000 USD a month
    tenant.apply("SpendObserved", spend(34_000.0, "2026-11"))
    assert tenant.values("meta-cap", "budgetStatus") == {"near_limit"}
    tenant.apply("SpendObserved", spend(45_000.0, "2026-10"))  # last month's, arriving late
    assert tenant.values("meta-cap", "budgetStatus") == {"near_limit"}
    assert tenant.values("meta-cap", "budgetSpend") == {"34000"}
    tenant.apply("SpendObserved", spend(41_000.0, "2026-11"))  # a correction of this month
    assert tenant.values("meta-cap", "budgetStatus") == {"over_budget"}
    tenant.apply("SpendObserved", spend(1_000.0, "2026-W48"))  # a week: not what a monthly cap reads
    tenant.apply("SpendObserved", spend(1_000.0, "2026-11", currency="EUR"))  # another currency
    assert tenant.values("meta-cap", "budgetSpend") == {"41000"}
    live = snapshot(tenant.graph)["spend"]
    assert sorted((s["period"], s["currency"], s["amount"]) for s in live) == [
        ("2026-11", "EUR", 1000),
        ("2026-11", "USD", 41000),
        ("2026-W48", "USD", 1000),
    ]  # the current observation of each series; October is stored, not shown
    assert tenant.graph.store.query(
        "ASK { GRAPH ?g { <urn:engram:spend:meta:USD:2026-10> <https://engram.dev/ns#amount> 45000e0 } }"
    )
    assert from_scratch(tenant.graph) == tenant.graph.inferred()


def test_the_clock_rolls_the_period_over(tenant: Tenant) -> None:
    tenant.apply("ClockTicked", {"now": "2026-11-20T00:00:00Z"})
    tenant.apply("MemoryRemembered", cap("meta-cap"))
    tenant.apply("SpendObserved", spend(39_000.0, "2026-11"))
    tenant.apply("SpendObserved", spend(2_000.0, "2026-12"))  # a period the clock has not reached
    assert tenant.values("meta-cap", "budgetStatus") == {"near_limit"}
    assert tenant.values("meta-cap", "budgetSpend") == {"39000"}
    tenant.apply("ClockTicked", {"now": "2026-12-01T00:00:00Z"})  # December begins
    assert tenant.values("meta-cap", "budgetStatus") == {"within_budget"}
    assert tenant.values("meta-cap", "budgetSpend") == {"2000"}
    tenant.apply("SpendObserved", spend(50_000.0, "2026-11"))  # November corrected after it ended
    assert tenant.values("meta-cap", "budgetSpend") == {"2000"}
    tenant.apply("ClockTicked", {"now": "2027-01-01T00:00:00Z"})  # no January spend yet: no status
    assert tenant.values("meta-cap", "budgetStatus") == set()
    assert tenant.values("meta-cap", "capPeriod") == {"month"}
    tenant.apply("ClockTicked", {"now": "2026-11-25T00:00:00Z"})  # a clock set back: November again
    assert tenant.values("meta-cap", "budgetStatus") == {"over_budget"}
    assert from_scratch(tenant.graph) == tenant.graph.inferred()


def test_a_cap_reads_the_spend_of_its_own_kind_of_period(tenant: Tenant) -> None:
    tenant.apply("ClockTicked", {"now": "2026-12-02T00:00:00Z"})
    props = {"platform": "meta", "amount": 1_000.0, "currency": "USD", "period": "week"}
    weekly = remembered("weekly", memory_class="BudgetConstraintMemory", kind="objective", properties=props)
    tenant.apply("MemoryRemembered", weekly)
    tenant.apply("SpendObserved", spend(30_000.0, "2026-12"))
    assert tenant.values("weekly", "budgetStatus") == set()
    tenant.apply("SpendObserved", spend(900.0, "2026-W49"))
    assert tenant.values("weekly", "budgetStatus") == {"near_limit"}
    tenant.apply("ClockTicked", {"now": "2026-12-07T00:00:00Z"})  # week 50
    assert tenant.values("weekly", "budgetStatus") == set()


def test_a_target_is_judged_on_the_latest_period_due(tenant: Tenant) -> None:
    tenant.apply("MemoryRemembered", target("roas", "roas", 3.0))
    tenant.apply("KpiObserved", kpi(2.7, "2026-11"))
    assert tenant.values("roas", "targetStatus") == {"below"}
    tenant.apply("KpiObserved", kpi(3.5, "2026-10"))  # backfill
    assert tenant.values("roas", "targetStatus") == {"below"}
    tenant.apply("KpiObserved", kpi(3.2, "2026-11"))  # correction
    assert tenant.values("roas", "targetStatus") == {"met"}
    assert (
        tenant.explanation("roas", "targetStatus")
        == "met: roas is 3.2, at or above the goal of 3 (higher is better)"
    )
    tenant.apply("ClockTicked", {"now": "2026-11-15T00:00:00Z"})
    tenant.apply("KpiObserved", kpi(2.0, "2026-12"))  # not due before December
    assert tenant.values("roas", "targetStatus") == {"met"}
    tenant.apply("ClockTicked", {"now": "2026-12-01T00:00:00Z"})
    assert tenant.values("roas", "targetStatus") == {"below"}
    tenant.apply("KpiObserved", kpi(4.0, "2026-W49"))  # began on 30 November: older than December
    assert tenant.values("roas", "targetStatus") == {"below"}
    tenant.apply("ClockTicked", {"now": "2026-12-08T00:00:00Z"})
    tenant.apply("KpiObserved", kpi(4.0, "2026-W50"))  # began on 7 December: the latest
    assert tenant.values("roas", "targetStatus") == {"met"}
    assert [k["period"] for k in snapshot(tenant.graph)["kpis"]] == ["2026-W50"]
    assert from_scratch(tenant.graph) == tenant.graph.inferred()
