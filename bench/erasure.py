"""What a forget costs now that it erases: the projector's time for one MemoryForgotten, with the
erasure (store rewritten, text index dropped) and without it (the forget alone, as before #22),
side by side on copies of the same tenant at a few sizes. In process, no broker: the records are
the projector's own (sealed with a real key store). Prints one JSON object; progress on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from engram.projections.stores import TenantStores
from engram.schemas.events import Position
from engram.streams import projector
from engram.streams.keystore import KeyStore, ReadOnlyKeys
from engram.streams.pipeline import Pipeline

ACTOR = {"id": "bench", "role": "operator"}
T0 = 1_764_547_200_000


def envelope(event_type: str, payload: dict[str, Any]) -> dict[str, Any]:
    return {"type": event_type, "tenant": "acme", "source": "operator", "actor": ACTOR, "payload": payload}


def remembered(i: int) -> dict[str, Any]:
    return {"memory_id": f"m{i}", "label": f"Note {i} on campaign {i % 97}",
            "content": f"Memory {i}: the campaign {i % 97} keeps its budget under review",
            "kind": "fact", "scope": "company", "importance": 3}  # fmt: skip


def sealed(lines: list[dict[str, Any]], keys: KeyStore) -> list[bytes]:
    good, bad = Pipeline(keys=keys).write_many(list(enumerate(lines)))
    assert not bad, bad
    return [f.value for _, f in good]


async def feed(stores: TenantStores, values: list[bytes], first: int, batch: int = 500) -> float:
    async def sink(*_: Any) -> None:
        raise AssertionError("nothing here is dead-lettered")

    started = time.perf_counter()
    for start in range(0, len(values), batch):
        recs = [projector.Record(b"acme", v, [], Position(0, first + start + n, T0 + first + start + n))
                for n, v in enumerate(values[start : start + batch])]  # fmt: skip
        await projector.handle_records(recs, stores, sink, partitions=1)
    return time.perf_counter() - started


def size_on_disk(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


async def one_size(n: int, root: Path) -> dict[str, Any]:
    keys = KeyStore(root / "keys")
    values = sealed([envelope("MemoryRemembered", remembered(i)) for i in range(n)], keys)
    built = TenantStores(root / "built", keys=keys, vectors=("hashing", 64))
    build_s = await feed(built, values, 0)
    assert built.indexes("acme") is not None  # a text index to drop
    built.close()
    del built
    forget = sealed([envelope("MemoryForgotten", {"memory_id": "m1", "reason": "bench"})], keys)
    out: dict[str, Any] = {
        "memories": n,
        "build_s": round(build_s, 2),
        "store_bytes": size_on_disk(root / "built"),
    }
    # the forget without erasure first: its stores cannot destroy keys, so nothing is rewritten
    for name, store_keys in (("forget_only_ms", ReadOnlyKeys(keys)), ("forget_and_erase_ms", keys)):
        copy = root / name
        shutil.copytree(root / "built", copy)
        stores = TenantStores(copy, keys=store_keys, vectors=("hashing", 64))
        assert stores.get("acme") is not None  # opened before the clock starts
        out[name] = round(await feed(stores, forget, n) * 1e3, 1)
        stores.close()
    out["erasure_ms"] = round(out["forget_and_erase_ms"] - out["forget_only_ms"], 1)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="1000,5000,20000", help="memories per tenant, comma-separated")
    args = parser.parse_args(argv)
    runs = []
    for n in (int(x) for x in args.sizes.split(",")):
        with tempfile.TemporaryDirectory(prefix="engram-bench-erasure-", ignore_cleanup_errors=True) as tmp:
            print(f"erasure: {n} memories", file=sys.stderr)
            runs.append(asyncio.run(one_size(n, Path(tmp))))
            print(json.dumps(runs[-1]), file=sys.stderr)
    print(json.dumps({"bench": "erasure", "runs": runs}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
