"""A steady write rate against a real ``engram serve`` for minutes: is the lag bounded and the memory flat?

A throughput bench finds the ceiling in seconds; a slow leak (a cache with no bound, a per-tenant
structure never dropped, a backlog the projector never quite clears) only shows over minutes at a
rate well below it. This holds ``--rate`` HTTP writes per second (remembers, round robin over
``--tenants`` tenants, each a memory of its own) for ``--minutes``, and every ``--sample-s``
seconds records the consumer lag and the outcomes from ``/readyz``, the resident memory of the
server process and of its children (the query-embedding helper), and its CPU time. Prints one JSON
object (the samples and a summary: lag max, RSS at start and end, the RSS slope after the first
minute by least squares, the write latencies) and plots ``bench/out/soak.png``.

It is a bench, not a test: on a shared machine the figures move with whatever else runs.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
from engram.streams import kafka_local
from engram.streams.topics import drop_topics, ensure_topics

from engram.settings import REPO, load_settings
from tests.harness import Server, isolated_settings

OUT = REPO / "bench" / "out"
WORDS = [
    "budget",
    "roas",
    "meta",
    "google",
    "tiktok",
    "launch",
    "target",
    "cap",
    "creative",
    "audience",
    "retention",
    "churn",
]


def body(i: int) -> dict[str, Any]:
    """A memory of its own (label and content vary, so each write is a new memory, not a revision)."""
    words = " ".join(WORDS[(i * k) % len(WORDS)] for k in (1, 3, 5, 7))
    return {
        "source": "agent",
        "kind": "fact",
        "importance": 3,
        "label": f"Soak note {i}",
        "content": f"Observation {i}: {words}, measured in week {i % 52}.",
    }


def rss_mb(pid: int) -> float:
    """Resident set of one process (``VmRSS``), 0 if it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            found += [int(c) for c in task.read_text().split()]
        except OSError:
            continue
    return found + [g for c in found for g in children(c)]


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def slope_per_minute(ts: list[float], ys: list[float]) -> float:
    """Least-squares slope of ``ys`` over ``ts`` (seconds), per minute."""
    if len(ts) < 2:
        return 0.0
    mt, my = statistics.fmean(ts), statistics.fmean(ys)
    den = sum((t - mt) ** 2 for t in ts)
    return 60 * sum((t - mt) * (y - my) for t, y in zip(ts, ys, strict=True)) / den if den else 0.0


class Writer(threading.Thread):
    """Sends write ``i`` at ``start + i / rate`` (an open loop: a slow answer delays no later write,
    up to ``POOL`` in flight) and counts the writes that started over a second late, which say the
    offered rate was not held."""

    POOL = 32

    def __init__(self, server: Server, rate: float, tenants: int, seconds: float) -> None:
        super().__init__(daemon=True)
        self.server, self.rate, self.tenants, self.seconds = server, rate, tenants, seconds
        self.latencies: list[float] = []
        self.acked = self.errors = self.late = 0
        self.statuses: dict[str, int] = {}
        self.lock = threading.Lock()
        self.stop = threading.Event()

    def one(self, i: int, due: float) -> None:
        t0 = time.perf_counter()
        late = time.monotonic() - due > 1.0
        try:
            url = f"{self.server.url}/v1/tenants/soak-{i % self.tenants}/memories"
            r = self.server.http.post(url, json=body(i))
            status = str(r.status_code)
        except httpx.HTTPError as exc:
            status = type(exc).__name__
        with self.lock:
            self.latencies.append((time.perf_counter() - t0) * 1000)
            self.statuses[status] = self.statuses.get(status, 0) + 1
            self.late += late
            if status == "202":
                self.acked += 1
            else:
                self.errors += 1

    def run(self) -> None:
        start = time.monotonic()
        with ThreadPoolExecutor(self.POOL) as pool:
            i = 0
            while not self.stop.is_set() and (due := start + i / self.rate) < start + self.seconds:
                if (wait := due - time.monotonic()) > 0:
                    time.sleep(wait)
                pool.submit(self.one, i, due)
                i += 1


def soak(args: argparse.Namespace) -> dict[str, Any]:
    base = load_settings()
    kafka_local.start(base)
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
        settings = isolated_settings(base, Path(tmp) / "data", partitions=args.partitions).model_copy(
            update={"store": args.store, "log_level": "WARNING"}
        )
        asyncio.run(ensure_topics(settings))
        server = Server(settings, Path(tmp) / "server.log").start()
        writer = Writer(server, args.rate, args.tenants, args.minutes * 60)
        samples: list[dict[str, Any]] = []
        try:
            server.wait_ready(timeout=120, interval=0.5)
            assert server.proc is not None
            pid = server.proc.pid
            url = f"{server.url}/v1/tenants/soak-0/memories"
            r = server.http.post(url, params={"wait": "true"}, json=body(-1))
            assert r.status_code == 202, r.text  # warm: the embedder and the first store are open
            cpu0, began = cpu_seconds(pid), time.monotonic()
            writer.start()
            while True:
                t = time.monotonic() - began
                try:
                    ready = server.readyz()
                except (httpx.HTTPError, ValueError) as exc:
                    ready = {"lag": {}, "handled": {}, "reason": str(exc)}
                rss = rss_mb(pid)
                with writer.lock:
                    acked, errors = writer.acked, writer.errors
                samples.append(
                    {
                        "t_s": round(t, 1),
                        "lag": sum(ready.get("lag", {}).values()),
                        "applied": ready.get("handled", {}).get("applied", 0),
                        "handled": sum(ready.get("handled", {}).values()),
                        "rss_mb": round(rss, 1),
                        "rss_with_children_mb": round(rss + sum(rss_mb(c) for c in children(pid)), 1),
                        "cpu_s": round(cpu_seconds(pid) - cpu0, 2),
                        "acked": acked,
                        "errors": errors,
                    }
                )
                if t >= args.minutes * 60 or server.proc.poll() is not None:
                    break
                time.sleep(max(0.0, args.sample_s - (time.monotonic() - began - t)))
            writer.stop.set()
            writer.join()
            drained = server.wait_ready(timeout=300, interval=0.5)
        finally:
            server.stop()
            asyncio.run(drop_topics(settings.kafka_bootstrap, settings.topic_prefix))
    return {"samples": samples, "drained": drained, "writer": writer}


def summarise(args: argparse.Namespace, run: dict[str, Any]) -> dict[str, Any]:
    samples, writer = run["samples"], run["writer"]
    after = [s for s in samples if s["t_s"] >= 60] or samples  # the first minute warms caches up
    lat = sorted(writer.latencies)
    last = samples[-1]
    return {
        "config": {k: getattr(args, k) for k in ("minutes", "rate", "tenants", "partitions", "store")},
        "summary": {
            "writes_acked": writer.acked,
            "write_errors": writer.errors,
            "write_statuses": writer.statuses,
            "writes_late_over_1s": writer.late,
            "writes_per_s_in_window": round(last["acked"] / max(last["t_s"], 1e-9), 2),
            "write_ms_p50": round(lat[len(lat) // 2], 1) if lat else None,
            "write_ms_p95": round(lat[int(len(lat) * 0.95)], 1) if lat else None,
            "lag_max": max(s["lag"] for s in samples),
            "lag_end": last["lag"],
            "rss_start_mb": samples[0]["rss_mb"],
            "rss_end_mb": last["rss_mb"],
            "rss_max_mb": max(s["rss_mb"] for s in samples),
            "rss_slope_mb_per_min_after_1min": round(
                slope_per_minute([s["t_s"] for s in after], [s["rss_mb"] for s in after]), 2
            ),
            "rss_with_children_start_mb": samples[0]["rss_with_children_mb"],
            "rss_with_children_end_mb": last["rss_with_children_mb"],
            "applied_per_cpu_second": round(last["applied"] / last["cpu_s"], 1) if last["cpu_s"] else None,
            "server_cpu_share": round(last["cpu_s"] / max(last["t_s"], 1e-9), 3),
            "handled_after_drain": sum(run["drained"].get("handled", {}).values()),
        },
        "samples": samples,
    }


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = result["samples"]
    t = [x["t_s"] / 60 for x in s]
    fig, (lag, mem, rate) = plt.subplots(3, 1, figsize=(8, 8), sharex=True)
    c = result["config"]
    fig.suptitle(
        f"engram soak: {c['rate']} writes/s over {c['tenants']} tenants, "
        f"{c['minutes']} min, store={c['store']}"
    )
    lag.plot(t, [x["lag"] for x in s], marker=".")
    lag.set_ylabel("consumer lag (records)")
    mem.plot(t, [x["rss_mb"] for x in s], marker=".", label="engram serve")
    mem.plot(t, [x["rss_with_children_mb"] for x in s], marker=".", label="with children")
    mem.set_ylabel("RSS (MB)")
    mem.legend(loc="lower right")
    applied = [
        (b["applied"] - a["applied"]) / max(b["t_s"] - a["t_s"], 1e-9) for a, b in itertools.pairwise(s)
    ]
    rate.plot(t[1:], applied, marker=".")
    rate.set_ylabel("applied events/s")
    rate.set_xlabel("minutes")
    for ax in (lag, mem, rate):
        ax.grid(alpha=0.3)
        ax.set_ylim(bottom=0)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--rate", type=float, default=20.0, help="writes per second")
    ap.add_argument("--tenants", type=int, default=30)
    ap.add_argument("--partitions", type=int, default=12)
    ap.add_argument("--sample-s", type=float, default=10.0)
    ap.add_argument("--store", choices=("disk", "memory"), default="disk", help="the server's ENGRAM_STORE")
    ap.add_argument("--png", type=Path, default=OUT / "soak.png")
    args = ap.parse_args()
    result = summarise(args, soak(args))
    print(json.dumps(result, indent=1), flush=True)  # first: the figures never wait on the plot
    try:
        plot(result, args.png)
    except ImportError as exc:  # matplotlib is not a dependency: the plot is extra
        print(f"no plot ({exc}): pip install matplotlib for {args.png}", file=sys.stderr)


if __name__ == "__main__":
    main()
