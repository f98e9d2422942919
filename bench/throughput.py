"""Events/s applied by one worker, and write->readable latency through the API with wait=true.

One run, one machine: starts (or reuses) the local broker, one `engram serve` worker on its own
topics, then
  1. produces N events across T tenants and times first produce -> last applied (readyz lag 0);
  2. POSTs M memories one after another with ?wait=true and reports p50/p99 of the round trip.
Prints one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import httpx

from engram.harness import Server, isolated_settings
from engram.settings import load_settings
from schemas.events import event_from_json
from streams import kafka_local
from streams.keystore import KeyStore, seal_event
from streams.producer import EventProducer
from streams.topics import ensure_topics

ACTOR = {"id": "bench", "role": "operator"}  # memories are an operator's to write


def workload(n: int, tenants: int, seed: int = 7) -> list[dict]:
    """Mostly new memories, some revisions and KPI updates, spread over the tenants."""
    rng = random.Random(seed)
    out, known = [], {f"b{t:03d}": [] for t in range(tenants)}
    for i in range(n):
        tenant = f"b{i % tenants:03d}"
        roll = rng.random()
        if roll < 0.6 or not known[tenant]:
            mid = f"m{i}"
            known[tenant].append(mid)
            payload = {
                "memory_id": mid,
                "label": f"memory {i}",
                "content": f"content {i} " * 8,
                "kind": "fact",
                "scope": "company",
                "importance": rng.randint(1, 5),
            }
            out.append({"type": "MemoryRemembered", "payload": payload})
        elif roll < 0.85:
            payload = {"memory_id": rng.choice(known[tenant]), "changes": {"label": f"rev {i}"}}
            out.append({"type": "MemoryRevised", "payload": payload})
        else:
            payload = {"metric": "roas", "value": round(rng.uniform(1, 5), 2), "period": "2026-12"}
            out.append({"type": "KpiObserved", "payload": payload})
        # every line its own event: without an id two equal KPI lines would be one event, applied once
        event_id = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        out[-1].update(tenant=tenant, source="pipeline", actor=ACTOR, event_id=event_id)
    return out


async def produce_all(settings, events) -> float:
    async with EventProducer(settings) as producer:
        started = time.monotonic()
        for start in range(0, len(events), 1000):
            await producer.send_many(events[start : start + 1000])
        return time.monotonic() - started


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--events", type=int, default=10_000)
    ap.add_argument("--tenants", type=int, default=100)
    ap.add_argument("--writes", type=int, default=300, help="sequential wait=true writes")
    args = ap.parse_args()

    base = load_settings()
    kafka_local.start(base)
    with tempfile.TemporaryDirectory() as tmp:
        settings = isolated_settings(base, Path(tmp) / "data", partitions=12)
        asyncio.run(ensure_topics(settings))
        server = Server(settings, Path(tmp) / "server.log").start()
        server.wait_ready()
        try:
            keys = KeyStore(settings.key_store_dir)  # sealed as the API and `engram produce` seal them
            events = [seal_event(event_from_json(e), keys) for e in workload(args.events, args.tenants)]
            began = time.monotonic()
            produce_s = asyncio.run(produce_all(settings, events))
            server.wait_ready(timeout=600, interval=0.5)  # polling readyz costs the worker time
            applied_s = time.monotonic() - began
            handled = server.readyz()["handled"]

            latencies = []
            with httpx.Client(base_url=server.url, timeout=60, auth=server.http.auth) as client:
                for i in range(args.writes):
                    body = {  # the actor is the bearer token's: the harness speaks as each tenant's operator
                        "source": "agent",
                        "label": f"w{i}",
                        "content": "latency probe",
                        "kind": "fact",
                        "importance": 3,
                    }
                    t0 = time.perf_counter()
                    r = client.post(f"/v1/tenants/lat{i % 10}/memories", params={"wait": "true"}, json=body)
                    latencies.append((time.perf_counter() - t0) * 1000)
                    assert r.status_code == 202 and r.json()["applied"], r.text
        finally:
            server.stop()

    print(
        json.dumps(
            {
                "benchmark": "throughput",
                "events": args.events,
                "tenants": args.tenants,
                "partitions": settings.events_partitions,
                "workers": 1,
                "produce_seconds": round(produce_s, 3),
                "first_produce_to_last_applied_seconds": round(applied_s, 3),
                "events_per_second_applied": round(args.events / applied_s, 1),
                "handled": handled,
                "write_to_readable_ms": {
                    "writes": args.writes,
                    "p50": round(statistics.median(latencies), 2),
                    "p99": round(percentile(latencies, 0.99), 2),
                    "max": round(max(latencies), 2),
                },
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
