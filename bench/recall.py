"""Recall quality, recall and context latency, and the cost of indexing, side by side in one run.

  1. quality: every REALTALK turn remembered as one memory (one tenant per chat), every question
     asked of its chat through ``POST …/recall`` with each fusion method; R@5 and R@10 by category;
  2. latency: one tenant of N memories (10k, 100k; texts and embeddings drawn from REALTALK,
     vectors jittered so no two are equal), bulk-loaded through the projection code, indexes
     rebuilt; then recall and context through HTTP, including the query's embedding (its share
     from the Server-Timing header); in process, the search alone (BM25 + HNSW, fused, filtered,
     ranked) and the whole recall (the top 10 with their text and token counts), on unseen questions;
  3. indexing: the same remember events applied with the indexes on and off (the projector's
     own ``Indexer`` beside the apply loop, as in the projector), events/s.
Prints one JSON object; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import hashlib
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from engram.projections.fusion import FUSIONS
from engram.projections.plan import no_facts, plan
from engram.projections.progress import Progress
from engram.projections.recall import RecallQuery, class_weights, recall, search
from engram.projections.stores import TenantStores
from engram.projections.tenant_graph import Status
from engram.projections.visibility import Principal
from engram.schemas.events import Event, Position, event_from_json
from engram.streams import kafka_local
from engram.streams.embedder import Embedder, embedding_text, load_embedder
from engram.streams.indexer import Indexer
from engram.streams.producer import EventProducer
from engram.streams.topics import ensure_topics

from engram.settings import Settings, load_settings
from tests.harness import Server, isolated_settings
from tests.realtalk import Chat, load_chats, remember_lines, summarise


def say(msg: str) -> None:
    print(f"[recall bench] {msg}", file=sys.stderr, flush=True)


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return round(s[min(len(s) - 1, round(p * (len(s) - 1)))], 2)


def embedded_events(chats: list[Chat], embedder: Embedder, cache: Path) -> list[Event]:
    """Every turn as an event with its embedding; embeddings cached by model and text."""
    events = [event_from_json(line) for chat in chats for line in remember_lines(chat)]
    texts = [embedding_text(e.payload.label, e.payload.content) for e in events]
    key = hashlib.sha256("\0".join([embedder.name, *texts]).encode()).hexdigest()[:16]
    path = cache / f"realtalk-{key}.npy"
    if path.exists():
        vectors = np.load(path)
    else:
        say(f"embedding {len(texts)} turns with {embedder.name} (cached in {path})")
        started = time.perf_counter()
        vectors = np.concatenate([embedder.embed(texts[i : i + 256]) for i in range(0, len(texts), 256)])
        say(f"embedded at {len(texts) / (time.perf_counter() - started):.0f} texts/s")
        cache.mkdir(parents=True, exist_ok=True)
        np.save(path, vectors)
    out = []
    for ev, vec in zip(events, vectors, strict=True):
        embedded = dataclasses.replace(
            ev.payload, embedding=tuple(float(x) for x in vec), embedding_model=embedder.name
        )
        out.append(dataclasses.replace(ev, payload=embedded))
    return out


# -- 1. quality ------------------------------------------------------------------------------------
def quality(base: Settings, chats: list[Chat], events: list[Event], root: Path) -> dict[str, Any]:
    settings = isolated_settings(base, root / "quality", partitions=4)
    asyncio.run(ensure_topics(settings))
    server = Server(settings, root / "quality.log").start()
    try:
        server.wait_ready()

        async def produce() -> None:
            async with EventProducer(settings) as producer:
                await producer.send_many(events)

        started = time.perf_counter()
        asyncio.run(produce())
        server.wait_ready(timeout=1800)
        ingest_s = time.perf_counter() - started
        say(f"quality: {len(events)} turns applied and indexed in {ingest_s:.1f}s")
        table: dict[str, Any] = {}
        client = httpx.Client(timeout=60, auth=server.http.auth)
        for fusion in FUSIONS:
            scores = []
            for chat in chats:
                for q in chat.questions:
                    r = client.post(
                        f"{server.url}/v1/tenants/{chat.tenant}/recall",
                        json={"q": q.text, "limit": 10, "fusion": fusion},
                    )
                    r.raise_for_status()
                    scores.append((q.category, [h["id"] for h in r.json()["data"]], q.evidence))
            table[fusion] = summarise(scores)
            say(f"quality {fusion}: {table[fusion]['all']}")
        return {"turns": len(events), "ingest_events_per_s": round(len(events) / ingest_s, 1), "table": table}
    finally:
        server.stop()


# -- 2. latency ------------------------------------------------------------------------------------
TIERS = (2, 2, 3, 3, 3, 4, 5)  # of user and team memories: ~30% top tier


def synthetic_tenant(
    path: Path, n: int, pool: list[Event], embedder: Embedder, seed: int = 11
) -> dict[str, Any]:
    """N memories in one tenant, bulk-loaded through ``plan`` and materialised once."""
    rng = random.Random(seed)
    np_rng = np.random.default_rng(seed)
    stores = TenantStores(path, vectors=(embedder.name, embedder.dim))
    graph = stores.get("big", create=True)
    assert graph is not None
    quads = []
    started = time.perf_counter()
    for i in range(n):
        src = pool[i % len(pool)].payload
        vec = np.asarray(src.embedding, dtype=np.float32) + np_rng.normal(0, 0.02, embedder.dim).astype(
            np.float32
        )
        vec /= np.linalg.norm(vec)
        roll = rng.random()
        scope, holders, importance = "company", {}, 3
        if roll < 0.002:
            importance = 5  # a few hundred company High/Critical memories compete for the live context
        elif roll < 0.004:
            importance = 4
        elif roll < 0.3:  # 500 users with ~60 memories each, ~30% of them top tier
            scope, holders, importance = "user", {"user_id": f"u{i % 500}"}, rng.choice(TIERS)
        elif roll < 0.4:  # 50 teams with ~200 each
            scope, holders, importance = (
                "team",
                {"team_ids": [f"team{i % 50}"]},
                rng.choice([2, 2, 3, 3, 3, 4, 5]),
            )
        payload = {
            "memory_id": f"m{i}",
            "label": f"{src.label} #{i}",  # unique: equal labels are structural conflicts (O(k²))
            "content": f"{src.content} (note {i})",
            "kind": rng.choice(["fact", "preference", "context", "objective"]),
            "scope": scope,
            "stakeholders": holders,
            "importance": importance,
            "embedding": [float(x) for x in vec],
            "embedding_model": embedder.name,
        }
        ev = event_from_json(
            {"type": "MemoryRemembered", "tenant": "big", "source": "pipeline",
             "actor": {"id": "bench", "role": "pipeline"}, "payload": payload}
        )  # fmt: skip
        quads += plan(ev, Position(0, i, 1_764_547_200_000 + i * 1000), no_facts()).adds
    graph.store.bulk_extend(quads)
    graph.rematerialize()
    graph.commit(plan(event_from_json({"type": "ClockTicked", "tenant": "big", "source": "system",
                                       "actor": {"id": "clock", "role": "system"},
                                       "payload": {"now": "2026-12-01T00:00:00Z"}}),
                      Position(0, n, 1), graph), Position(0, n))  # fmt: skip
    load_s = time.perf_counter() - started
    started = time.perf_counter()
    indexes = stores.indexes("big")
    assert indexes is not None
    build_s = time.perf_counter() - started
    stores.close()
    return {"load_seconds": round(load_s, 1), "index_build_seconds": round(build_s, 1),
            "index_build_memories_per_s": round(n / build_s, 1)}  # fmt: skip


def latency(
    base: Settings, n: int, pool: list[Event], questions: list[str], fresh: list[str], root: Path
) -> dict[str, Any]:
    # the server's model (ENGRAM_EMBEDDER): vectors of another model are not searched, so the
    # server would answer by BM25 alone
    embedder = load_embedder(base.embedder)
    data = root / f"latency-{n}"
    say(f"latency: building a tenant of {n} memories")
    built = synthetic_tenant(data / "tenants", n, pool, embedder)

    # in process: the search alone, with the query vectors computed beforehand
    vectors = embedder.embed(questions)
    started = time.perf_counter()
    stores = TenantStores(data / "tenants", vectors=(embedder.name, embedder.dim))
    indexes = stores.indexes("big")
    assert indexes is not None
    open_ms = (time.perf_counter() - started) * 1e3
    weight = class_weights(stores.knowledge.ontology)
    # the search itself (candidates, eligibility, fusion, top 10), then the whole recall (the top
    # 10's text read and counted into tokens too), each over questions the store has not seen yet
    who = Principal("u7", frozenset({"team7"}))
    half = len(questions) // 2
    search_ms, recall_ms = [], []
    for q, vec in zip(questions[:half], vectors[:half], strict=True):
        started = time.perf_counter()
        search(indexes, RecallQuery(q=q), who, vec, class_weight=weight, top=10)
        search_ms.append((time.perf_counter() - started) * 1e3)
    for q, vec in zip(questions[half:], vectors[half:], strict=True):
        started = time.perf_counter()
        recall(indexes, RecallQuery(q=q), who, vec, count_tokens=embedder.count_tokens, class_weight=weight)
        recall_ms.append((time.perf_counter() - started) * 1e3)
    text_ms, vector_ms = [], []
    for q, vec in zip(questions, vectors, strict=True):
        t0 = time.perf_counter()
        indexes.text.search(q, 50)
        t1 = time.perf_counter()
        indexes.vectors.search(vec, 50)
        t2 = time.perf_counter()
        text_ms.append((t1 - t0) * 1e3)
        vector_ms.append((t2 - t1) * 1e3)
    embed_ms = []
    for q in questions:
        t0 = time.perf_counter()
        embedder.embed([q])
        embed_ms.append((time.perf_counter() - t0) * 1e3)
    stores.close()
    del indexes

    settings = isolated_settings(base, data, partitions=1)
    asyncio.run(ensure_topics(settings))
    server = Server(settings, root / f"latency-{n}.log").start()
    try:
        server.wait_ready(timeout=600)
        client = httpx.Client(timeout=60, auth=server.http.auth)
        url = f"{server.url}/v1/tenants/big"
        for k in range(10):  # warm up, with texts no measured request repeats
            client.post(f"{url}/recall", json={"q": f"warming up the server, round {k}"})
        rec, rec_embed, ctx, ctx_embed, ctx_after = [], [], [], [], []
        for i, (q, other) in enumerate(zip(questions, fresh, strict=True)):
            who = server.bearer("big", role="user", user=f"u{i % 500}", teams=[f"team{i % 50}"])
            t0 = time.perf_counter()
            r = client.post(f"{url}/recall", headers=who, json={"q": q})
            rec.append((time.perf_counter() - t0) * 1e3)
            r.raise_for_status()
            rec_embed.append(_phase(r, "embed"))
            # an agent's turn: the context for the text it just recalled with (its vector is kept) ...
            t0 = time.perf_counter()
            client.get(f"{url}/context", headers=who, params={"q": q}).raise_for_status()
            ctx_after.append((time.perf_counter() - t0) * 1e3)
            # ... and for a text never sent before: embedded in the request (the headline figure)
            t0 = time.perf_counter()
            r = client.get(f"{url}/context", headers=who, params={"q": other})
            ctx.append((time.perf_counter() - t0) * 1e3)
            r.raise_for_status()
            ctx_embed.append(_phase(r, "embed"))
        items = len([it for b in r.json()["blocks"] for it in b["items"]])
    finally:
        server.stop()
    return {
        "memories": n,
        **built,
        "recall_http_ms": {"p50": pct(rec, 0.5), "p95": pct(rec, 0.95)},
        "recall_embed_share": round(sum(rec_embed) / sum(rec), 3),
        "context_http_ms": {"p50": pct(ctx, 0.5), "p95": pct(ctx, 0.95), "items": items},
        "context_embed_share": round(sum(ctx_embed) / sum(ctx), 3),
        "context_after_recall_same_q_http_ms": {"p50": pct(ctx_after, 0.5), "p95": pct(ctx_after, 0.95)},
        "open_indexes_ms": round(open_ms, 1),  # the indexes opened after a restart (nothing read ahead)
        "first_search_after_open_ms": round(search_ms[0], 2),
        "search_in_process_ms": {"p50": pct(search_ms, 0.5), "p95": pct(search_ms, 0.95)},
        "recall_in_process_ms": {"p50": pct(recall_ms, 0.5), "p95": pct(recall_ms, 0.95)},
        "tantivy_top50_ms": {"p50": pct(text_ms, 0.5), "p95": pct(text_ms, 0.95)},
        "hnsw_top50_ms": {"p50": pct(vector_ms, 0.5), "p95": pct(vector_ms, 0.95)},
        "query_embedding_ms": {"p50": pct(embed_ms, 0.5), "p95": pct(embed_ms, 0.95)},
    }


def _phase(response: httpx.Response, name: str) -> float:
    for part in response.headers.get("server-timing", "").split(","):
        label, _, dur = part.strip().partition(";dur=")
        if label == name:
            return float(dur)
    return 0.0


# -- 3. indexing cost ------------------------------------------------------------------------------
def indexing(pool: list[Event], n: int, tenants: int, root: Path, model: str) -> dict[str, Any]:
    embedder = load_embedder(model)
    events = []
    for i in range(n):
        src = pool[i % len(pool)]
        payload = dataclasses.replace(src.payload, memory_id=f"m{i}")
        event_id = f"{i:08x}-0000-4000-8000-000000000000"
        events.append(
            dataclasses.replace(src, tenant=f"x{i % tenants:02d}", event_id=event_id, payload=payload)
        )

    async def run(with_indexes: bool) -> float:
        stores = TenantStores(
            Path(tempfile.mkdtemp(dir=root)), vectors=(embedder.name, embedder.dim) if with_indexes else None
        )
        progress = Progress()
        indexer = Indexer(stores, progress)
        await indexer.start()
        started = time.perf_counter()
        for i, ev in enumerate(events):  # as the projector's agent does, yielding after each record
            graph = stores.get(ev.tenant, create=True)
            assert graph is not None
            pos = Position(0, i, 1_764_547_200_000 + i)
            outcome = graph.apply(ev, pos)
            assert outcome.status is Status.APPLIED, outcome
            indexer.submit(ev.tenant, pos, outcome, (ev.payload.memory_id,))
            await asyncio.sleep(0)
        await progress.wait_for(0, len(events) - 1, 600)
        took = time.perf_counter() - started
        await indexer.stop()
        stores.close()
        return n / took

    rates = {}
    for label, flag in (("indexes_off", False), ("indexes_on", True), ("indexes_off_again", False)):
        rates[label] = round(asyncio.run(run(flag)), 1)
        say(f"indexing {label}: {rates[label]} events/s")
    off = statistics.fmean([rates["indexes_off"], rates["indexes_off_again"]])
    return {"events": n, "tenants": tenants, "events_per_s": rates,
            "indexing_cost": round(1 - rates["indexes_on"] / off, 3)}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--queries", type=int, default=200, help="questions asked (as many others for context)")
    ap.add_argument("--chats", default=None, help="comma-separated chat numbers (default: all)")
    ap.add_argument("--skip", default="", help="comma-separated parts to skip: quality,latency,indexing")
    ap.add_argument("--index-events", type=int, default=2000)
    args = ap.parse_args()
    skip = set(args.skip.split(",")) - {""}
    base = load_settings()
    kafka_local.start(base)
    chats = load_chats(names=args.chats.split(",") if args.chats else None)
    embedder = load_embedder(base.embedder)  # the server's (quality and latency ask one)
    events = embedded_events(chats, embedder, base.cache_dir)
    asked = [q.text for chat in chats for q in chat.questions]
    questions, fresh = asked[: args.queries], asked[args.queries : 2 * args.queries]
    if len(fresh) < len(questions):
        ap.error(f"--queries {args.queries}: {len(asked)} questions in the chats, at most {len(asked) // 2}")
    out: dict[str, Any] = {"benchmark": "recall", "embedder": embedder.name}
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
        root = Path(tmp)
        if "quality" not in skip:
            out["quality"] = quality(base, chats, events, root)
        if "indexing" not in skip:
            out["indexing"] = indexing(events, args.index_events, 20, root, base.embedder)
        if "latency" not in skip:
            out["latency"] = [
                latency(base, int(n), events, questions, fresh, root) for n in args.sizes.split(",")
            ]
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
