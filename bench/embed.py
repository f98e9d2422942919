"""Texts/s of the MiniLM embedder, today's padded forward pass against the packed one, in one run.

The texts are REALTALK turns as ``engram produce`` embeds them (``embedding_text`` of the label and
content of ``engram.evaluation.remember_lines``), in log order, handed to ``embed`` in calls of 1,
8, 32 and 128 texts, as the query worker (1), the API and the projector (a few) and ``produce``
(many) do. Old and new alternate call by call over the same texts, so a busy machine slows both
alike. "old" is the pass ``MiniLM.embed`` ran before the packed one (each call sorted by length,
padded to the longest of every 32); "new" is ``MiniLM.embed`` now. The deviation is
max(1 - cosine(old, new)) over every text timed plus turns joined past the 256-token window.
Prints one JSON object; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence

import numpy as np
from engram.streams.embedder import MiniLM, bert, embedding_text
from engram.streams.embedder.base import F32, check_texts, normalise_rows
from engram.streams.embedder.blas import blas_threads
from engram.streams.embedder.minilm import _tokenizer

from engram.evaluation import load_chats, remember_lines

OLD_BATCH = 32  # the padded pass's sub-batch, MiniLM's batch_size before


def embed_padded(model: MiniLM, texts: Sequence[str]) -> np.ndarray:
    """``MiniLM.embed`` as it was: sort by length, pad every ``OLD_BATCH`` texts to their longest."""
    texts = check_texts(texts)
    out = np.empty((len(texts), model.dim), dtype=F32)
    m = bert.load_bert(model.model_dir)
    encodings = _tokenizer(model.model_dir, m.max_seq_length).encode_batch(texts)
    lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(texts))
    order = np.argsort(-lengths, kind="stable")
    with blas_threads(model.blas_threads):
        for s in range(0, len(texts), OLD_BATCH):
            idx = order[s : s + OLD_BATCH]
            lens = lengths[idx]
            ids = np.zeros((len(idx), int(lens.max())), dtype=np.int64)
            for row, i in enumerate(idx):
                ids[row, : lens[row]] = encodings[i].ids
            out[idx] = bert.encode(m, ids, lens)
    return normalise_rows(out)


def turns() -> list[str]:
    return [
        embedding_text(line["payload"]["label"], line["payload"]["content"])
        for chat in load_chats()
        for line in remember_lines(chat)
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--texts", type=int, default=512, help="texts timed per batch size (default 512)")
    ap.add_argument("--single", type=int, default=128, help="texts timed one by one (default 128)")
    ap.add_argument("--batches", default="1,8,32,128", help="batch sizes (default 1,8,32,128)")
    args = ap.parse_args()

    texts = turns()
    model = MiniLM()
    count = model.count_tokens
    long = [" ".join(texts[i : i + 30]) for i in range(0, 30 * 40, 30)]  # 40 texts past the window
    model.embed(["warm up"])
    embed_padded(model, ["warm up"])
    result: dict[str, object] = {
        "texts": "REALTALK turns (label + content), log order",
        "turns_available": len(texts),
        "mean_tokens": round(float(np.mean([count(t) for t in texts[: args.texts]])), 1),
        "blas_threads": model.blas_threads,
        "by_batch": {},
    }
    worst = 0.0
    for size in (int(b) for b in args.batches.split(",")):
        n = args.single if size == 1 else args.texts
        calls = [texts[i : i + size] for i in range(0, n, size)]
        took = {"old": 0.0, "new": 0.0}
        for call in calls:
            started = time.perf_counter()
            old = embed_padded(model, call)
            took["old"] += time.perf_counter() - started
            started = time.perf_counter()
            new = model.embed(call)
            took["new"] += time.perf_counter() - started
            worst = max(worst, float((1 - np.einsum("ij,ij->i", old, new)).max()))
        row = {k: round(n / v, 1) for k, v in took.items()}
        row["speedup"] = round(took["old"] / took["new"], 2)
        result["by_batch"][str(size)] = row  # type: ignore[index]
        print(f"batch {size}: {row}", file=sys.stderr)
    old, new = embed_padded(model, long), model.embed(long)
    worst = max(worst, float((1 - np.einsum("ij,ij->i", old, new)).max()))
    result["long_texts"] = {"n": len(long), "min_tokens": min(count(t) for t in long)}
    result["max_cosine_deviation"] = worst
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
