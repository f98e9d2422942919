"""The cost of the SPARQL sandbox: a small SELECT over one tenant's store, evaluated in process
(``projections.sparql.answer``, what the route did before) and through the sandboxed evaluator
(``projections.sparql_sandbox``: a pipe to a child process with no network, which keeps the
store open read-only while its token is unchanged), and once more with a new token each time
(the store reopened, as after every write to the tenant).

Prints one JSON object: p50/p95 latency in milliseconds of each.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from engram.projections.sparql import answer
from engram.projections.sparql_sandbox import Sandbox

from tests.factories import remembered
from tests.tenant import Tenant

QUERY = (
    "PREFIX e: <https://engram.dev/ns#> SELECT ?id ?label WHERE { ?m e:memoryId ?id ; e:label ?label } "
    "ORDER BY ?id LIMIT 20"
)


def figures(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": round(statistics.median(ordered) * 1e3, 3),
        "p95_ms": round(ordered[int(0.95 * (len(ordered) - 1))] * 1e3, 3),
    }


async def timed(n: int, call: Callable[[int], Awaitable[object]]) -> list[float]:
    for i in range(5):  # warm up
        await call(-1 - i)
    out = []
    for i in range(n):
        started = time.perf_counter()
        await call(i)
        out.append(time.perf_counter() - started)
    return out


async def main(memories: int, n: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
        tenant = Tenant(Path(tmp) / "graph", step_ms=1)
        for i in range(memories):
            tenant.apply("MemoryRemembered", remembered(f"m{i:05d}", label=f"label {i}"))
        tenant.graph.flush()
        path = str(tenant.graph.path)
        sandbox = await Sandbox(10.0).start()
        try:

            async def in_process(_: int) -> object:
                return answer(tenant.graph.store, QUERY, "*/*", max_rows=10_000)

            async def sandboxed(_: int) -> object:
                return await sandbox.query(path, "same", QUERY, "*/*", max_rows=10_000)

            async def reopened(i: int) -> object:
                return await sandbox.query(path, f"write-{i}", QUERY, "*/*", max_rows=10_000)

            return {
                "memories": memories,
                "queries": n,
                "in_process": figures(await timed(n, in_process)),
                "sandbox": figures(await timed(n, sandboxed)),
                "sandbox_store_reopened": figures(await timed(n, reopened)),
            }
        finally:
            await sandbox.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--memories", type=int, default=200)
    parser.add_argument("--queries", type=int, default=300)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main(args.memories, args.queries))))
