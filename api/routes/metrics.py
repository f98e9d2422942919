"""Prometheus metrics (``engram.metrics``), unauthenticated like ``/healthz``: the page holds
aggregates only (no tenant id, memory id or path is ever a label), so a scraper needs no token;
keep it off the public internet as any ops endpoint (it shows rates and sizes)."""

from __future__ import annotations

import asyncio

from engram.api.deps import CurrentRuntime
from engram.api.routes.health import READY_PROBE_S, projected_partitions
from fastapi import APIRouter
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from engram import metrics

router = APIRouter(tags=["health"])


@router.get("/metrics", response_class=Response)
async def prometheus_metrics(runtime: CurrentRuntime) -> Response:
    """The process's metrics in Prometheus' text format; lag and open stores are read now."""
    metrics.open_stores.set(runtime.stores.open_count())
    metrics.open_stores_bytes.set(runtime.stores.open_bytes())
    metrics.consumer_lag.clear()  # partitions moved to another worker leave the page
    try:
        lag = await asyncio.wait_for(runtime.lag.lag(runtime.progress.last_offset), READY_PROBE_S)
    except Exception:
        metrics.broker_up.set(0)
    else:
        metrics.broker_up.set(1)
        counted = projected_partitions(runtime) or set(lag)
        for partition, behind in lag.items():
            if partition in counted:
                metrics.consumer_lag.labels(str(partition)).set(behind)
    return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)
