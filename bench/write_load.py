"""How many writes a real `engram serve` acks under concurrent HTTP load, two builds side by side.

Why: the write path's throughput is what a busy deployment meets first, and a change to it
(commands/, streams/pipeline.py, api/) is only worth it if the acked rate, the latency or the CPU
per write move. This starts one plain ``python -m engram.cli serve`` per build, the baseline (a
git ref, checked out in a temporary ``git worktree``) and the candidate (a source tree, default
this one), each on a slice of the dev broker of its own (topics, consumer group, data directory:
``tests/harness.py``'s ``isolated_settings``), one at a time, and drives it with these loads,
``--seconds`` each, after a warm-up (a few writes per tenant, ``?wait=true``: the stores open, the
embedder warm):

``remember_1``   one client on one keep-alive connection, ``POST .../memories`` back to back
                 (no ``wait``), a new company memory each time, tenants round robin;
``remember_16``  ``--clients`` (16) such clients at once, each over every tenant;
``kpi_16``       ``--clients`` clients posting KPI observations (``POST .../kpis``) as operators;
``bulk``         ``--bulk-clients`` (4) clients posting ``--batch`` (100) memories at a time to
                 ``POST .../memories:batch``, if the build has that route (a probe: a build that
                 answers 404/405 reports ``null``).

Between loads the server drains (its projector catches up with the log: ``drain_s``), so a load
does not pay for the one before. Builds alternate per round (``--rounds``; the order flips every
round), each round on a fresh server and fresh topics, so a busy moment of the shared machine falls
on both; each figure is reported per run and as min and median over the rounds.

How to read a load's figures: ``acked_per_s`` is 2xx answers per second of the measuring window
(for ``bulk``, memories acked in 2xx batches), which opens once every client has had an answer
(``ramp_s`` after the clients start: the steady state, every client with a request in flight) and
closes ``--seconds`` later (the requests then in flight are answered but not counted); 429 and
503 answers are counted in ``statuses`` (the whole load's: ramp, window and close), never as
acked; ``p50_ms``/``p95_ms``/``p99_ms`` are the round trips of the acked requests (a
whole batch for ``bulk``). ``cpu_ms_per_write`` is the server process's CPU (all threads and its
children, from ``/proc``) over the window per acked write; ``server_cpu_share`` the same CPU per
second of window (in cores), ``main_thread_cpu_share`` the main thread's alone (the event loop: near
1.0 it is the bottleneck, whatever the core count), then the other threads' (together, and the
busiest) and the child processes'; ``client_cpu_share`` this process's own (the
load generator: near 1.0 the figures measure the client, not the server). ``topic_records`` is
the events topic's growth over the load against ``acked_total`` (every 2xx, also those answered
after the window closed). ``server_logs`` counts the ERROR/CRITICAL/Traceback lines of each
server's log. The machine is shared with the client (and whatever else runs): compare the builds
of one run, not figures of different runs.

    .venv/bin/python -m bench.write_load                   # both builds, 3 rounds of 30 s loads
    .venv/bin/python -m bench.write_load --only candidate --loads remember_16 --seconds 10
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from aiokafka import AIOKafkaConsumer, TopicPartition
from engram.streams import kafka_local
from engram.streams.topics import drop_topics, ensure_topics

from bench.checkouts import importable
from bench.soak import body, children
from engram.settings import Settings, load_settings
from tests.harness import Server, isolated_settings, settings_env

HERE = Path(__file__).resolve().parents[1]
LOADS = ("remember_1", "remember_16", "kpi_16", "bulk")
METRICS = ("roas", "cpa", "ctr", "cvr")
LOG_TROUBLE = re.compile(r"\b(ERROR|CRITICAL)\b|Traceback")
CLK_TCK = os.sysconf("SC_CLK_TCK")

# a request: (path, JSON body, tenant)
Request = tuple[str, dict[str, Any], str]


# --- the server's CPU, from /proc ------------------------------------------------------------


def stat_fields(path: Path) -> list[str]:
    """The fields of a ``/proc/.../stat`` after the command name (field 3, ``state``, is index 0)."""
    return path.read_text().rsplit(")", 1)[1].split()


@dataclass
class CpuSample:
    """CPU seconds of a process tree at one moment: the whole of it (``total``), and per thread of
    the top process (Python names no OS thread, so threads go by id; the main one's id is the pid)."""

    total: float
    threads: dict[int, float]
    at: float = field(default_factory=time.monotonic)


def sample_cpu(pid: int) -> CpuSample:
    """utime+stime of ``pid`` (all its threads), of its reaped children (cutime+cstime) and of its
    live descendants (the query-embedding helper), and of each of ``pid``'s threads."""
    f = stat_fields(Path(f"/proc/{pid}/stat"))
    total = sum(int(x) for x in f[11:15]) / CLK_TCK
    for child in children(pid):
        with contextlib.suppress(OSError):
            total += sum(int(x) for x in stat_fields(Path(f"/proc/{child}/stat"))[11:13]) / CLK_TCK
    threads: dict[int, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError, ValueError):
            threads[int(task.name)] = sum(int(x) for x in stat_fields(task / "stat")[11:13]) / CLK_TCK
    return CpuSample(total, threads)


def cpu_figures(pid: int, before: CpuSample, after: CpuSample, acked: int) -> dict[str, Any]:
    """The server's CPU over a window: per acked write, and as shares of one core per second of
    window (the whole tree; the main thread; the busiest other thread; the other threads
    together; the child processes, and threads that ended in the window)."""
    wall = max(after.at - before.at, 1e-9)
    used = after.total - before.total
    per_thread = {tid: s - before.threads.get(tid, 0.0) for tid, s in after.threads.items()}
    main = per_thread.pop(pid, 0.0)
    return {
        "cpu_ms_per_write": round(used * 1000 / acked, 3) if acked else None,
        "server_cpu_share": round(used / wall, 3),
        "main_thread_cpu_share": round(main / wall, 3),
        "busiest_other_thread_cpu_share": round(max(per_thread.values(), default=0.0) / wall, 3),
        "other_threads_cpu_share": round(sum(per_thread.values()) / wall, 3),
        "children_cpu_share": round(max(0.0, used - main - sum(per_thread.values())) / wall, 3),
    }


# --- the loads ------------------------------------------------------------------------------


def kpi_body(i: int) -> dict[str, Any]:
    """A pipeline-style KPI observation: a few metrics over twelve periods, the value moving."""
    return {
        "source": "operator",
        "metric": METRICS[i % len(METRICS)],
        "value": round(1 + (i % 997) / 100, 2),
        "period": f"2026-{i // len(METRICS) % 12 + 1:02d}",
    }


@dataclass
class Tally:
    """What the clients of one load saw: ``acked``/``latencies_ms`` are the window's only, the
    rest the whole load's (the ramp, the window and the answers to the requests in flight at its
    close)."""

    clients: int
    start: float = float("inf")  # the window: set once every client has had an answer
    until: float = float("inf")
    answered: set[int] = field(default_factory=set)  # the clients that had an answer
    ramped: asyncio.Event = field(default_factory=asyncio.Event)
    statuses: Counter[str] = field(default_factory=Counter)
    latencies_ms: list[float] = field(default_factory=list)
    acked: int = 0  # acked writes (memories of a batch) answered inside the window
    acked_requests: int = 0
    acked_total: int = 0  # every acked write, also those answered after the window
    item_statuses: Counter[str] = field(default_factory=Counter)  # a batch's results


def batch_acked(r: httpx.Response, tally: Tally) -> int:
    """The memories a 200 batch answer acked: each result that is no error (a ``status`` outside
    2xx or an ``error`` key), the results' kinds counted in ``tally.item_statuses``."""
    try:
        results = r.json()["results"]
    except (ValueError, KeyError, TypeError):
        tally.item_statuses["unreadable answer"] += 1
        return 0
    acked = 0
    for x in results:
        status = x.get("status") if isinstance(x, dict) else None
        ok = isinstance(x, dict) and (200 <= status < 300 if isinstance(status, int) else "error" not in x)
        tally.item_statuses[str(status) if status is not None else ("ok" if ok else "error")] += 1
        acked += ok
    return acked


async def client_loop(
    k: int,
    url: str,
    headers: dict[str, dict[str, str]],
    requests: Iterator[Request],
    tally: Tally,
    *,
    batch: bool,
) -> None:
    """Client ``k`` on one keep-alive connection, a request as soon as the last is answered, until
    the window closes."""
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client:
        while time.monotonic() < tally.until:
            path, payload, tenant = next(requests)
            t0 = time.monotonic()
            try:
                r = await client.post(path, json=payload, headers=headers[tenant])
                status = str(r.status_code)
            except httpx.HTTPError as exc:
                r, status = None, type(exc).__name__
            done = time.monotonic()
            tally.statuses[status] += 1
            tally.answered.add(k)
            if len(tally.answered) == tally.clients:
                tally.ramped.set()
            if r is None or not r.is_success:
                continue
            writes = batch_acked(r, tally) if batch else 1
            tally.acked_total += writes
            if tally.start <= done <= tally.until:
                tally.acked += writes
                tally.acked_requests += 1
                tally.latencies_ms.append((done - t0) * 1000)


def requests_for(
    load: str, tenants: list[str], counter: Iterator[int], start: int, batch: int
) -> Iterator[Request]:
    """The endless requests of one client of ``load``, its tenants round robin from ``start``."""
    for k in itertools.count(start):
        t = tenants[k % len(tenants)]
        if load.startswith("remember"):
            yield f"/v1/tenants/{t}/memories", body(next(counter)), t
        elif load.startswith("kpi"):
            yield f"/v1/tenants/{t}/kpis", kpi_body(next(counter)), t
        else:
            yield (
                f"/v1/tenants/{t}/memories:batch",
                {"memories": [body(next(counter)) for _ in range(batch)]},
                t,
            )


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))], 2)


async def topic_records(settings: Settings) -> int:
    """Records in the events topic (the sum of its partitions' end offsets)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.kafka_bootstrap)
    await consumer.start()
    try:
        parts = [TopicPartition(settings.events_topic, p) for p in range(settings.events_partitions)]
        return sum((await consumer.end_offsets(parts)).values())
    finally:
        await consumer.stop()


# --- one build's server ---------------------------------------------------------------------


class BuildServer:
    """One build's ``python -m engram.cli serve`` on a slice of the broker of its own, under ``root``."""

    def __init__(self, checkout: Path, root: Path, args: argparse.Namespace) -> None:
        self.args = args
        self.layout = importable(checkout, root / "layout")
        settings = isolated_settings(load_settings(), root / "data", partitions=args.partitions)
        # its own ontology and rules, not this checkout's (settings_env names them always)
        engram_pkg = self.layout / "engram"
        self.settings = settings.model_copy(
            update={
                "ontology_dir": (engram_pkg / "ontology").resolve(),
                "rules_dir": (engram_pkg / "rules").resolve(),
            }
        )
        self.server = Server(self.settings, root / "server.log")
        self.tenants = [f"wl-{k}" for k in range(args.tenants)]
        self.counter = itertools.count()  # every body of this server a memory of its own
        self.topics_made = False

    @property
    def pid(self) -> int:
        assert self.server.proc is not None
        return self.server.proc.pid

    def start(self) -> None:
        asyncio.run(ensure_topics(self.settings))
        self.topics_made = True
        self.settings.token_secret()  # made before the server starts, so both sides sign alike
        env = {**os.environ, **settings_env(self.settings), "PYTHONPATH": str(self.layout)}
        with open(self.server.log_path, "ab") as log:
            self.server.proc = subprocess.Popen(
                [sys.executable, "-m", "engram.cli", "serve"],
                env=env,
                cwd=self.layout,  # `-m` puts the working directory first on sys.path
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.server.wait_ready(timeout=180, interval=0.2)
        self.headers = {t: self.server.bearer(t, role="operator") for t in self.tenants}

    def stop(self) -> None:
        proc = self.server.proc
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)
        self.server.http.close()
        if self.topics_made:
            asyncio.run(drop_topics(self.settings.kafka_bootstrap, self.settings.topic_prefix))
            self.topics_made = False

    def log_trouble(self) -> dict[str, Any]:
        """The server log's ERROR/CRITICAL/Traceback lines: how many, and the first few."""
        try:
            lines = [
                x
                for x in self.server.log_path.read_text(errors="replace").splitlines()
                if LOG_TROUBLE.search(x)
            ]
        except OSError:
            return {"lines": 0, "first": []}
        return {"lines": len(lines), "first": [x[:300] for x in lines[:5]]}

    async def warm(self, loads: list[str]) -> None:
        """Two writes per tenant with ``wait`` (a KPI too if measured): every tenant's store open,
        the embedder and the connections warm."""

        async def one(client: httpx.AsyncClient, t: str) -> None:
            for _ in range(2):
                r = await client.post(
                    f"/v1/tenants/{t}/memories",
                    params={"wait": "true"},
                    json=body(next(self.counter)),
                    headers=self.headers[t],
                )
                r.raise_for_status()
            if "kpi_16" in loads:
                r = await client.post(
                    f"/v1/tenants/{t}/kpis",
                    params={"wait": "true"},
                    json=kpi_body(next(self.counter)),
                    headers=self.headers[t],
                )
                r.raise_for_status()

        async with httpx.AsyncClient(base_url=self.server.url, timeout=120) as client:
            await asyncio.gather(*(one(client, t) for t in self.tenants))

    def has_bulk(self) -> tuple[bool, int]:
        """Whether the build answers ``memories:batch`` (a one-memory batch), and the probe's status."""
        t = self.tenants[0]
        r = httpx.post(
            f"{self.server.url}/v1/tenants/{t}/memories:batch",
            json={"memories": [body(next(self.counter))]},
            headers=self.headers[t],
            timeout=120,
        )
        return r.status_code not in (404, 405), r.status_code

    async def measure(self, load: str) -> dict[str, Any]:
        """Run ``load``; its figures. The measuring window (``--seconds``) opens once every client
        has had an answer (each has a request in flight: the steady state, so a batch taking
        seconds is not counted short by the clients' start), and closes on the requests then in
        flight (answered, not counted)."""
        args = self.args
        n = {"remember_1": 1, "bulk": args.bulk_clients}.get(load, args.clients)
        records0 = await topic_records(self.settings)
        tally = Tally(clients=n)
        clients = [
            asyncio.create_task(
                client_loop(
                    k,
                    self.server.url,
                    self.headers,
                    requests_for(load, self.tenants, self.counter, k, args.batch),
                    tally,
                    batch=load == "bulk",
                )
            )
            for k in range(n)
        ]
        ramp0 = time.monotonic()
        with contextlib.suppress(TimeoutError):  # a client with no answer in a minute: measure anyway
            await asyncio.wait_for(tally.ramped.wait(), timeout=60)
        cpu0, client0 = sample_cpu(self.pid), time.process_time()
        tally.start, tally.until = cpu0.at, cpu0.at + args.seconds
        await asyncio.sleep(max(0.0, tally.until - time.monotonic()))
        cpu1, client1 = sample_cpu(self.pid), time.process_time()
        await asyncio.gather(*clients)  # the requests in flight at the close: answered, not counted
        window = cpu1.at - cpu0.at
        lat = tally.latencies_ms
        figures: dict[str, Any] = {
            "clients": n,
            "ramp_s": round(cpu0.at - ramp0, 2),
            "window_s": round(window, 2),
            "acked": tally.acked,
            "acked_per_s": round(tally.acked / window, 2),
            "statuses": dict(sorted(tally.statuses.items())),
            "p50_ms": percentile(lat, 0.50),
            "p95_ms": percentile(lat, 0.95),
            "p99_ms": percentile(lat, 0.99),
            **cpu_figures(self.pid, cpu0, cpu1, tally.acked),
            "client_cpu_share": round((client1 - client0) / window, 3),
            "acked_total": tally.acked_total,
            "topic_records": await topic_records(self.settings) - records0,
        }
        if load == "bulk":
            figures["batches_acked_per_s"] = round(tally.acked_requests / window, 2)
            figures["item_statuses"] = dict(sorted(tally.item_statuses.items()))
        return figures

    def drain(self) -> float | None:
        """Seconds until the projector has handled every record in the log (None: not in 600 s)."""
        t0 = time.monotonic()
        try:
            self.server.wait_ready(timeout=600, interval=0.2)
        except TimeoutError:
            return None
        return round(time.monotonic() - t0, 2)


# --- the run ----------------------------------------------------------------------------------


def say(*parts: Any) -> None:
    print(*parts, file=sys.stderr, flush=True)


def git(*argv: str, cwd: Path = HERE) -> str:
    return subprocess.run(["git", *argv], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def one_round(name: str, checkout: Path, root: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Start ``checkout``'s server, run each load, stop it; the figures per load (bulk: None if the
    build has no batch route), what its log said and, if it failed, why (the loads done before
    the failure are kept)."""
    root.mkdir(parents=True)
    build = BuildServer(checkout, root, args)
    out: dict[str, Any] = {}
    try:
        where = f"topics {build.settings.topic_prefix}.*, log {build.server.log_path}"
        say(f"[{name}] starting {checkout} ({where})")
        build.start()
        asyncio.run(build.warm(args.loads))
        build.drain()
        for load in args.loads:
            if load == "bulk":
                supported, status = build.has_bulk()
                if not supported:
                    say(f"[{name}] bulk: memories:batch answered {status}; null")
                    out[load] = None
                    continue
                figures = {"probe_status": status, **asyncio.run(build.measure(load))}
            else:
                figures = asyncio.run(build.measure(load))
            figures["drain_s"] = build.drain()
            out[load] = figures
            say(f"[{name}] {load}: {json.dumps(figures)}")
    except Exception as exc:  # a build failing (to start) is a finding, not the end of the run
        out["error"] = f"{type(exc).__name__}: {str(exc)[:500]}"
        with contextlib.suppress(OSError):
            say(f"[{name}] failed; log tail:\n{build.server.log_path.read_text(errors='replace')[-4000:]}")
    finally:
        build.stop()
        out["server_log"] = build.log_trouble()
    return out


def summarise(runs: list[dict[str, Any] | None]) -> dict[str, Any] | None:
    """Per numeric figure, min and median over the rounds (a load a build does not have: None)."""
    done = [r for r in runs if r is not None]
    if not done:
        return None
    out: dict[str, Any] = {"runs": done}
    for key, value in done[0].items():
        values = [r[key] for r in done if isinstance(r.get(key), int | float)]
        if (
            isinstance(value, int | float)
            and values
            and key not in ("clients", "probe_status", "ramp_s", "window_s", "acked")
        ):
            out[key] = {"min": min(values), "median": round(statistics.median(values), 3)}
    out["statuses"] = dict(sum((Counter(r["statuses"]) for r in done), Counter()))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=30.0, help="measuring window of each load")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tenants", type=int, default=16)
    ap.add_argument("--clients", type=int, default=16, help="clients of remember_16 and kpi_16")
    ap.add_argument("--bulk-clients", type=int, default=4)
    ap.add_argument("--batch", type=int, default=100, help="memories per bulk request")
    ap.add_argument("--partitions", type=int, default=12, help="partitions of each build's events topic")
    ap.add_argument("--loads", default=",".join(LOADS), help=f"comma list of {', '.join(LOADS)}")
    ap.add_argument("--baseline", default="d0db659", help="git ref of the baseline build")
    ap.add_argument("--candidate", type=Path, default=HERE, help="source tree of the candidate build")
    ap.add_argument("--only", choices=("baseline", "candidate"), help="run this build alone")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory (server logs)")
    args = ap.parse_args()
    args.loads = [x.strip() for x in args.loads.split(",") if x.strip()]
    if unknown := set(args.loads) - set(LOADS):
        ap.error(f"unknown loads: {', '.join(sorted(unknown))}")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a kill runs the finally blocks too

    kafka_local.start(load_settings())
    names = [args.only] if args.only else ["baseline", "candidate"]
    candidate = args.candidate.resolve()
    config: dict[str, Any] = {
        k: getattr(args, k)
        for k in ("seconds", "rounds", "tenants", "clients", "bulk_clients", "batch", "partitions", "loads")
    }
    if "baseline" in names:
        config["baseline"] = {"ref": args.baseline, "commit": git("rev-parse", f"{args.baseline}^{{commit}}")}
    if "candidate" in names:
        head = git("rev-parse", "HEAD", cwd=candidate)
        changed = len(git("status", "--porcelain", "--untracked-files=no", cwd=candidate).splitlines())
        config["candidate"] = {"path": str(candidate), "head": head, "changed_files": changed}
    machine = {"cpus": os.cpu_count(), "loadavg_start": os.getloadavg()}

    tmp = Path(tempfile.mkdtemp(prefix="write-load-"))
    worktree: Path | None = None
    runs: dict[str, dict[str, list[dict[str, Any] | None]]] = {n: {x: [] for x in args.loads} for n in names}
    logs: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    errors: dict[str, list[str]] = {n: [] for n in names}
    try:
        checkouts = {"candidate": candidate}
        if "baseline" in names:
            worktree = tmp / "baseline-src"
            git("worktree", "add", "--detach", str(worktree), config["baseline"]["commit"])
            checkouts["baseline"] = worktree
        for r in range(args.rounds):
            for name in names if r % 2 == 0 else names[::-1]:
                say(f"--- round {r + 1}/{args.rounds}: {name}")
                got = one_round(name, checkouts[name], tmp / f"round{r}" / name, args)
                logs[name].append({"round": r + 1, **got.pop("server_log")})
                if error := got.pop("error", None):
                    errors[name].append(f"round {r + 1}: {error}")
                for load, figures in got.items():
                    runs[name][load].append(figures)
    finally:
        if worktree is not None:
            subprocess.run(["git", "worktree", "remove", "--force", str(worktree)], cwd=HERE, check=False)
            subprocess.run(["git", "worktree", "prune"], cwd=HERE, check=False)
        if args.keep:
            say(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)

    machine["loadavg_end"] = os.getloadavg()
    builds: dict[str, Any] = {}
    for name in names:
        builds[name] = {load: summarise(runs[name][load]) for load in args.loads}
        builds[name]["server_logs"] = logs[name]
        if errors[name]:
            builds[name]["errors"] = errors[name]
    report = {"benchmark": "write_load", "machine": machine, "config": config, "builds": builds}
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
