"""Liveness and readiness."""

from __future__ import annotations

from engram.api.deps import CurrentRuntime
from engram.api.models import Readiness
from fastapi import APIRouter
from fastapi.responses import JSONResponse

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", response_model=Readiness)
async def readyz(runtime: CurrentRuntime) -> JSONResponse:
    """200 only when the broker answers and the projector has handled everything in the log."""
    try:
        lag = await runtime.lag.lag(runtime.progress.last_offset)
    except Exception as exc:
        body = Readiness(
            ready=False,
            broker=False,
            handled=dict(runtime.progress.counts),
            batches=runtime.progress.batch_sizes(),
            reason=f"broker unreachable: {exc}",
        )
        return JSONResponse(body.model_dump(), status_code=503)
    behind = sum(lag.values())
    body = Readiness(
        ready=behind == 0,
        broker=True,
        lag={p: n for p, n in lag.items() if n},
        handled=dict(runtime.progress.counts),
        batches=runtime.progress.batch_sizes(),
        reason=None if behind == 0 else f"projector is {behind} events behind",
    )
    return JSONResponse(body.model_dump(), status_code=200 if behind == 0 else 503)
