"""Events/s applied by one worker, and write->readable latency through the API with wait=true.

One run, one machine: starts (or reuses) the local broker, one `engram serve` worker on its own
topics, then
  1. produces N events across T tenants and times first produce -> last applied (readyz lag 0),
     while a client POSTs memories with ?wait=true (write -> readable while the backlog drains);
     the batch sizes the worker formed come from its /readyz;
  2. POSTs M memories one after another with ?wait=true, nothing else running (write -> readable
     with no backlog) and reports p50/p99 of the round trip;
  3. side by side, on the same records read back from the topic: consuming and decoding alone
     (plain aiokafka ``getmany``), and the projection in process (no Faust, no indexer) with the
     rules off and on, one record at a time and in batches of ``--batch`` records (the partitions
     interleaved, as the worker takes them), so the figure of 1. can be split into the log, the
     projection, the rules and the rest (Faust, the indexer, the API beside them).
Steps 1 and 2 run once with the rules off and once per rule engine of ``--engines`` (the
compiled core and the Python reference, ENGRAM_RULE_ENGINE), ``--rounds`` times interleaved, so
the engines meet the same machine; the figures are min / median / max of the rounds.
Prints one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import itertools
import json
import os
import random
import statistics
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
from aiokafka import AIOKafkaConsumer
from engram.projections.knowledge import DEFAULT_RULES_DIR, load_knowledge
from engram.projections.rules.core import engine_for
from engram.projections.stores import TenantStores
from engram.schemas.events import Position, event_from_json
from engram.streams import codec, kafka_local, projector
from engram.streams.keystore import KeyStore
from engram.streams.pipeline import seal as seal_event
from engram.streams.producer import EventProducer
from engram.streams.projector import Record, handle_batch_with_retries
from engram.streams.topics import ensure_topics

from engram.settings import Settings, load_settings
from tests.harness import Server, isolated_settings

ACTOR = {"id": "bench", "role": "operator"}  # memories are an operator's to write


def workload(n: int, tenants: int, seed: int = 7, kpi_share: float | None = None) -> list[dict]:
    """Mostly new memories, some revisions and KPI updates (15%, or ``kpi_share``), spread over the
    tenants; each tenant's first event is a memory."""
    rng = random.Random(seed)
    out, known = [], {f"b{t:03d}": [] for t in range(tenants)}
    for i in range(n):
        tenant = f"b{i % tenants:03d}"
        roll = rng.random()
        if kpi_share is not None:  # onto the scale below: KPIs above 0.85, the rest 0.6 : 0.25
            roll = (
                0.85 + 0.15 * roll / kpi_share
                if roll < kpi_share
                else 0.85 * (roll - kpi_share) / (1 - kpi_share)
            )
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


async def read_back(settings, n: int) -> tuple[list[Any], float]:
    """The topic's first ``n`` records, consumed and decoded as fast as aiokafka gives them."""
    consumer = AIOKafkaConsumer(
        settings.events_topic,
        bootstrap_servers=settings.kafka_bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        fetch_max_bytes=64 * 1024 * 1024,
        max_partition_fetch_bytes=16 * 1024 * 1024,
    )
    await consumer.start()
    records: list[Any] = []
    try:
        started = time.monotonic()
        while len(records) < n:
            for batch in (await consumer.getmany(timeout_ms=1000, max_records=10_000)).values():
                for r in batch:
                    codec.decode(r.value)
                    records.append(r)
        return records, time.monotonic() - started
    finally:
        await consumer.stop()


def project_in_process(settings, records: list[Any], root: Path, *, rules: str, batch: int) -> float:
    """The projector's own batches (``handle_batch_with_retries``) of ``batch`` records in log
    order into fresh stores: the projection alone, without Faust or the indexer. ``rules``: "off"
    (no rule at all), or the engine that runs the shipped rules ("core", "reference"); "core-python-
    path" is the core's rules with every record planned in Python (the live data's compiled path,
    ``streams.live_path``, off), to set the two event paths side by side."""
    name = f"rules-{rules}-{batch}"
    (root / "no-rules").mkdir(parents=True, exist_ok=True)
    (root / "no-rules" / "none.dlog").write_text("# the rules off: no rule at all\n")
    knowledge = load_knowledge(rules_dir=DEFAULT_RULES_DIR if rules != "off" else root / "no-rules")
    engine, python_path = rules.removesuffix("-python-path"), rules.endswith("-python-path")
    if rules != "off":
        knowledge = dataclasses.replace(knowledge, engine=engine_for(knowledge.engine.program, engine))
    stores = TenantStores(
        root / name,
        knowledge=knowledge,
        keys=KeyStore(settings.key_store_dir),
        memory=settings.store == "memory",
    )

    async def sink(*_: Any) -> None:
        raise AssertionError("the bench's workload is valid: nothing may be dead-lettered")

    # the partitions interleaved, as the worker's consumer hands them over, so a batch holds
    # as many records of each tenant as the worker's do
    by_partition: dict[int, list[Record]] = {}
    for r in records:
        record = Record(r.key, r.value, list(r.headers or []), Position(r.partition, r.offset, r.timestamp))
        by_partition.setdefault(r.partition, []).append(record)
    rounds = itertools.zip_longest(*by_partition.values())
    converted = [record for round_ in rounds for record in round_ if record is not None]

    async def run() -> float:
        started = time.monotonic()
        for start in range(0, len(converted), batch):
            chunk = converted[start : start + batch]
            await handle_batch_with_retries(chunk, stores, sink, partitions=settings.events_partitions)
        return time.monotonic() - started

    compiled = projector._compiled
    if python_path:
        projector._compiled = lambda _stores: False  # type: ignore[assignment]
    try:
        return asyncio.run(run())
    finally:
        projector._compiled = compiled  # type: ignore[assignment]
        stores.close()


class Prober(threading.Thread):
    """POSTs memories with ?wait=true one after another until stopped: write -> readable under load."""

    def __init__(self, server: Server, tenants: int = 10) -> None:
        super().__init__(daemon=True)
        self.server, self.tenants = server, tenants
        self.latencies: list[float] = []
        self.stop = threading.Event()

    def run(self) -> None:
        with httpx.Client(base_url=self.server.url, timeout=120, auth=self.server.http.auth) as client:
            i = 0
            while not self.stop.is_set():
                t0 = time.perf_counter()
                r = client.post(f"/v1/tenants/probe{i % self.tenants}/memories", params={"wait": "true"},
                                json=probe_body(f"p{i}"))  # fmt: skip
                self.latencies.append((time.perf_counter() - t0) * 1000)
                assert r.status_code == 202 and r.json()["applied"], r.text
                i += 1


def probe_body(label: str) -> dict[str, Any]:
    # the actor is the bearer token's: the harness speaks as each tenant's operator
    return {"source": "agent", "label": label, "content": "latency probe", "kind": "fact", "importance": 3}


def summary(latencies: list[float]) -> dict[str, float]:
    return {
        "writes": len(latencies),
        "p50": round(statistics.median(latencies), 2),
        "p99": round(percentile(latencies, 0.99), 2),
        "max": round(max(latencies), 2),
    }


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def warm_up(server: Server) -> None:
    """One write applied (``?wait=true``) before the clock starts: on a broker just started, a new
    consumer group waits for the offsets topic and its assignment (a run measured the rules-off
    worker at 32.8 events/s that way, against ~800 on a warm broker)."""
    server.wait_ready()
    with httpx.Client(base_url=server.url, timeout=120, auth=server.http.auth) as client:
        r = client.post("/v1/tenants/warmup/memories", params={"wait": "true"}, json=probe_body("warm-up"))
        assert r.status_code == 202 and r.json()["applied"], r.text


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far (``/proc``): events per CPU-second of the worker is the
    figure a shared machine disturbs least."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    return round(int(next(line for line in status if line.startswith("VmRSS:")).split()[1]) / 1024, 1)


def footprint(settings: Settings, pid: int, rss_before: float) -> dict[str, Any]:
    """What the worker holds once the workload is in: its RSS (and before it), and the bytes on
    disk of its tenants' directories by part (``graph``: the RocksDB store; ``text``: tantivy;
    ``vectors``: hnswlib) and of its snapshots (in memory mode, once the timer has taken them)."""
    if settings.store == "memory":
        time.sleep(settings.snapshot_after_s + 2)
    parts: dict[str, int] = {}
    for f in settings.tenants_dir.rglob("*"):
        if f.is_file():
            where = f.relative_to(settings.tenants_dir).parts  # tenant, part, ...
            part = where[1] if len(where) > 2 else "other"
            parts[part] = parts.get(part, 0) + f.stat().st_size
    snapshots = settings.archive_root / "snapshots"
    snapshot_bytes = sum(f.stat().st_size for f in snapshots.rglob("*") if f.is_file())
    return {"worker_rss_mib": rss_mib(pid), "worker_rss_mib_before": rss_before, "tenant_dir_bytes": parts,
            "snapshot_bytes": snapshot_bytes}  # fmt: skip


def worker_rules_off(base: Settings, root: Path, raw: list[dict], store: str) -> dict[str, Any]:
    """The same workload through a worker whose rule set is empty: the Faust path without rules."""
    (root / "no-rules").mkdir(parents=True, exist_ok=True)
    (root / "no-rules" / "none.dlog").write_text("# the rules off: no rule at all\n")
    settings = isolated_settings(base, root / "data", partitions=12).model_copy(
        update={"rules_dir": root / "no-rules", "store": store}
    )
    asyncio.run(ensure_topics(settings))
    server = Server(settings, root / "server.log").start()
    try:
        warm_up(server)
        keys = KeyStore(settings.key_store_dir)
        events = [seal_event(event_from_json(e), keys) for e in raw]
        rss0 = rss_mib(server.proc.pid)
        cpu0, began = cpu_seconds(server.proc.pid), time.monotonic()
        asyncio.run(produce_all(settings, events))
        server.wait_ready(timeout=600, interval=0.5)
        took, cpu = time.monotonic() - began, cpu_seconds(server.proc.pid) - cpu0
        return {"events_per_second": round(len(events) / took, 1),
                "events_per_cpu_second": round(len(events) / cpu, 1),
                "batch_sizes": server.readyz().get("batches", {}),
                "footprint": footprint(settings, server.proc.pid, rss0)}  # fmt: skip
    finally:
        server.stop()


def worker_rules_on(
    base: Settings, root: Path, raw: list[dict], store: str, engine: str, writes: int
) -> dict:
    """The workload through a worker with the shipped rules run by ``engine`` (ENGRAM_RULE_ENGINE),
    a client writing with ?wait=true meanwhile, then ``writes`` sequential writes with no backlog."""
    # a write behind the backlog waits for the backlog ahead of it on its partition: the probes
    # during the drain may wait longer than the tests' 30 s
    settings = isolated_settings(base, root / "data", partitions=12).model_copy(
        update={"wait_timeout_s": 600.0, "store": store, "rule_engine": engine}
    )
    asyncio.run(ensure_topics(settings))
    server = Server(settings, root / "server.log").start()
    warm_up(server)
    try:
        keys = KeyStore(settings.key_store_dir)  # sealed as the API and `engram produce` seal them
        events = [seal_event(event_from_json(e), keys) for e in raw]
        prober = Prober(server)
        rss0 = rss_mib(server.proc.pid)
        cpu0, began = cpu_seconds(server.proc.pid), time.monotonic()
        prober.start()
        produce_s = asyncio.run(produce_all(settings, events))
        server.wait_ready(timeout=900, interval=0.5)  # polling readyz costs the worker time
        applied_s = time.monotonic() - began
        applied_cpu = cpu_seconds(server.proc.pid) - cpu0
        prober.stop.set()
        prober.join()
        ready = server.readyz()
        rules_on_footprint = footprint(settings, server.proc.pid, rss0)
        latencies = []
        with httpx.Client(base_url=server.url, timeout=60, auth=server.http.auth) as client:
            for i in range(writes):
                t0 = time.perf_counter()
                r = client.post(f"/v1/tenants/lat{i % 10}/memories", params={"wait": "true"},
                                json=probe_body(f"w{i}"))  # fmt: skip
                latencies.append((time.perf_counter() - t0) * 1000)
                assert r.status_code == 202 and r.json()["applied"], r.text
    finally:
        server.stop()
    probes = len(prober.latencies)
    return {
        "settings": settings,
        "produce_seconds": round(produce_s, 3),
        "first_produce_to_last_applied_seconds": round(applied_s, 3),
        "events_per_second": round((len(raw) + probes) / applied_s, 1),
        "events_per_cpu_second": round((len(raw) + probes) / applied_cpu, 1),
        "handled": ready["handled"],
        "batch_sizes": ready.get("batches", {}),
        "footprint": rules_on_footprint,
        "write_to_readable_ms_while_the_backlog_drains": summary(prober.latencies),
        "write_to_readable_ms_no_backlog": summary(latencies),
        "records": len(raw) + probes + writes + 1,  # + the warm-up write
    }


def spread(values: list[float]) -> dict[str, float]:
    """min / median / max of the rounds (the machine is shared: the median is the figure)."""
    return {"min": min(values), "median": round(statistics.median(values), 1), "max": max(values)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--events", type=int, default=10_000)
    ap.add_argument("--tenants", type=int, default=100)
    ap.add_argument("--writes", type=int, default=300, help="sequential wait=true writes")
    ap.add_argument(
        "--batch", type=int, default=2000, help="records per in-process batch (the worker's maximum)"
    )
    ap.add_argument("--store", choices=("disk", "memory"), default="disk", help="the workers' ENGRAM_STORE")
    ap.add_argument(
        "--engines", default="reference,core",
        help="the rule engines compared side by side (ENGRAM_RULE_ENGINE), each in every round",
    )  # fmt: skip
    ap.add_argument("--rounds", type=int, default=1, help="rounds of every engine, interleaved")
    ap.add_argument("--kpi-share", type=float, default=None, help="KPI updates' share of the events (0.15)")
    ap.add_argument("--skip-in-process", action="store_true", help="skip step 3 (the worker's figures only)")
    args = ap.parse_args()
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]

    base = load_settings()
    kafka_local.start(base)
    raw = workload(args.events, args.tenants, kpi_share=args.kpi_share)
    runs: dict[str, list[dict]] = {"rules_off": [], **{e: [] for e in engines}}
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
        for round_ in range(args.rounds):
            runs["rules_off"].append(
                worker_rules_off(base, Path(tmp) / f"rules-off-{round_}", raw, args.store)
            )
            for engine in engines:
                root = Path(tmp) / f"{engine}-{round_}"
                runs[engine].append(worker_rules_on(base, root, raw, args.store, engine, args.writes))
        last = runs[engines[-1]][-1]
        records, consume_s = asyncio.run(read_back(last["settings"], last["records"]))
        ours = [r for r in records if (r.key or b"").startswith(b"b")]  # the workload's only
        inproc = Path(tmp) / "inproc"
        rates = {}
        paths = ("core-python-path",) if "core" in engines else ()
        for rules in () if args.skip_in_process else ("off", *engines, *paths):
            for batch in (1, args.batch):
                took = project_in_process(last["settings"], ours, inproc, rules=rules, batch=batch)
                label = f"projection_in_process_rules_{'off' if rules == 'off' else 'on_' + rules}_" + (
                    "one_at_a_time" if batch == 1 else f"batches_of_{batch}"
                )
                rates[label] = round(len(ours) / took, 1)

    def figure(name: str, key: str) -> dict[str, float]:
        return spread([run[key] for run in runs[name]])

    print(
        json.dumps(
            {
                "benchmark": "throughput",
                "events": args.events,
                "tenants": args.tenants,
                "partitions": last["settings"].events_partitions,
                "workers": 1,
                "store": args.store,
                "rounds": args.rounds,
                "engines": engines,
                "side_by_side_events_per_second": {
                    "consume_and_decode": round(len(records) / consume_s, 1),
                    **rates,
                    "full_worker_through_faust_rules_off": figure("rules_off", "events_per_second"),
                    **{
                        f"full_worker_through_faust_rules_on_{e}": figure(e, "events_per_second")
                        for e in engines
                    },
                },
                "worker_events_per_cpu_second": {
                    "rules_off": figure("rules_off", "events_per_cpu_second"),
                    **{f"rules_on_{e}": figure(e, "events_per_cpu_second") for e in engines},
                },
                "rules_on_share_of_rules_off": {
                    e: round(
                        statistics.median(r["events_per_second"] for r in runs[e])
                        / statistics.median(r["events_per_second"] for r in runs["rules_off"]),
                        3,
                    )
                    for e in engines
                },
                "worker_batch_sizes": {e: runs[e][-1]["batch_sizes"] for e in engines},
                "footprint_after_the_workload": {
                    "rules_off": runs["rules_off"][-1]["footprint"],
                    **{e: runs[e][-1]["footprint"] for e in engines},
                },
                "write_to_readable_ms_while_the_backlog_drains": {
                    e: runs[e][-1]["write_to_readable_ms_while_the_backlog_drains"] for e in engines
                },
                "write_to_readable_ms_no_backlog": {
                    e: {
                        "p50": spread([r["write_to_readable_ms_no_backlog"]["p50"] for r in runs[e]]),
                        "p99": spread([r["write_to_readable_ms_no_backlog"]["p99"] for r in runs[e]]),
                    }
                    for e in engines
                },
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
