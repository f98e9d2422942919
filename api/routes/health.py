"""Liveness and readiness: separate on purpose. ``/healthz`` says the process answers (restart it
if not); ``/readyz`` says it can serve within its contract (send it traffic if so): the broker
answers, and the partitions it projects are at most ``ENGRAM_READY_MAX_LAG`` records behind. Zero
lag is not the bar: under a catch-up burst every worker would leave the load balancer at once,
exactly when load is high. A projector that waits for a data key missing from the key store is
not ready whatever its lag, and says why."""

from __future__ import annotations

import asyncio

from engram.api.deps import CurrentRuntime
from engram.api.models import Readiness
from engram.api.runtime import Runtime
from fastapi import APIRouter
from fastapi.responses import JSONResponse

router = APIRouter(tags=["health"])

READY_PROBE_S = 2.0  # a broker that has not answered the lag probe by then counts as unreachable


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


def projected_partitions(runtime: Runtime) -> set[int] | None:
    """The events topic's partitions this process's projector is assigned; None before it has any
    (not yet in the group: every partition counts, the conservative answer)."""
    try:
        assignment = runtime.projector.consumer.assignment()
    except Exception:  # no consumer yet (starting)
        return None
    owned = {tp.partition for tp in assignment if tp.topic == runtime.settings.events_topic}
    return owned or None


@router.get("/readyz", response_model=Readiness)
async def readyz(runtime: CurrentRuntime) -> JSONResponse:
    """200 when the broker answers and this process's partitions are at most ENGRAM_READY_MAX_LAG
    records behind; else 503 with the reason."""
    max_lag = runtime.settings.ready_max_lag
    try:
        lag = await asyncio.wait_for(runtime.lag.lag(runtime.progress.last_offset), READY_PROBE_S)
    except Exception as exc:
        why = f"no answer in {READY_PROBE_S:g}s" if isinstance(exc, TimeoutError) else str(exc)
        body = Readiness(
            ready=False,
            broker=False,
            max_lag=max_lag,
            handled=dict(runtime.progress.counts),
            batches=runtime.progress.batch_sizes(),
            reason=f"broker unreachable: {why}",
        )
        return JSONResponse(body.model_dump(), status_code=503)
    counted = projected_partitions(runtime) or set(lag)
    behind = sum(n for p, n in lag.items() if p in counted)
    held = runtime.progress.held  # a key missing from the key store: nothing applies until it is back
    ready = behind <= max_lag and held is None
    body = Readiness(
        ready=ready,
        broker=True,
        lag={p: n for p, n in lag.items() if n},
        behind=behind,
        max_lag=max_lag,
        partitions=sorted(counted),
        handled=dict(runtime.progress.counts),
        batches=runtime.progress.batch_sizes(),
        reason=held
        or (None if ready else f"projector is {behind} events behind (ENGRAM_READY_MAX_LAG={max_lag})"),
    )
    return JSONResponse(body.model_dump(), status_code=200 if ready else 503)
