"""The first reads of a cold tenant (issue 37, item 5): a tenant of N memories whose store and
indexes are not open, opened by its first recall and its first context, in process.

The tenant is built once (``bench.recall.synthetic_tenant``: bulk-loaded, vectors of 384
dimensions around a pool of random points, a tier of High and Critical memories held by users
and teams), then each run is a child process that opens it cold and times: the graph's open, the
indexes' open, the first recall and the one after it, the first context and the one after it.
Side by side in one run:

- ``ids_saved``: the vector ids read from the file saved with the index (as a store opens now);
- ``ids_from_graph``: that file removed first, so the ids are read from the graph's vectors (an
  index saved by an older build; the next open has the file again).

Prints one JSON object (ms, min / median of ``--runs``); progress goes to stderr.

    python -m bench.cold_tenant --memories 100000 --runs 3
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

import numpy as np
from engram.projections.context import ContextOptions, build_context
from engram.projections.recall import RecallQuery, class_weights, recall
from engram.projections.stores import TenantStores
from engram.projections.visibility import Principal

from bench.recall import synthetic_tenant

MODEL, DIM = "minilm-int8", 384
WORDS = ["budget", "roas", "meta", "google", "tiktok", "launch", "target", "cap", "creative", "audience",
         "brand", "voice", "tone"]  # fmt: skip


class Model:
    """The embedder's name and dimension only: the payloads carry their vectors."""

    name, dim = MODEL, DIM


def build(root: Path, n: int) -> dict[str, object]:
    rng = np.random.default_rng(1)
    pool = []
    for i in range(500):
        point = rng.normal(size=DIM).astype(np.float32)
        point /= np.linalg.norm(point)
        words = " ".join(random.Random(i).choice(WORDS) for _ in range(12))
        payload = types.SimpleNamespace(label=f"{WORDS[i % len(WORDS)]} note {i}", content=words,
                                        embedding=point.tolist())  # fmt: skip
        pool.append(types.SimpleNamespace(payload=payload))
    return synthetic_tenant(root, n, pool, Model)  # type: ignore[arg-type]


def child(root: Path, mode: str) -> dict[str, float]:
    if mode == "ids_from_graph":
        for saved in root.rglob("ids-*.json"):
            saved.unlink()
    out = {}
    stores = TenantStores(root, vectors=(MODEL, DIM))
    started = time.perf_counter()
    graph = stores.get("big")
    out["graph_open"] = time.perf_counter() - started
    started = time.perf_counter()
    indexes = stores.indexes("big")
    out["indexes_open"] = time.perf_counter() - started
    assert graph is not None and indexes is not None
    who = Principal("u7", frozenset({"team7"}))
    point = np.random.default_rng(3).normal(size=DIM).astype(np.float32)
    weight = class_weights(stores.knowledge.ontology)
    for name, q in (
        ("first_recall", "budget target for the meta launch"),
        ("second_recall", "brand voice tone"),
    ):
        started = time.perf_counter()
        recall(indexes, RecallQuery(q=q), who, point / np.linalg.norm(point),
               count_tokens=lambda s: len(s.split()), class_weight=weight)  # fmt: skip
        out[name] = time.perf_counter() - started
    options = ContextOptions(confidence_floor=0.0, count_tokens=lambda s: len(s.split()))
    for name in ("first_context", "second_context"):
        started = time.perf_counter()
        build_context(graph, indexes, who, point, stores.knowledge.ontology, options)
        out[name] = time.perf_counter() - started
    out["first_read_recall"] = out["graph_open"] + out["indexes_open"] + out["first_recall"]
    out["first_read_context"] = out["graph_open"] + out["indexes_open"] + out["first_context"]
    stores.close()
    return {k: round(v * 1e3, 1) for k, v in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--memories", type=int, default=100_000)
    ap.add_argument("--runs", type=int, default=3, help="cold opens of each mode, alternating")
    ap.add_argument("--keep", type=Path, default=None, help="build the tenant here once and reuse it")
    ap.add_argument("--child", choices=("ids_saved", "ids_from_graph"), help=argparse.SUPPRESS)
    ap.add_argument("--root", type=Path, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child is not None:
        print(json.dumps(child(a.root, a.child)))
        return
    scratch = Path(tempfile.mkdtemp(prefix="cold-tenant-"))
    root = a.keep or scratch / "tenants"
    try:
        built = None
        if not (root / "big").exists():
            print(f"building a tenant of {a.memories} memories", file=sys.stderr, flush=True)
            built = build(root, a.memories)
        runs: dict[str, list[dict[str, float]]] = {"ids_saved": [], "ids_from_graph": []}
        # one open first: an index built by an older build gets its ids file, and the files are in
        # the page cache for every run alike (cold here: not open in the process, not off the disk)
        first = [sys.executable, "-m", "bench.cold_tenant", "--child", "ids_saved", "--root", str(root)]
        subprocess.run(first, check=True, stdout=subprocess.DEVNULL)
        for i in range(a.runs):
            for mode in runs:
                argv = [sys.executable, "-m", "bench.cold_tenant", "--child", mode, "--root", str(root)]
                out = subprocess.run(argv, check=True, stdout=subprocess.PIPE, text=True).stdout
                runs[mode].append(json.loads(out.strip().splitlines()[-1]))
                print(json.dumps({"run": i, "mode": mode, **runs[mode][-1]}), file=sys.stderr, flush=True)
        figures = {
            mode: {
                key: {
                    "min": min(r[key] for r in rs),
                    "median": round(statistics.median(r[key] for r in rs), 1),
                }
                for key in rs[0]
            }
            for mode, rs in runs.items()
        }
        print(json.dumps({"benchmark": "cold_tenant", "memories": a.memories, "runs": a.runs, "built": built,
                          "ms": figures}, indent=2))  # fmt: skip
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
