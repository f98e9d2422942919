"""The console's context page on a large tenant: bytes transferred on a first load and time to
interactive, in a real headless Chromium (the system's, through Playwright).

For each size in ``--sizes``: one `engram serve` (real broker, its own topics, the hashing
embedder) holding the demo tenant (through the log, `engram produce`) and ``size`` more company
memories (``bench/agent_turn.py``'s), bulk-loaded into the stopped server's store through the
projection's own ``plan`` and materialised once, as ``bench/recall.py`` builds its tenant (through
HTTP or the log this machine applies ~40 memories/s: 100k would take most of an hour); the search
indexes catch up with the store when opened. Then ``--loads`` first loads of the context page
for a question (a new browser context each time: empty cache, the session cookie set), and of the
memories page, each: bytes transferred (every response's headers and body, as Chromium counts
them), the navigation's ``domInteractive`` and ``loadEventEnd``, and the wall clock until the
page's script has run (``data-ready``), min and median. Targets: at most 300 KB and 1 s. Prints
one JSON object; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import httpx
from engram.api.auth import mint
from engram.api.routes.memories import with_derived, without_derivations
from engram.projections.listing import Listing
from engram.projections.plan import no_facts, plan
from engram.projections.read import get_memory, list_memory_ids
from engram.projections.stores import TenantStores
from engram.projections.visibility import Principal, sight
from engram.schemas.events import Position, event_from_json
from engram.streams import kafka_local
from engram.streams.embedder import embedding_text, load_embedder
from engram.streams.topics import ensure_topics
from playwright.sync_api import sync_playwright

from bench.agent_turn import TENANT, TOPICS, USER, build
from engram.settings import load_settings
from tests.harness import Server, isolated_settings
from tests.projections.test_listing import reference_ids  # the route's query before the listing

PAGES = {"context": "/console/context?q=how+much+can+we+spend+on+meta", "memories": "/console/memories"}
TARGETS = {"bytes": 300_000, "interactive_ms": 1000.0}


def say(msg: str) -> None:
    print(f"[console] {msg}", file=sys.stderr, flush=True)


def load(browser: Any, url: str, token: str, path: str, timeout_s: float = 60) -> dict[str, float]:
    """One first load of ``path``: a fresh context (no cache), signed in by its cookie."""
    context = browser.new_context(base_url=url)
    context.set_default_timeout(timeout_s * 1000)
    context.add_cookies([{"name": "engram_console", "value": token, "url": url + "/console"}])
    page = context.new_page()
    sizes: list[int] = []

    def finished(request: Any) -> None:
        s = request.sizes()
        sizes.append(s["responseBodySize"] + s["responseHeadersSize"])

    page.on("requestfinished", finished)
    started = time.perf_counter()
    response = page.goto(path, wait_until="load")
    page.wait_for_function("document.documentElement.dataset.ready === '1'")
    wall = (time.perf_counter() - started) * 1000
    assert response is not None and response.status == 200, (path, response and response.status)
    nav = page.evaluate("JSON.parse(JSON.stringify(performance.getEntriesByType('navigation')[0]))")
    page.wait_for_load_state("networkidle")
    context.close()
    return {
        "bytes": float(sum(sizes)),
        "requests": float(len(sizes)),
        "dom_interactive_ms": round(nav["domInteractive"], 1),
        "load_event_end_ms": round(nav["loadEventEnd"], 1),
        "interactive_ms": round(wall, 1),
    }


def bulk(settings: Any, n: int) -> dict[str, Any]:
    """``n`` company memories appended to the tenant's store after its log's end, with their
    hashing embeddings, through ``plan`` (no checks against the store: fresh ids), materialised once;
    the indexes then catch up. The server must be stopped (one opener per store)."""
    embedder = load_embedder(os.environ["ENGRAM_EMBEDDER"])
    stores = TenantStores(settings.tenants_dir, vectors=(embedder.name, embedder.dim))
    graph = stores.get(TENANT)
    at = graph.checkpoint() if graph is not None else None
    assert graph is not None and at is not None, "the demo tenant is not there"
    now_ms = int(time.time() * 1000)
    started = time.perf_counter()
    quads: list[Any] = []
    for lo in range(0, n, 10_000):
        chunk = range(lo, min(n, lo + 10_000))
        memories = []
        for i in chunk:
            topic = TOPICS[i % len(TOPICS)]
            label = f"{topic.title()} note {i}"
            content = f"Note {i} about {topic}: decided in review {i // 7}, owner team {i % 5}."
            memories.append((i, label, content))
        vectors = embedder.embed([embedding_text(label, content) for _, label, content in memories])
        for (i, label, content), vec in zip(memories, vectors, strict=True):
            payload = {
                "memory_id": f"bench-{i}", "label": label, "content": content, "kind": "fact",
                "scope": "company", "importance": 2 + i % 3, "embedding": [float(x) for x in vec],
                "embedding_model": embedder.name,
            }  # fmt: skip
            event = event_from_json(
                {"type": "MemoryRemembered", "tenant": TENANT, "source": "operator",
                 "actor": {"id": USER, "role": "operator"}, "payload": payload}
            )  # fmt: skip
            quads += plan(event, Position(at.partition, at.offset + 1 + i, now_ms + i), no_facts()).adds
    graph.store.bulk_extend(quads)
    graph.rematerialize()
    graph.flush()
    load_s = time.perf_counter() - started
    started = time.perf_counter()
    assert stores.indexes(TENANT) is not None
    index_s = time.perf_counter() - started
    stores.close()
    return {"memories": n, "bulk_load_s": round(load_s, 1), "index_catch_up_s": round(index_s, 1)}


LIST_PAGE = 50  # the console's page of memories


def timed(fn: Any) -> tuple[float, float]:
    """Wall and CPU milliseconds of one call (this process)."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return (time.perf_counter() - wall) * 1e3, (time.process_time() - cpu) * 1e3


def list_in_process(settings: Any, reps: int) -> dict[str, Any]:
    """The list route's two costs side by side (interleaved) on the stopped server's store: a page
    of 50 memories with every derivation explained vs without (per memory), and the ids of every
    memory a principal may see (the page and its count) by the SPARQL query the route ran before
    (sorting the whole tenant each time) vs by the graph's listing (``projections.listing``)."""
    stores = TenantStores(settings.tenants_dir)
    graph = stores.get(TENANT)
    assert graph is not None
    who = Principal("sam", frozenset({"growth"}))
    sees = sight(graph, who)
    first = {
        "operator": timed(lambda: list_memory_ids(graph)),
        "user": timed(lambda: list_memory_ids(graph, seen_by=who)),
    }
    tracemalloc.start()  # what a listing with every column holds, built again aside
    aside = Listing.build(graph.store, 0)
    aside.need(graph.store, ("scope", "stakeholderUser", "stakeholderTeam"))
    aside.rows()
    listing_mb = round(tracemalloc.get_traced_memory()[0] / 1e6, 1)
    tracemalloc.stop()
    del aside
    page = [m for i in list_memory_ids(graph)[:LIST_PAGE] if (m := get_memory(graph, i, sees))]
    assert list_memory_ids(graph, seen_by=who) == reference_ids(graph, seen_by=who)
    cases = {
        "page_explained": lambda: [with_derived(graph, m, sees) for m in page],
        "page_light": lambda: [without_derivations(graph, m, sees) for m in page],
        "operator_ids_by_the_query": lambda: reference_ids(graph),
        "operator_ids_by_the_listing": lambda: list_memory_ids(graph),
        "user_ids_by_the_query": lambda: reference_ids(graph, seen_by=who),
        "user_ids_by_the_listing": lambda: list_memory_ids(graph, seen_by=who),
    }
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in cases}
    for _ in range(reps):
        for name, fn in cases.items():
            runs[name].append(timed(fn))
    stores.close()
    out: dict[str, Any] = {
        "listing_first_build_ms": {k: round(wall, 1) for k, (wall, _) in first.items()},
        "listing_mb": listing_mb,
    }
    for name, rs in runs.items():
        walls, cpus = [w for w, _ in rs], [c for _, c in rs]
        out[name] = {"wall_ms": {"min": round(min(walls), 1), "median": round(statistics.median(walls), 1)},
                     "cpu_ms_median": round(statistics.median(cpus), 1)}  # fmt: skip
    for name in ("page_explained", "page_light"):
        out[name]["per_memory_ms"] = round(out[name]["wall_ms"]["median"] / len(page), 2)
    return out


def server_cpu_s(server: Server) -> float:
    """The server process's CPU seconds so far (Linux)."""
    fields = Path(f"/proc/{server.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def list_over_http(server: Server, reps: int) -> dict[str, Any]:
    """``GET …/memories`` (a page of 50) for an operator and a user, with and without
    derivations, interleaved: wall ms and the server's CPU ms per request."""
    client = httpx.Client(timeout=300)
    url = f"{server.url}/v1/tenants/{TENANT}/memories"
    principals = {"operator": server.bearer(TENANT, role="operator", user=USER),
                  "user": server.bearer(TENANT, role="user", user="sam", teams=["growth"])}  # fmt: skip
    runs: dict[str, list[tuple[float, float]]] = {}
    for _ in range(reps):
        for who, headers in principals.items():
            for explain in ("true", "false"):
                cpu, wall = server_cpu_s(server), time.perf_counter()
                r = client.get(url, params={"limit": LIST_PAGE, "explain": explain}, headers=headers)
                wall_ms = (time.perf_counter() - wall) * 1e3
                r.raise_for_status()
                runs.setdefault(f"{who} explain={explain}", []).append(
                    (wall_ms, (server_cpu_s(server) - cpu) * 1e3)
                )
    return {
        name: {
            "wall_ms": {
                "min": round(min(w for w, _ in rs), 1),
                "median": round(statistics.median(w for w, _ in rs), 1),
            },
            "server_cpu_ms_median": round(statistics.median(c for _, c in rs), 1),
        }
        for name, rs in runs.items()
    }


def summary(runs: list[dict[str, float]]) -> dict[str, dict[str, float]]:
    return {
        k: {"min": min(r[k] for r in runs), "median": statistics.median(r[k] for r in runs)} for k in runs[0]
    }


def run_size(base: Any, n: int, loads: int, chromium: str, in_process_max: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
        settings = isolated_settings(base, Path(tmp) / "data", partitions=1)
        asyncio.run(ensure_topics(settings))
        os.environ["ENGRAM_EMBEDDER"] = "hashing"
        server = Server(settings, Path(tmp) / "server.log").start()
        try:
            server.wait_ready()
            say(f"{n} memories: the demo tenant through the log")
            built = build(server, Path(tmp), 0)
        finally:
            server.stop()
        say(f"{n} memories: bulk-loading")
        built |= bulk(settings, n)
        in_process = None
        if n <= in_process_max:
            say(f"{n} memories: the list route in process, the query before and the listing side by side")
            in_process = list_in_process(settings, loads)
        server = Server(settings, Path(tmp) / "server2.log").start()
        try:
            server.wait_ready(timeout=600)
            say(f"{n} memories: built {built}; the list route over HTTP")
            over_http = list_over_http(server, loads)
            say(f"{n} memories: {loads} first loads per page, interleaved")
            token = mint(settings, TENANT, role="operator", user=USER)
            runs: dict[str, list[dict[str, float]]] = {name: [] for name in PAGES}
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
                # warm the server, not the browser: the first recall after a start opens the indexes
                load(browser, server.url, token, PAGES["context"], timeout_s=900)
                for _ in range(loads):
                    for name, path in PAGES.items():
                        runs[name].append(load(browser, server.url, token, path))
                browser.close()
        finally:
            server.stop()
    result = {
        "memories": n, "build": built, "loads": loads, "pages": {k: summary(v) for k, v in runs.items()},
        "list_route": {"in_process": in_process, "http": over_http}, "load_average": os.getloadavg(),
    }  # fmt: skip
    say(f"{n} memories: {json.dumps(result)}")  # kept even if a larger size fails later
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,100000", help="memories per run, comma-separated")
    ap.add_argument("--loads", type=int, default=3, help="first loads per page and size")
    ap.add_argument(
        "--in-process-max",
        type=int,
        default=100_000,
        help="largest size whose list route is also timed in process",
    )
    args = ap.parse_args()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        print("no system chromium: apt-get install chromium", file=sys.stderr)
        return 2
    base = load_settings()
    kafka_local.start(base)
    load_before = os.getloadavg()
    runs = [run_size(base, int(n), args.loads, chromium, args.in_process_max) for n in args.sizes.split(",")]
    largest = runs[-1]["pages"]["context"]
    result = {
        "bench": "console",
        "runs": runs,
        "targets": TARGETS,
        "largest": runs[-1]["memories"],
        "context_bytes": largest["bytes"]["median"],
        "context_interactive_ms": largest["interactive_ms"]["median"],
        "load_average_before_after": [round(x, 2) for x in (*load_before, *os.getloadavg())],
    }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
