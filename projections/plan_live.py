"""Planners for the live business data beside the memories: KPIs, spend, the clock, stakeholders.

Kept apart from the memory planners in `plan.py`, which imports this module to register them. An
observation is a node per series and period, so a restated figure replaces its value in place and
the rules compare a target or cap with the current period only.
"""

from __future__ import annotations

from engram.projections.plan import Builder, planner
from engram.projections.terms import (
    CLOCK,
    COMPANY,
    RDF_TYPE,
    e,
    kpi_iri,
    spend_iri,
    time_literal,
    user_iri,
    value_literal,
)
from engram.schemas import payloads as ev
from engram.schemas.periods import Period, parse_period
from pyoxigraph import Literal, NamedNode


def _observation(b: Builder, node: NamedNode, series: str, period: Period) -> None:
    """What every observation has: its series (the observations of one thing, over periods) and
    its period as an interval of valid time; the rules pick the current one against the clock."""
    b.add(node, e("series"), Literal(series))
    b.add(node, e("period"), Literal(period.label))
    b.add(node, e("periodKind"), Literal(period.kind))
    b.replace(node, e("periodStart"), time_literal(period.start))  # unspecified: when observed
    b.replace(node, e("periodEnd"), time_literal(period.end))
    b.replace(node, e("observedAt"), time_literal(b.event.occurred_at))


@planner(ev.KpiObserved)
def _kpi(b: Builder, p: ev.KpiObserved) -> None:
    """A KPI's series is its metric: a target is judged on the latest period, whatever its kind."""
    k = kpi_iri(p.metric, p.period)
    b.add(COMPANY, RDF_TYPE, e("Company"))
    b.add(COMPANY, e("hasKpi"), k)
    b.add(k, RDF_TYPE, e("Kpi"))
    b.add(k, e("metric"), Literal(p.metric))
    b.replace(k, e("value"), value_literal(float(p.value)))
    _observation(b, k, f"kpi/{p.metric}", parse_period(p.period, b.event.occurred_at))


@planner(ev.SpendObserved)
def _spend(b: Builder, p: ev.SpendObserved) -> None:
    """Spend's series is per platform, currency and kind of period: a monthly cap is compared with
    this month's spend to date, never with this week's."""
    s = spend_iri(p.platform, p.currency, p.period)
    period = parse_period(p.period, b.event.occurred_at)
    b.add(COMPANY, RDF_TYPE, e("Company"))
    b.add(COMPANY, e("hasSpend"), s)
    b.add(s, RDF_TYPE, e("Spend"))
    b.add(s, e("platform"), Literal(p.platform))
    b.add(s, e("currency"), Literal(p.currency))
    b.replace(s, e("amount"), value_literal(float(p.amount)))
    _observation(b, s, f"spend/{p.platform}/{p.currency}/{period.kind}", period)


@planner(ev.ClockTicked)
def _clock(b: Builder, p: ev.ClockTicked) -> None:
    b.add(CLOCK, RDF_TYPE, e("Clock"))
    b.replace(CLOCK, e("now"), time_literal(p.now))


@planner(ev.StakeholderChanged)
def _stakeholder(b: Builder, p: ev.StakeholderChanged) -> None:
    u = user_iri(p.user_id)
    b.add(u, RDF_TYPE, e("User"))
    b.add(u, e("userId"), Literal(p.user_id))
    b.clear(u, e("team"))
    for team in p.team_ids:
        b.add(u, e("team"), Literal(team))
    b.replace(u, e("role"), Literal(p.role))
