"""Texts/s of two embedders side by side in one run: float32 MiniLM (numpy, "old"), minilm-int8 ("new").

The texts are REALTALK turns as ``engram produce`` embeds them (``embedding_text`` of the label and
content of ``tests.realtalk.remember_lines``), in log order, handed to ``embed`` in calls of 1,
8, 32 and 128 texts, as the query worker (1), the API and the projector (a few) and ``produce``
(many) do. Old and new alternate call by call over the same texts, so a busy machine slows both
alike, and the whole pass is repeated (``--repeats``): each figure is the min / median over the
repeats, as wall-clock texts/s and as texts per CPU-second of the process (``time.process_time``,
every thread counted: the figure a busy machine disturbs least). The deviation is 1 - cosine(old,
new) over every text timed plus turns joined past the 256-token window: max and mean.
Prints one JSON object; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np
from engram.streams.embedder import MiniLM, MiniLMInt8, embedding_text

from tests.realtalk import load_chats, remember_lines


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
    ap.add_argument("--repeats", type=int, default=3, help="passes over every batch size (default 3)")
    ap.add_argument("--threads", type=int, default=2, help="minilm-int8's parallel texts (default 2)")
    args = ap.parse_args()

    texts = turns()
    models = {"old": MiniLM(), "new": MiniLMInt8(threads=args.threads)}
    count = models["old"].count_tokens
    long = [" ".join(texts[i : i + 30]) for i in range(0, 30 * 40, 30)]  # 40 texts past the window
    for model in models.values():
        model.embed(["warm up"])
    result: dict[str, object] = {
        "texts": "REALTALK turns (label + content), log order",
        "turns_available": len(texts),
        "mean_tokens": round(float(np.mean([count(t) for t in texts[: args.texts]])), 1),
        "old": f"{models['old'].name}, numpy float32, blas_threads {models['old'].blas_threads}",
        "new": f"{models['new'].name}, onnxruntime int8, threads {args.threads}",
        "by_batch": {},
    }
    deviations: list[np.ndarray] = []
    for size in (int(b) for b in args.batches.split(",")):
        n = args.single if size == 1 else args.texts
        calls = [texts[i : i + size] for i in range(0, n, size)]
        rates: dict[str, list[float]] = {f"{k}_{unit}": [] for k in models for unit in ("wall", "cpu")}
        for _ in range(args.repeats):
            took = {k: [0.0, 0.0] for k in models}
            for call in calls:
                vectors = {}
                for key, model in models.items():
                    wall, cpu = time.perf_counter(), time.process_time()
                    vectors[key] = model.embed(call)
                    took[key][0] += time.perf_counter() - wall
                    took[key][1] += time.process_time() - cpu
                deviations.append(1 - np.einsum("ij,ij->i", vectors["old"], vectors["new"]))
            for key, (wall, cpu) in took.items():
                rates[f"{key}_wall"].append(n / wall)
                rates[f"{key}_cpu"].append(n / cpu)
        row = {k: f"{min(v):.1f} / {statistics.median(v):.1f}" for k, v in rates.items()}
        row["speedup_wall_median"] = round(
            statistics.median(rates["new_wall"]) / statistics.median(rates["old_wall"]), 2
        )
        row["speedup_cpu_median"] = round(
            statistics.median(rates["new_cpu"]) / statistics.median(rates["old_cpu"]), 2
        )
        result["by_batch"][str(size)] = row  # type: ignore[index]
        print(f"batch {size}: {row}", file=sys.stderr)
    deviations.append(1 - np.einsum("ij,ij->i", models["old"].embed(long), models["new"].embed(long)))
    dev = np.concatenate(deviations)
    result["units"] = "texts/s, min / median of the repeats; *_cpu: texts per CPU-second"
    result["long_texts"] = {"n": len(long), "min_tokens": min(count(t) for t in long)}
    result["cosine_deviation"] = {"max": float(dev.max()), "mean": float(dev.mean()), "texts": int(dev.size)}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
