"""The first memories list after a store opens: the cost of building the graph's listing
(``projections/listing.py``) on a large tenant, for an operator and then for a user (whose first
list also reads the scope and stakeholder columns), against the listing of another revision.

Builds (or reuses, ``--store``) an on-disk store of ``--memories`` memories through the
projection's own ``plan``, ``--user-share`` of them user-scoped (``bench/console.py``'s tenant is
all company memories: 0), then times ``list_memory_ids`` on a freshly built listing, the working
tree's and ``--compare``'s (a git revision: its ``projections/listing.py`` and ``read.py``),
alternating run by run so a noisy machine hits both alike; both must answer the same ids. Wall and
CPU ms (``time.process_time``), min and median of ``--runs``. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from engram.projections import listing as listing_now
from engram.projections import read as read_now
from engram.projections.plan import no_facts, plan
from engram.projections.visibility import Principal
from engram.schemas.events import Position, event_from_json
from pyoxigraph import Store

from engram.settings import REPO

USER = Principal("sam", frozenset({"growth"}))


def seed(path: Path, n: int, user_share: float) -> None:
    store = Store(str(path))
    now_ms = int(time.time() * 1000)
    every = round(1 / user_share) if user_share > 0 else 0
    quads: list[Any] = []
    for i in range(n):
        payload: dict[str, Any] = {
            "memory_id": f"bench-{i}", "label": f"Note {i}", "content": f"Note {i}.", "kind": "fact",
            "scope": "company", "importance": 2 + i % 3,
        }  # fmt: skip
        if every and i % every == 0:
            payload |= {"scope": "user", "stakeholders": {"user_id": ["sam", "kim"][i % 2], "team_ids": []}}
        event = event_from_json(
            {"type": "MemoryRemembered", "tenant": "t", "source": "operator",
             "actor": {"id": "op", "role": "operator"}, "payload": payload}
        )  # fmt: skip
        quads += plan(event, Position(0, i, now_ms + i), no_facts()).adds
    store.bulk_extend(quads)
    store.flush()


def revision(rev: str, root: Path) -> tuple[ModuleType, ModuleType]:
    """``rev``'s listing and read modules, loaded beside the working tree's (read's import of the
    listing pointed at ``rev``'s)."""

    def load(name: str, text: str) -> ModuleType:
        path = root / f"{name}.py"
        path.write_text(text)
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module

    def show(path: str) -> str:
        return subprocess.run(
            ["git", "show", f"{rev}:{path}"], cwd=REPO, check=True, capture_output=True, text=True
        ).stdout

    listing = load("listing_then", show("projections/listing.py"))
    read = load(
        "read_then", show("projections/read.py").replace("engram.projections.listing", "listing_then")
    )
    return listing, read


class Graph:
    """What ``list_memory_ids`` reads of a ``TenantGraph``: its store and a listing built once."""

    def __init__(self, store: Store, kind: Any) -> None:
        self.store, self.kind, self._listing = store, kind, None

    def listing(self, columns: Any = ()) -> Any:
        if self._listing is None:
            self._listing = self.kind.build(self.store, 0)
        self._listing.need(self.store, columns)
        return self._listing


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--memories", type=int, default=100_000)
    ap.add_argument("--user-share", type=float, default=0.0)
    ap.add_argument("--store", type=Path, help="an existing store to read, or where to seed one")
    ap.add_argument("--compare", default="HEAD", help="the git revision to measure beside the working tree")
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="listing-build-"))
    path = args.store or scratch / "store"
    if not path.exists():
        started = time.perf_counter()
        seed(path, args.memories, args.user_share)
        print(f"[listing] seeded {args.memories} in {time.perf_counter() - started:.1f}s", file=sys.stderr)
    store = Store(str(path))
    then_listing, then_read = revision(args.compare, scratch)
    sides = {args.compare: (then_listing.Listing, then_read), "working tree": (listing_now.Listing, read_now)}
    runs: dict[str, list[tuple[float, float]]] = {}
    for _ in range(args.runs):
        answers = []
        for side, (kind, read) in sides.items():
            graph = Graph(store, kind)
            for who, name in ((None, "operator"), (USER, "then a user")):
                wall, cpu = time.perf_counter(), time.process_time()
                answers.append(read.list_memory_ids(graph, seen_by=who))
                took = (time.perf_counter() - wall) * 1e3, (time.process_time() - cpu) * 1e3
                runs.setdefault(f"{side}: {name}", []).append(took)
        assert answers[:2] == answers[2:], "the two revisions list different memories"
    out: dict[str, Any] = {"memories": args.memories, "user_share": args.user_share}
    for name, rs in runs.items():
        walls, cpus = [w for w, _ in rs], [c for _, c in rs]
        out[name] = {
            "wall_ms": {"min": round(min(walls), 1), "median": round(statistics.median(walls), 1)},
            "cpu_ms_median": round(statistics.median(cpus), 1),
        }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
