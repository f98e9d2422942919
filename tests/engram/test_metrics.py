"""The metrics' labels stay a bounded set, and the Grafana dashboard asks only for series that exist."""

from __future__ import annotations

import json
import re
from pathlib import Path

from engram.schemas.events import Position
from engram.streams.projector import Record
from engram.streams.projector_app import event_type
from prometheus_client import REGISTRY

import engram.metrics  # noqa: F401  (registers the series)

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana-dashboard.json"


def record(headers: list[tuple[str, bytes]]) -> Record:
    return Record(b"t", b"", headers, Position(0, 0, 0))


def test_an_event_type_label_is_one_of_the_schemas_or_other() -> None:
    assert event_type(record([("event-type", b"engram.events.MemoryRemembered")])) == "MemoryRemembered"
    assert event_type(record([("event-type", b"tenant-acme-secret")])) == "other"  # anyone may write a header
    assert event_type(record([("event-type", b"\xff\xfe")])) == "other"
    assert event_type(record([])) == "other"


def test_the_dashboard_names_only_series_engram_serves() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    named = {m for e in exprs for m in re.findall(r"\b((?:engram|process)_[a-z_]+)", e)}
    suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"]}
    served = {
        metric.name + suffix for metric in REGISTRY.collect() for suffix in suffixes.get(metric.type, [""])
    }  # a labelled series has no sample before its first value: its family names it
    assert named and named <= served, named - served
