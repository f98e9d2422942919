"""One and two `engram serve` processes in one consumer group (one object store, key store and auth
secret; stores on disk, the default, or in memory: ``--stores``), on the local broker. Prints JSON.

1. ``rate``: ``bench/throughput.py``'s workload (N events over T tenants) produced at once, then
   the seconds until the processes have handled them all (their ``/readyz`` counts): events/s wall
   and per CPU-second of the serving processes (user + system, from ``/proc``), 1 and 2 processes
   alternating, ``--reps`` times each, min and median.
2. ``reads``: one memory read (``GET …/memories/{id}``) of a tenant owned by the second process,
   sent to the owner and to the other process (forwarded) alternately: p50 and p95 of each.
3. ``takeover``: the T tenants spread over two processes; the second is stopped (SIGTERM: it saves
   its tenants and leaves the group) or killed (SIGKILL: the group notices after its session
   timeout, 10 s); seconds until every one of its tenants answers a read through the survivor.
4. ``simulate`` (``--simulate N``): N small tenants (2 events each) through two processes on disk
   with room for ``--max-open`` open stores each (so they open, evict and reopen), then one stopped
   (its tenants move to the other, restored from their snapshots); after each phase, per process:
   threads, file descriptors, RSS, stores open, tenant copies on its disk; and the time to the
   first answer of cold tenants (not open), before and after the move.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import signal
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from engram.schemas.events import event_from_json
from engram.streams.group import group_status, projector_group
from engram.streams.objects import open_objects
from engram.streams.producer import EventProducer
from engram.streams.topics import drop_topics, partition_for

from bench.throughput import workload
from engram.settings import Settings, load_settings
from tests.harness import Server, free_port, isolated_settings

PARTITIONS = 12
TICKS = os.sysconf("SC_CLK_TCK")


def settings_pair(
    tmp: Path, session_timeout_s: float = 10.0, store: str = "disk", **more: Any
) -> tuple[Settings, Settings]:
    """Two processes' settings: one object store (outside both data directories, so on disk their
    stores are caches of its snapshots: ``Settings.tenants_move``), key store and secret."""
    a = isolated_settings(load_settings(), tmp / "a", partitions=PARTITIONS).model_copy(
        update={
            **more,
            "session_timeout_s": session_timeout_s,
            "store": store,
            "archive_dir": tmp / "objects",
            "keys_dir": tmp / "keys",
            "auth_secret": secrets.token_urlsafe(32),
            "embedder": "hashing",
        }
    )
    return a, a.model_copy(update={"data_dir": tmp / "b", "api_port": free_port()})


def cpu_s(server: Server) -> float:
    assert server.proc is not None
    fields = Path(f"/proc/{server.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def handled(server: Server) -> int:
    """Events the server has handled; its loop may be busy for seconds (a batch of new tenants
    opens their stores on it), so a read that times out is asked again."""
    for _ in range(30):
        try:
            return sum(server.readyz()["handled"].values())
        except httpx.TimeoutException:
            continue
    raise TimeoutError(f"{server.url} did not answer /readyz for 5 minutes")


def wait_members(settings: Settings, n: int, timeout: float = 90) -> dict[str, Any]:
    group = projector_group(settings, open_objects(settings))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = asyncio.run(group_status(settings, group))
        owners = {p["owner"] for p in found["partitions"]}
        if found["state"] == "Stable" and len(found["members"]) == n and None not in owners:
            return found
        time.sleep(0.2)
    raise TimeoutError(f"the group did not settle on {n} members")


def started(settings: list[Settings], tmp: Path) -> list[Server]:
    servers: list[Server] = []
    try:
        for i, s in enumerate(settings):
            servers.append(Server(s, tmp / f"{i}.log").start())
            servers[-1].wait_ready(timeout=180)
        wait_members(settings[0], len(settings))
    except BaseException:  # none left running when one fails to start
        for server in servers:
            server.stop()
        raise
    return servers


def produce(settings: Settings, events: list[dict]) -> None:
    async def run() -> None:
        decoded = [event_from_json(e) for e in events]
        async with EventProducer(settings) as producer:
            for start in range(0, len(decoded), 1000):
                await producer.send_many(decoded[start : start + 1000])

    asyncio.run(run())


def rate(processes: int, events: list[dict], store: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp_:
        tmp = Path(tmp_)
        sa, sb = settings_pair(tmp, store=store)
        servers = started([sa, sb][:processes], tmp)
        try:
            before = [cpu_s(s) for s in servers]
            t0 = time.monotonic()
            produce(sa, events)
            while sum(handled(s) for s in servers) < len(events):
                time.sleep(0.05)
            wall = time.monotonic() - t0
            cpu = sum(cpu_s(s) - b for s, b in zip(servers, before, strict=True))
        finally:
            for s in servers:
                s.stop()
            asyncio.run(drop_topics(sa.kafka_bootstrap, sa.topic_prefix))
    return {"events_per_s": len(events) / wall, "events_per_cpu_s": len(events) / cpu, "wall_s": wall}


def reads_and_takeover(
    events: list[dict],
    tenants: int,
    n_reads: int,
    how: str,
    session_timeout_s: float = 10.0,
    store: str = "disk",
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp_:
        tmp = Path(tmp_)
        sa, sb = settings_pair(tmp, session_timeout_s, store)
        a, b = started([sa, sb], tmp)
        try:
            produce(sa, events)
            while handled(a) + handled(b) < len(events):
                time.sleep(0.05)
            owners = {p["partition"]: p["owner"] for p in wait_members(sa, 2)["partitions"]}
            names = sorted({e["tenant"] for e in events})
            of_b = [t for t in names if owners[partition_for(t, PARTITIONS)] == b.url]
            first = {t: next(e["payload"]["memory_id"] for e in events if e["tenant"] == t
                             and e["type"] == "MemoryRemembered") for t in of_b}  # fmt: skip
            out: dict[str, Any] = {"tenants_moved": len(of_b)}
            if n_reads:
                owner_ms, other_ms = [], []
                with httpx.Client(auth=a.http.auth, timeout=30) as http:
                    for i in range(n_reads):
                        t = of_b[i % len(of_b)]
                        for url, into in ((b.url, owner_ms), (a.url, other_ms)):
                            t0 = time.perf_counter()
                            r = http.get(f"{url}/v1/tenants/{t}/memories/{first[t]}")
                            into.append((time.perf_counter() - t0) * 1e3)
                            assert r.status_code == 200, r.text
                out["read_ms"] = {
                    name: {"p50": round(statistics.median(ms), 2),
                           "p95": round(statistics.quantiles(ms, n=20)[-1], 2)}
                    for name, ms in (("owner", owner_ms), ("non_owner", other_ms))
                }  # fmt: skip
            stopped = time.monotonic()
            b.kill(signal.SIGTERM if how == "stop" else signal.SIGKILL)
            pending = set(of_b)
            with httpx.Client(auth=a.http.auth, timeout=30) as http:
                while pending:
                    for t in sorted(pending):
                        if http.get(f"{a.url}/v1/tenants/{t}/memories/{first[t]}").status_code == 200:
                            pending.discard(t)
                    time.sleep(0.05)
            out[f"takeover_s_{how}"] = round(time.monotonic() - stopped, 2)
            return out
        finally:
            a.stop()
            b.stop()
            asyncio.run(drop_topics(sa.kafka_bootstrap, sa.topic_prefix))


def takeovers(
    events: list[dict], tenants: int, reps: int, timeouts: str, stores: list[str]
) -> dict[str, Any]:
    """The takeover alone, side by side: SIGTERM, then kill -9 under each session timeout, for each
    store mode, in turn, ``reps`` times; min and median seconds of each (and the tenants moved, ~half
    of them)."""
    cases = [(store, "stop", 10.0) for store in stores]
    cases += [(store, "kill", float(t)) for t in timeouts.split(",") for store in stores]
    seconds: dict[str, list[float]] = {f"{store}_{how}_session_{t:g}s": [] for store, how, t in cases}
    moved = []
    for _ in range(reps):
        for store, how, t in cases:
            got = reads_and_takeover(events, tenants, 0, how, t, store)
            seconds[f"{store}_{how}_session_{t:g}s"].append(got[f"takeover_s_{how}"])
            moved.append(got["tenants_moved"])
    return {
        "events": len(events),
        "tenants": tenants,
        "tenants_moved": {"min": min(moved), "max": max(moved)},
        "takeover_s": {
            k: {"min": min(v), "median": statistics.median(v), "all": v} for k, v in seconds.items()
        },
    }


def rebalances(events: int, tenants: int, reps: int, timeouts: str, seconds: float) -> dict[str, Any]:
    """Spurious rebalances under a session timeout: two processes that stay up, ``events`` produced
    at once every 10 s (bench/throughput's workload, new memory ids each time) for ``seconds``; the
    assignments each process logged after the group settled (every rebalance logs one per
    member), the group's state checked after each burst. Each timeout in turn, ``reps`` times."""
    counts: dict[str, list[int]] = {f"session_{float(t):g}s": [] for t in timeouts.split(",")}
    handled_per_s: dict[str, list[float]] = {k: [] for k in counts}
    for rep in range(reps):
        for t in timeouts.split(","):
            key = f"session_{float(t):g}s"
            with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp_:
                tmp = Path(tmp_)
                sa, sb = (s.model_copy(update={"log_level": "INFO"}) for s in settings_pair(tmp, float(t)))
                servers = started([sa, sb], tmp)
                try:
                    logs = [tmp / f"{i}.log" for i in range(2)]
                    settled = [p.read_text().count("partitions of ") for p in logs]
                    t0, burst, produced = time.monotonic(), 0, 0
                    while time.monotonic() - t0 < seconds:
                        batch = workload(events, tenants, seed=1000 * rep + burst)
                        for e in batch:
                            if "memory_id" in e["payload"]:
                                e["payload"]["memory_id"] = f"r{burst}-{e['payload']['memory_id']}"
                        produce(sa, batch)
                        produced += len(batch)
                        burst += 1
                        time.sleep(max(0.0, t0 + 10 * burst - time.monotonic()))
                    deadline = time.monotonic() + 120
                    while sum(handled(s) for s in servers) < produced and time.monotonic() < deadline:
                        time.sleep(0.1)
                    wall = time.monotonic() - t0
                    after = [p.read_text().count("partitions of ") for p in logs]
                    counts[key].append(sum(after) - sum(settled))
                    handled_per_s[key].append(round(produced / wall))
                finally:
                    for server in servers:
                        server.stop()
                    asyncio.run(drop_topics(sa.kafka_bootstrap, sa.topic_prefix))
            print(json.dumps({"rep": rep, key: counts[key][-1]}), flush=True)
    return {
        "events_per_burst": events,
        "seconds": seconds,
        "assignments_after_settling": counts,
        "events_per_s": handled_per_s,
    }


def footprint(server: Server) -> dict[str, Any]:
    """A process's threads, file descriptors, RSS, open stores and tenant copies on its disk."""
    assert server.proc is not None
    status = Path(f"/proc/{server.proc.pid}/status").read_text()
    field = {line.split(":")[0]: line.split(":")[1].split() for line in status.splitlines()}
    page = httpx.get(f"{server.url}/metrics", timeout=30).text
    open_stores = next(
        float(line.split()[-1]) for line in page.splitlines() if line.startswith("engram_open_stores ")
    )
    tenants_dir = server.settings.tenants_dir
    copies = sum(1 for d in tenants_dir.iterdir() if (d / "graph").is_dir()) if tenants_dir.is_dir() else 0
    return {
        "threads": int(field["Threads"][0]),
        "fds": len(os.listdir(f"/proc/{server.proc.pid}/fd")),
        "rss_mib": round(int(field["VmRSS"][0]) / 1024, 1),
        "open_stores": int(open_stores),
        "tenant_copies_on_disk": copies,
    }


def first_answers(server: Server, tenants: list[str]) -> dict[str, float]:
    """Seconds to the first answer (a list of its memories) of each of ``tenants``, one at a time:
    p50 and max, and how many answered 200."""
    took, ok = [], 0
    with httpx.Client(auth=server.http.auth, timeout=60) as http:
        for t in tenants:
            t0 = time.perf_counter()
            r = http.get(f"{server.url}/v1/tenants/{t}/memories", params={"limit": "5"})
            took.append(time.perf_counter() - t0)
            ok += r.status_code == 200 and bool(r.json()["data"])
    return {"p50_s": round(statistics.median(took), 3), "max_s": round(max(took), 3), "answered": ok}


def simulate(n: int, max_open: int, sample: int, rest_s: float) -> dict[str, Any]:
    """``n`` small tenants through two processes on disk (the default mode, scaled out), each with
    room for ``max_open`` open stores; then the second stopped and its tenants moved. The
    footprints are taken after ``rest_s`` of rest (idle text writers closed)."""
    events = workload(2 * n, n)  # each tenant: a memory, then a revision, a KPI or another memory
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp_:
        tmp = Path(tmp_)
        sa, sb = settings_pair(tmp, max_open_stores=max_open, snapshot_after_s=2.0)
        a, b = started([sa, sb], tmp)
        try:
            t0 = time.monotonic()
            produce(sa, events)
            last = 0
            while (done := handled(a) + handled(b)) < len(events):
                if done - last >= 2000:
                    print(
                        json.dumps({"handled": done, "of": len(events), "s": round(time.monotonic() - t0)}),
                        flush=True,
                    )
                    last = done
                time.sleep(0.5)
            wall = time.monotonic() - t0
            hot = {"a": footprint(a), "b": footprint(b)}
            time.sleep(rest_s)
            owners = {p["partition"]: p["owner"] for p in wait_members(sa, 2)["partitions"]}
            names = sorted({e["tenant"] for e in events})
            of_b = [t for t in names if owners[partition_for(t, PARTITIONS)] == b.url]
            of_a = [t for t in names if t not in set(of_b)]
            out: dict[str, Any] = {
                "tenants": n,
                "events": len(events),
                "max_open_stores": max_open,
                "projected_s": round(wall, 1),
                "events_per_s": round(len(events) / wall),
                "after_projecting": hot,
                f"after_{rest_s:g}s_of_rest": {"a": footprint(a), "b": footprint(b)},
                # the first tenants projected were evicted long since: cold
                "cold_first_answer": first_answers(a, of_a[:sample]),
            }
            stopped = time.monotonic()
            b.kill(signal.SIGTERM)  # its tenants are snapshotted if unsaved, and move to a
            wait_members(sa, 1)
            out["rebalanced_s"] = round(time.monotonic() - stopped, 2)
            out["moved_tenants"] = len(of_b)
            out["moved_cold_first_answer"] = first_answers(a, of_b[:sample])  # restored from snapshots
            time.sleep(rest_s)
            out["after_the_move_and_rest"] = {"a": footprint(a)}
            return out
        finally:
            a.stop()
            b.stop()
            asyncio.run(drop_topics(sa.kafka_bootstrap, sa.topic_prefix))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--events", type=int, default=3000)
    p.add_argument("--tenants", type=int, default=100)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--reads", type=int, default=200)
    p.add_argument(
        "--takeover-only",
        action="store_true",
        help="only the takeover: SIGTERM and kill -9 for each --session-timeouts, --reps times interleaved",
    )
    p.add_argument("--session-timeouts", default="10", help="comma-separated seconds (kill -9 takeover)")
    p.add_argument(
        "--stores", default="disk", help="comma-separated store modes: disk, memory (side by side)"
    )
    p.add_argument("--simulate", type=int, metavar="N", help="only the simulation of N small tenants")
    p.add_argument("--max-open", type=int, default=500, help="open stores each process may hold (--simulate)")
    p.add_argument(
        "--sample", type=int, default=50, help="cold tenants read for their first answer (--simulate)"
    )
    p.add_argument("--rest", type=float, default=15.0, help="seconds of rest before a footprint (--simulate)")
    p.add_argument(
        "--rebalances",
        type=float,
        metavar="SECONDS",
        help="only count rebalances of two processes under --events every 10 s for SECONDS, for each "
        "--session-timeouts, --reps times interleaved",
    )
    args = p.parse_args()
    stores = args.stores.split(",")
    if args.simulate:
        print(json.dumps(simulate(args.simulate, args.max_open, args.sample, args.rest), indent=2))
        return
    if args.rebalances:
        got = rebalances(args.events, args.tenants, args.reps, args.session_timeouts, args.rebalances)
        print(json.dumps(got, indent=2))
        return
    events = workload(args.events, args.tenants)
    if args.takeover_only:
        print(json.dumps(takeovers(events, args.tenants, args.reps, args.session_timeouts, stores), indent=2))
        return
    runs: dict[tuple[str, int], list[dict[str, float]]] = {(s, n): [] for s in stores for n in (1, 2)}
    for _ in range(args.reps):  # alternating, so the machine's load falls on each alike
        for store, processes in runs:
            runs[store, processes].append(rate(processes, events, store))
    result: dict[str, Any] = {"events": args.events, "tenants": args.tenants, "partitions": PARTITIONS}
    for (store, processes), got in runs.items():
        for key in ("events_per_s", "events_per_cpu_s"):
            values = [g[key] for g in got]
            median = statistics.median(values)
            result[f"{store}_{processes}p_{key}"] = {"min": round(min(values)), "median": round(median)}
    for store in stores:
        result[store] = reads_and_takeover(events, args.tenants, args.reads, "stop", store=store)
        result[store] |= reads_and_takeover(events, args.tenants, 0, "kill", store=store)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
