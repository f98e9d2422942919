"""The live business data (KPIs, spend, the clock) read by the compiled core, a stretch at a time.

A KPI stream is most of what a business sends, and each of its events is small: decoding it,
checking it and planning it in Python cost more than committing it. ``engram._core.LiveCodec``
reads a stretch of a tenant's records from their bytes (the Avro body of the current Envelope, the
checks the Python path makes of those events, the content digest); the projector puts it in the
tenant's run as one ``LiveGroup``, which ``projections.batch.plan_batch`` has the core plan in its
place on the run's overlay, so the run is committed once whatever it holds. The core takes only
plainly valid live data; any other record (a memory, an older writer schema, a value a check
refuses) is decoded and planned in Python, which decides it the same way the core would have where
both apply (``tests/streams/test_live_path.py`` holds the two equal on random runs).

It runs with the compiled rule engine only: ``ENGRAM_RULE_ENGINE=reference`` is the projection in
Python throughout, the reference the core is checked against.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from functools import cache
from typing import Any

from engram.projections.rules.core import core_call
from engram.schemas import ENVELOPE_FILE, avro_dir
from engram.schemas import vocabulary as v
from engram.streams import codec

from engram import _core

log = logging.getLogger(__name__)
BRANCHES = ("KpiObserved", "SpendObserved", "ClockTicked")


def _named(name: str) -> dict[str, Any]:
    return json.loads((avro_dir() / f"{name}.avsc").read_text())


def _spelt(t: Any) -> str:
    """An Avro type as ``LiveCodec``'s layout spells it."""
    if isinstance(t, list):  # a nullable value, or the payload's union of event types
        return "|".join(_spelt(x) for x in t) if len(t) <= 2 else "union"
    if isinstance(t, dict):
        return _spelt(t["type"])
    if t.startswith(v.EVENT_NAMESPACE + "."):
        schema = _named(t)
        if schema["type"] == "enum":
            return "enum"
        return f"{schema['name']}({','.join(_field(f) for f in schema['fields'])})"
    return str(t)


def _field(f: dict[str, Any]) -> str:
    return f"{f['name']}:{_spelt(f['type'])}"


def layout() -> tuple[list[str], list[str], tuple[int, int, int]]:
    """The current Envelope as the core reads it: its fields, the Source symbols, and where the
    live-data records sit in the payload union."""
    envelope = json.loads((avro_dir() / ENVELOPE_FILE).read_text())
    fields = {f["name"]: f for f in envelope["fields"]}
    union = [name.rsplit(".", 1)[-1] for name in fields["payload"]["type"]]
    spelt = [_field(f) for f in envelope["fields"]] + [_spelt(f"{v.EVENT_NAMESPACE}.{b}") for b in BRANCHES]
    sources = _named(f"{v.EVENT_NAMESPACE}.Source")["symbols"]
    kpi, spend, clock = (union.index(b) for b in BRANCHES)
    return spelt, sources, (kpi, spend, clock)


@cache
def live_codec() -> Any:  # engram._core.LiveCodec | None
    """The core's reader of the current Envelope; None (every run through Python) if the Envelope
    is not the layout it knows, which only a schema change without a core change can cause."""
    spelt, sources, branches = layout()
    fingerprint = codec.schema_fingerprint(codec.envelope_schema())
    try:
        return _core.LiveCodec(fingerprint, spelt, sources, branches)
    except ValueError:
        log.warning("the core does not read this Envelope; live data is projected in Python", exc_info=True)
        return None


# a stretch of live data shorter than this is decoded and planned in Python with the records
# around it: a group's own cost (its nodes' facts read, its delta parsed back) is about what the
# core saves on a record or two. In process, 20,000 events over 10 tenants, 90% KPIs: Python
# 2,250-2,575 events/s, groups of 1 or more 3,553-4,015, of 2 or more 4,983, 4: 3,957, 8: 4,357
# (one run each, noisy); with the standard 15% KPIs over 100 tenants all within noise of Python
MIN_LIVE_RUN = 4


def decode(tenant: str, values: Sequence[bytes]) -> Any:
    """A stretch of a tenant's records decoded and checked by the core (an ``engram._core.LiveRun``),
    or None when any of them is not plainly valid live data (or the core fails, logged)."""
    live = live_codec()
    try:
        return core_call(live.decode, tenant, list(values)) if live is not None else None
    except RuntimeError:
        log.exception("the core could not read %s's records; they go through Python", tenant)
        return None


def segments(tenant: str, values: Sequence[bytes], core: bool) -> list[tuple[bool, range]]:
    """A tenant's run cut where it changes between live data the core takes and anything else:
    (the core's, the positions in ``values``) each, in order. Each live stretch is one group
    (``projections.batch.LiveGroup``) planned on the run's overlay in its place, so the run is still
    committed once."""
    live = live_codec() if core else None
    try:
        takes = core_call(live.takes, tenant, list(values)) if live is not None else [False] * len(values)
    except RuntimeError:
        log.exception("the core could not read %s's records; they go through Python", tenant)
        takes = [False] * len(values)
    pieces: list[tuple[bool, range]] = []
    start = 0
    for n in range(1, len(values) + 1):
        if n == len(values) or takes[n] != takes[start]:
            ours = takes[start] and n - start >= MIN_LIVE_RUN
            if pieces and pieces[-1][0] == ours:
                pieces[-1] = (ours, range(pieces[-1][1].start, n))
            else:
                pieces.append((ours, range(start, n)))
            start = n
    return pieces
