"""Prometheus metrics of one process, served at ``/metrics`` (``api.routes.metrics``).

Aggregates only: no label ever holds a tenant id, a memory id or anything a request chose, so the
page tells nothing about who uses the service and its size is bounded (event types come from the
schema, routes from the app's templates, partitions from the topic). Every layer records here
(it is ground, like settings and logs); the metrics live in prometheus-client's default registry,
one per process, beside its process collector (CPU, memory, open files).
"""

from __future__ import annotations

import time

from prometheus_client import Counter, Gauge, Histogram

OTHER = "other"  # the label of a value outside a known, bounded set

events = Counter(
    "engram_events",
    "Records the projector handled, by event type and outcome (applied, skipped: already "
    "applied or at/below the checkpoint, rejected: refused by the rules or the shapes)",
    ["type", "outcome"],
)
dead_letters = Counter(
    "engram_dead_letters", "Records the projector sent to the dead-letter topic, by event type", ["type"]
)
keys_missing = Counter(
    "engram_keys_missing",
    "Times the projector found a record's data key neither in the key store nor destroyed there "
    "(a wrong or lost key store): it waits, unready, and projects nothing as erased",
)
write_batches = Histogram(
    "engram_write_batch_writes",
    "Writes the intake finished (embedded, sealed, encoded) and produced together, per batch",
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256),
)
write_embedded = Counter(
    "engram_write_embedded_texts", "New memories the write path embedded (a refused write is never one)"
)
write_refused_busy = Counter(
    "engram_write_refused_busy",
    "Writes refused at once, nothing written: the write queue full (ENGRAM_WRITE_QUEUE) or the log "
    "not acknowledging",
)
batch_seconds = Histogram(
    "engram_projector_batch_seconds",
    "Time the projector took to handle one batch (ENGRAM_PROJECTOR_BATCH_MS aims at it)",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
batch_records = Histogram(
    "engram_projector_batch_records",
    "Records in one projector batch",
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048),
)
rule_seconds = Histogram(
    "engram_rules_seconds",
    "Time the rule engine took to bring a tenant's inferences up to one committed change",
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
)
request_seconds = Histogram(
    "engram_http_request_seconds",
    "HTTP requests by method, route template (never the path itself) and status class",
    ["method", "route", "status"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
consumer_lag = Gauge(
    "engram_consumer_lag",
    "Records of the events topic not yet handled, per partition this process projects "
    "(all partitions before it is assigned any); set when /metrics is read",
    ["partition"],
)
broker_up = Gauge("engram_broker_up", "1 if the broker answered the lag probe of the last /metrics read")
open_stores = Gauge(
    "engram_open_stores", "Tenant stores open in this process (ENGRAM_MAX_OPEN_STORES caps it)"
)
open_stores_bytes = Gauge(
    "engram_open_stores_bytes",
    "Memory the open tenants hold in this process, by their estimates (ENGRAM_OPEN_STORES_MB caps it)",
)
snapshots = Counter("engram_snapshots", "Tenant snapshots this process took")
_last_snapshot = [0.0]  # time.time() of this process's last snapshot; 0: none yet
snapshot_age = Gauge(
    "engram_snapshot_age_seconds",
    "Seconds since this process last took a tenant snapshot (NaN: none since it started)",
)
snapshot_age.set_function(lambda: time.time() - _last_snapshot[0] if _last_snapshot[0] else float("nan"))


def snapshot_taken() -> None:
    snapshots.inc()
    _last_snapshot[0] = time.time()


def bounded(value: str | None, known: frozenset[str] | set[str]) -> str:
    """``value`` if it is one of ``known``, else ``other``: a label's values stay a known set."""
    return value if value is not None and value in known else OTHER
