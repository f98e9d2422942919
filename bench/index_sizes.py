"""One tenant's search indexes at N memories: bytes on disk and RSS. Prints one JSON object.

The text index (tantivy) gets ``bench/rematerialise.py``'s memory texts, the vector index
(hnswlib) random unit vectors of ``--dim`` components (MiniLM's 384): what a memory costs the
indexes, for the scale model in docs/operations.md.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np
from engram.projections.text_index import TextIndex
from engram.projections.vector_index import VectorIndex

from bench.memstore import rss_kib


def du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--memories", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=384)
    args = ap.parse_args()
    n, rng = args.memories, np.random.default_rng(7)
    with tempfile.TemporaryDirectory(prefix="engram-index-sizes-", ignore_cleanup_errors=True) as tmp:
        root = Path(tmp)
        before = rss_kib()
        text = TextIndex(root / "text")
        for i in range(n):
            text.upsert(f"m{i}", f"note m{i} " + f"what m{i} says " * 6)
            if i % 10_000 == 9_999:
                text.commit()
        text.commit()
        after_text = rss_kib()
        vectors = VectorIndex(root / "vectors", args.dim)
        for i in range(n):
            v = rng.standard_normal(args.dim).astype(np.float32)
            vectors.upsert(f"m{i}", v / np.linalg.norm(v))
        vectors.save()
        after_vectors = rss_kib()
        text_bytes, vector_bytes = du(root / "text"), du(root / "vectors")
    print(json.dumps({
        "memories": n,
        "text": {"bytes": text_bytes, "bytes_per_memory": round(text_bytes / n),
                 "rss_mib": round((after_text - before) / 1024, 1)},
        "vectors": {"dim": args.dim, "bytes": vector_bytes, "bytes_per_memory": round(vector_bytes / n),
                    "rss_mib": round((after_vectors - after_text) / 1024, 1)},
    }, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
