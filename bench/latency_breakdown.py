"""Where a ``?wait=true`` write's time goes, and two builds side by side.

Starts one real `engram serve` per checkout given (``--checkout``, default: this one) on the dev
broker, each with a tracer installed in its process (``serve`` below: wall-clock stamps along the
write path, one JSON line per write), then POSTs ``--writes`` memories with ``?wait=true``, one at a
time, alternating between the servers (so a busy moment of the shared machine falls on both), over
``--runs`` runs. Prints one JSON object: per server and run, p50/p99 of the round trip and the
median of each stage (ms), and the client's CPU-free view of the servers' CPU per write.

Stages (each from the previous stamp): ``http_in`` client send -> the command starts (HTTP,
auth, body model); ``sealed`` checked, embedded, sealed, encoded (a build with the intake: checked
and drafted only); ``checked`` the pre-check against the tenant's graph (rivals, governance, the
plan); ``acked`` produced and acked by Kafka (with the intake: finished in a batch off the event
loop, then produced and acked);
``taken`` the projector took it in a batch (Faust fetch + ``BATCH_IDLE_S``); ``committed``
projected and committed to the graph; ``indexed`` the indexer's pass (refresh; before this branch
the tantivy commit too); ``released`` the waiting request woke; ``response`` back at the client.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import contextvars
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench.checkouts import importable
from engram.settings import load_settings
from tests.harness import Server, isolated_settings, settings_env

STAGES = ("http_in", "sealed", "checked", "acked", "taken", "committed", "indexed", "released", "response")


def install_tracer(out: Path) -> None:
    """Wrap the write path's steps with stamps (in the server's process)."""
    from engram.commands.writes import Commands
    from engram.streams import indexer as indexer_mod
    from engram.streams import projector_app
    from engram.streams.producer import EventProducer

    stamps: contextvars.ContextVar[dict[str, float] | None] = contextvars.ContextVar("stamps", default=None)
    by_pos: dict[tuple[int, int], dict[str, float]] = {}
    sink = out.open("a", buffering=1)

    def wrap_async(cls: Any, name: str, before: str | None, after: str | None) -> None:
        original = getattr(cls, name)

        @functools.wraps(original)
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            s = stamps.get()
            if s is None and name == "remember":
                s = {}
                stamps.set(s)
            if s is not None and before:
                s.setdefault(before, time.time())
            result = await original(*args, **kwargs)
            if s is not None and after:
                s[after] = time.time()
            return result

        setattr(cls, name, wrapper)

    wrap_async(Commands, "remember", "cmd_in", None)
    # a build with the intake (commands/intake.py) drafts a write, decides it, then finishes it
    # (embeds, seals, encodes) in a batch off the loop: "sealed" is the draft there, and the
    # finishing falls in "acked"; an older build framed it whole first and produced it itself
    drafting = "drafted" if hasattr(Commands, "drafted") else "validated"
    original_drafted = getattr(Commands, drafting)

    def drafted(self: Any, envelope: Any) -> Any:
        result = original_drafted(self, envelope)
        if (s := stamps.get()) is not None:
            s["sealed"] = time.time()
        return result

    setattr(Commands, drafting, drafted)

    def appended(original: Any) -> Any:
        async def traced(self: Any, item: Any) -> Any:
            if (s := stamps.get()) is not None:
                s["checked"] = time.time()
            pos = await original(self, item)
            if (s := stamps.get()) is not None:
                s["acked"] = time.time()
                s["log_append"] = pos.timestamp_ms / 1000
                by_pos.setdefault((pos.partition, pos.offset), {}).update(s)
                s["pos"] = (pos.partition, pos.offset)  # type: ignore[assignment]
            return pos

        return traced

    if hasattr(Commands, "_appended"):
        Commands._appended = appended(Commands._appended)  # type: ignore[method-assign]
    else:
        EventProducer.send = appended(EventProducer.send)  # type: ignore[method-assign]
    original_as_record = projector_app.as_record

    def as_record(message: Any) -> Any:
        record = original_as_record(message)
        key = (record.position.partition, record.position.offset)
        by_pos.setdefault(key, {})["taken"] = time.time()
        return record

    projector_app.as_record = as_record  # type: ignore[assignment]
    original_one = projector_app.Reporter._one

    def one(self: Any, i: int, result: Any) -> None:
        pos = self.records[i].position
        by_pos.setdefault((pos.partition, pos.offset), {})["committed"] = time.time()
        original_one(self, i, result)

    projector_app.Reporter._one = one  # type: ignore[method-assign]
    original_pass = indexer_mod.Indexer._pass

    async def index_pass(self: Any) -> None:
        batch = list(self._pending)
        started = time.time()
        await original_pass(self)
        done = time.time()
        for h in batch:
            s = by_pos.setdefault((h.position.partition, h.position.offset), {})
            s["index_start"], s["indexed"] = started, done

    indexer_mod.Indexer._pass = index_pass  # type: ignore[method-assign]
    original_wait = Commands._wait

    async def wait(self: Any, event: Any, pos: Any) -> None:
        await original_wait(self, event, pos)
        s = by_pos.pop((pos.partition, pos.offset), {})
        s["released"] = time.time()
        s["partition"], s["offset"] = pos.partition, pos.offset
        s["cpu"] = time.process_time()
        sink.write(json.dumps(s) + "\n")

    Commands._wait = wait  # type: ignore[method-assign]
    if profile := os.environ.get("LATENCY_PROFILE"):
        profile_sync_steps(Path(profile))


def profile_sync_steps(out: Path) -> None:
    """cProfile the write path's synchronous steps (check + embed + seal, rivals, pre-check); the
    cumulative stats are written to ``out`` every 50 writes."""
    import cProfile
    import pstats

    from engram.commands import writes
    from engram.streams.pipeline import Pipeline

    profiler = cProfile.Profile()
    calls = [0]

    def profiled(fn: Any, count: bool = False) -> Any:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            profiler.enable()
            try:
                return fn(*args, **kwargs)
            finally:
                profiler.disable()
                calls[0] += count
                if count and calls[0] % 50 == 0:
                    with out.open("w") as f:
                        pstats.Stats(profiler, stream=f).sort_stats("cumulative").print_stats(40)

        return wrapper

    if hasattr(Pipeline, "finish_many"):  # the intake's build: the batch's finishing, per batch
        Pipeline.finish_many = profiled(Pipeline.finish_many, count=True)  # type: ignore[method-assign]
    else:
        Pipeline.write = profiled(Pipeline.write, count=True)  # type: ignore[method-assign]
    Pipeline.precheck = profiled(Pipeline.precheck)  # type: ignore[method-assign]
    writes.rivals = profiled(writes.rivals)


def serve(trace: Path) -> int:
    """`engram serve` with the tracer installed."""
    install_tracer(trace)
    from engram.cli import main

    return main(["serve"])


def body(label: str) -> dict[str, Any]:
    content = "latency probe of the write path"
    return {"source": "agent", "label": label, "content": content, "kind": "fact", "importance": 3}


class Traced:
    def __init__(self, name: str, checkout: Path, root: Path, *, profile: bool = False) -> None:
        self.name, self.checkout, self.profile = name, checkout, profile
        base = load_settings()
        self.settings = isolated_settings(base, root / name / "data", partitions=12)
        self.trace = root / name / "trace.jsonl"
        self.trace.parent.mkdir(parents=True, exist_ok=True)
        self.server = Server(self.settings, root / name / "server.log")

    def start(self) -> None:
        self.settings.token_secret()
        env = {**os.environ, **settings_env(self.settings)}
        # that checkout's engram and stages first on the server's path (bench/checkouts.py), then
        # this one for the tracer's own helpers (the server runs this file's ``serve``)
        layout = importable(self.checkout, self.trace.parent / "checkout")
        here = Path(__file__).resolve().parents[1]
        env["PYTHONPATH"] = f"{layout}:{here}:{self.checkout / 'clients' / 'python'}"
        if self.profile:
            env["LATENCY_PROFILE"] = str(self.trace.with_name("profile.txt"))
        here = Path(__file__).resolve()
        code = (
            "import importlib.util, sys; "
            f"spec = importlib.util.spec_from_file_location('probe', {str(here)!r}); "
            "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); "
            f"sys.exit(m.serve(__import__('pathlib').Path({str(self.trace)!r})))"
        )
        with open(self.server.log_path, "ab") as log:
            self.server.proc = subprocess.Popen(
                [sys.executable, "-c", code], env=env, cwd=layout, stdout=log, stderr=subprocess.STDOUT
            )
        self.server.wait_ready(timeout=120)
        self.client = httpx.Client(base_url=self.server.url, timeout=60, auth=self.server.http.auth)
        for i in range(5):  # consumer group joined, stores opened, embedder warm
            self.write(f"warm{i}", "warm")

    def write(self, tenant: str, label: str) -> tuple[float, float, tuple[int, int]]:
        sent = time.time()
        r = self.client.post(f"/v1/tenants/{tenant}/memories", params={"wait": "true"}, json=body(label))
        got = time.time()
        assert r.status_code == 202 and r.json()["applied"], r.text
        return sent, got, (r.json()["partition"], r.json()["offset"])

    def stop(self) -> None:
        self.client.close()
        self.server.stop()


def stages(trace: dict[str, Any], sent: float, got: float) -> dict[str, float]:
    points = [
        ("http_in", trace["cmd_in"]),
        ("sealed", trace["sealed"]),
        ("checked", trace["checked"]),
        ("acked", trace["acked"]),
        ("taken", trace["taken"]),
        ("committed", trace["committed"]),
        ("indexed", trace["indexed"]),
        ("released", trace["released"]),
        ("response", got),
    ]
    out, last = {}, sent
    for name, at in points:
        out[name] = (at - last) * 1000
        last = at
    return out


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--writes", type=int, default=300, help="writes per server and run")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument(
        "--checkout",
        action="append",
        metavar="NAME=PATH",
        help="a server of this source checkout (repeatable); default: this one",
    )
    ap.add_argument("--keep", action="store_true", help="keep the servers' logs and traces")
    ap.add_argument("--profile", action="store_true", help="cProfile the synchronous steps (kept)")
    args = ap.parse_args()
    here = Path(__file__).resolve().parent.parent
    checkouts = [c.split("=", 1) for c in (args.checkout or [f"this={here}"])]
    from engram.streams import kafka_local

    kafka_local.start(load_settings())
    report: dict[str, Any] = {"benchmark": "latency_breakdown", "writes": args.writes, "runs": []}
    keep = contextlib.nullcontext(tempfile.mkdtemp(prefix="latency-")) if args.keep or args.profile else None
    with keep or tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
        for run in range(args.runs):
            servers = [
                Traced(name, Path(path), Path(tmp) / f"run{run}", profile=args.profile)
                for name, path in checkouts
            ]
            from engram.streams.topics import ensure_topics

            for s in servers:
                asyncio.run(ensure_topics(s.settings))
                try:
                    s.start()
                except Exception:
                    print(s.server.log_path.read_text()[-4000:], file=sys.stderr)
                    raise
            sent: dict[str, list[tuple[float, float, tuple[int, int]]]] = {s.name: [] for s in servers}
            try:
                for i in range(args.writes):
                    for s in servers if i % 2 == 0 else reversed(servers):
                        sent[s.name].append(s.write(f"lat{i % 10}", f"w{i}"))
            finally:
                for s in servers:
                    s.stop()
            figures = {}
            for s in servers:
                traces = {}
                for line in s.trace.read_text().splitlines():
                    t = json.loads(line)
                    traces[(t["partition"], t["offset"])] = t
                rows = [stages(traces[pos], a, b) for a, b, pos in sent[s.name] if pos in traces]
                total = [(b - a) * 1000 for a, b, _ in sent[s.name]]
                cpus = [traces[pos]["cpu"] for _, _, pos in sent[s.name] if pos in traces]
                figures[s.name] = {
                    "p50": round(statistics.median(total), 1),
                    "p99": round(percentile(total, 0.99), 1),
                    "max": round(max(total), 1),
                    "server_cpu_ms_per_write": round((cpus[-1] - cpus[0]) * 1000 / max(1, len(cpus) - 1), 2),
                    "stage_median_ms": {k: round(statistics.median(r[k] for r in rows), 2) for k in STAGES},
                    "stage_p99_ms": {k: round(percentile([r[k] for r in rows], 0.99), 2) for k in STAGES},
                }
            report["runs"].append(figures)
            print(json.dumps({"run": run, "dir": tmp, **figures}), file=sys.stderr)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
