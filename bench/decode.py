"""The projector's decode path alone, in process, in µs per event: what issue #27 item 4 shortens.

Frames ``bench/throughput.py``'s workload (sealed, as the API writes it) once, then times three
stages over the same bytes, no Kafka and no disk store:
  decode           ``codec.decode`` of every record;
  read             decode + unseal + validate (``pipeline.read_record``, what the projector runs);
  project_off      read, then each tenant's run planned (``plan_batch``) against an in-memory
                   store with the rules off, and its net delta committed to that store.
Each stage is reported as min/median of ``--repeat`` runs, wall-clock and per CPU-second
(``time.process_time``). With ``--compare DIR`` (another checkout, e.g. an unmodified ``main``)
the same bench runs there too, the two alternating run by run, so a noisy machine hits both alike.
``--profile STAGE`` prints the top of cProfile's cumulative-time table for one stage instead.
Prints one JSON object.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

STAGES = ("decode", "read", "project_off")


def frames(n: int, tenants: int, keys: Any, dim: int = 0) -> list[tuple[str, bytes]]:
    """(tenant, sealed bytes) of the throughput workload, in log order; a new memory with a vector
    of ``dim`` components, as the API's embedder gives it (0: none)."""
    from engram.streams.pipeline import Pipeline

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from throughput import workload

    rng = random.Random(11)
    events = workload(n, tenants)
    for event in events:
        if event["type"] == "MemoryRemembered" and dim:
            event["payload"]["embedding"] = [rng.uniform(-0.2, 0.2) for _ in range(dim)]
            event["payload"]["embedding_model"] = "bench"
    good, bad = Pipeline(keys=keys).write_many(list(enumerate(events)))
    assert not bad, bad[:3]
    return [(f.event.tenant, f.value) for _, f in good]


def stages(records: list[tuple[str, bytes]], keys: Any, root: Path) -> dict[str, Callable[[], None]]:
    from engram.projections.batch import Overlay, Step, plan_batch
    from engram.projections.knowledge import load_knowledge
    from engram.schemas.events import Position
    from engram.streams import codec
    from engram.streams.pipeline import read_record
    from pyoxigraph import Store

    (root / "no-rules").mkdir(parents=True, exist_ok=True)
    (root / "no-rules" / "none.dlog").write_text("# the rules off\n")
    knowledge = load_knowledge(rules_dir=root / "no-rules")

    def decode() -> None:
        for _, value in records:
            codec.decode(value)

    def read() -> None:
        for _, value in records:
            read_record(value, keys)

    def project_off() -> None:
        runs: dict[str, list[Step]] = {}
        for offset, (tenant, value) in enumerate(records):
            runs.setdefault(tenant, []).append(Step(Position(0, offset), read_record(value, keys)))
        for run in runs.values():
            store = Store()
            state = Overlay(store)
            plan_batch(knowledge, state, run)
            net = state.net()
            store.extend(net.adds)

    return {"decode": decode, "read": read, "project_off": project_off}


def measure(n: int, tenants: int, dim: int, repeat: int, profile: str | None) -> dict[str, Any]:
    from engram.streams.keystore import KeyStore

    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
        keys = KeyStore(Path(tmp) / "keys")
        records = frames(n, tenants, keys, dim)
        run = stages(records, keys, Path(tmp))
        if profile:
            profiler = cProfile.Profile()
            profiler.runcall(run[profile])
            out = io.StringIO()
            pstats.Stats(profiler, stream=out).sort_stats(os.environ.get("SORT", "tottime")).print_stats(
                int(os.environ.get("TOP", "12"))
            )
            return {"profile": out.getvalue()}
        result: dict[str, Any] = {}
        for name, fn in run.items():
            fn()  # warm: caches (keys, schemas) filled as a long-running worker has them
            walls, cpus = [], []
            for _ in range(repeat):
                w, c = time.perf_counter(), time.process_time()
                fn()
                walls.append(time.perf_counter() - w)
                cpus.append(time.process_time() - c)
            result[name] = {
                "us_per_event_wall": [1e6 * t / n for t in walls],
                "events_per_cpu_s": [n / t for t in cpus],
            }
        return result


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out = {}
    for name in STAGES:
        us = [u for r in runs for u in r[name]["us_per_event_wall"]]
        cpu = [x for r in runs for x in r[name]["events_per_cpu_s"]]
        out[name] = {
            "us_per_event_min": round(min(us), 1),
            "us_per_event_median": round(statistics.median(us), 1),
            "events_per_cpu_s_max": round(max(cpu)),
            "events_per_cpu_s_median": round(statistics.median(cpu)),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument("--tenants", type=int, default=50)
    parser.add_argument("--dim", type=int, default=384, help="a new memory's vector size (0: none)")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs of each stage per round")
    parser.add_argument("--rounds", type=int, default=1, help="rounds, alternating with --compare")
    parser.add_argument("--compare", type=Path, help="another checkout to run the same bench in")
    parser.add_argument("--profile", choices=STAGES)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child or args.profile:
        result = measure(args.events, args.tenants, args.dim, args.repeat, args.profile)
        print(result["profile"] if args.profile else json.dumps(result))
        return
    here = Path(__file__).resolve().parent.parent
    checkouts = {"this": here, **({"compare": args.compare.resolve()} if args.compare else {})}
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in checkouts}
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from checkouts import importable

    tmp = tempfile.TemporaryDirectory(prefix="decode-", ignore_cleanup_errors=True)
    # each checkout's own engram and stages first on the child's path (bench/checkouts.py), then
    # this checkout for the bench's own helpers (the child runs this file)
    layouts = {name: importable(root, Path(tmp.name) / name) for name, root in checkouts.items()}
    for _ in range(args.rounds):
        for name, root in checkouts.items():
            env = {**os.environ, "PYTHONPATH": f"{layouts[name]}:{here}:{root}/clients/python"}
            argv = [sys.executable, str(Path(__file__).resolve()), "--child"]
            argv += [
                "--events",
                str(args.events),
                "--tenants",
                str(args.tenants),
                "--repeat",
                str(args.repeat),
            ]
            done = subprocess.run(argv, env=env, capture_output=True, text=True, check=True, cwd=root)
            runs[name].append(json.loads(done.stdout))
    tmp.cleanup()
    print(json.dumps({name: summary(r) for name, r in runs.items()}, indent=2))


if __name__ == "__main__":
    main()
