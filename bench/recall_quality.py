"""Recall quality on REALTALK: R@5, R@10 and MRR per question type, dev and held-back splits.

Every turn is one memory (one tenant per chat, ``tests/realtalk.py``), applied in process to a real
store (graph, tantivy, hnswlib) by the projection code; every question is asked through the same
``recall`` the route calls, with the route's defaults (limit 10, the tenant's clock), for each
fusion the route offers. The default ranking's changes are then switched off one at a time on the
same stores (the ablation). ``--http-check`` asks one chat's questions through ``POST …/recall``
of a real server too and fails unless the ranked ids are the same as in process: the figures here
are the route's. Tune on ``dev`` only; ``held-back`` is reported, never tuned on.
Prints one JSON object; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import hashlib
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from engram.projections.fusion import FUSIONS
from engram.projections.recall import DEFAULT_RANKING, Ranking, RecallQuery, class_weights, recall
from engram.projections.stores import TenantStores
from engram.projections.visibility import Principal
from engram.schemas.events import Event, Position
from engram.streams import kafka_local
from engram.streams.embedder import Embedder, load_embedder
from engram.streams.producer import EventProducer
from engram.streams.topics import ensure_topics

from bench.recall import embedded_events
from engram.settings import Settings, load_settings
from tests.harness import Server, isolated_settings
from tests.realtalk import SPLITS, Chat, load_chats, summarise

OPERATOR = Principal(role="operator")  # who the bench's HTTP token is; every turn is company-scoped

# Each change of the default ranking undone, one at a time (what it contributes), one rejected
# alternative, and the ranking before them all (the old weights against the server's wall clock, no
# conversation context, no feedback, no time expressions); see
# ``Ranking`` in projections/recall.py.
OLD_WEIGHTS = {"relevance": 0.70, "recency": 0.15, "forgetting": 0.15}
ABLATION: dict[str, tuple[Ranking, bool]] = {  # (ranking, against the wall clock)
    "without conversation context": (dataclasses.replace(DEFAULT_RANKING, context_hits=0), False),
    "with the old recency weights (0.15 + 0.15)": (
        dataclasses.replace(DEFAULT_RANKING, **OLD_WEIGHTS),
        False,
    ),
    "without recency and forgetting": (dataclasses.replace(DEFAULT_RANKING, recency=0, forgetting=0), False),
    "without pseudo-relevance feedback": (dataclasses.replace(DEFAULT_RANKING, feedback_docs=0), False),
    "without query time expressions": (dataclasses.replace(DEFAULT_RANKING, time_boost=0), False),
    "with 200 candidates per index (not 100)": (dataclasses.replace(DEFAULT_RANKING, pool=200), False),
    "with BM25 k1 1.2, b 0.75 (tantivy's own)": (
        dataclasses.replace(DEFAULT_RANKING, bm25_k1=1.2, bm25_b=0.75),
        False,
    ),
    "before (old weights, wall clock, no context)": (
        dataclasses.replace(
            DEFAULT_RANKING,
            context_hits=0,
            feedback_docs=0,
            time_boost=0,
            bm25_k1=1.2,
            bm25_b=0.75,
            **OLD_WEIGHTS,
        ),
        True,
    ),
}


def say(msg: str) -> None:
    print(f"[recall quality] {msg}", file=sys.stderr, flush=True)


def question_vectors(chats: Sequence[Chat], embedder: Embedder, cache: Path) -> dict[str, np.ndarray]:
    texts = sorted({q.text for chat in chats for q in chat.questions})
    key = hashlib.sha256("\0".join([embedder.name, *texts]).encode()).hexdigest()[:16]
    path = cache / f"realtalk-questions-{key}.npy"
    if path.exists():
        vectors = np.load(path)
    else:
        say(f"embedding {len(texts)} questions (cached in {path})")
        vectors = np.concatenate([embedder.embed(texts[i : i + 64]) for i in range(0, len(texts), 64)])
        cache.mkdir(parents=True, exist_ok=True)
        np.save(path, vectors)
    return dict(zip(texts, vectors, strict=True))


def build(root: Path, events: Sequence[Event], embedder: Embedder) -> TenantStores:
    """Every event applied by the projection code, as the projector does, then indexed."""
    stores = TenantStores(root, vectors=(embedder.name, embedder.dim))
    started = time.perf_counter()
    for i, event in enumerate(events):
        graph = stores.get(event.tenant, create=True)
        assert graph is not None
        graph.apply(event, Position(0, i, 1_764_547_200_000 + i))
    for tenant in sorted({e.tenant for e in events}):
        stores.indexes(tenant)
    say(f"{len(events)} turns applied and indexed in {time.perf_counter() - started:.1f}s")
    return stores


def ask(
    stores: TenantStores,
    chat: Chat,
    vectors: dict[str, np.ndarray],
    embedder: Embedder,
    *,
    fusion: str = "default",
    ranking: Ranking = DEFAULT_RANKING,
    now: datetime | None = None,
) -> list[tuple[int, list[str], frozenset[str]]]:
    """(category, ranked ids, gold) of each question of ``chat``, as ``POST …/recall`` ranks them."""
    indexes = stores.indexes(chat.tenant)
    assert indexes is not None
    weight = class_weights(stores.knowledge.ontology)
    out = []
    for q in chat.questions:
        query = RecallQuery(q=q.text, limit=10, fusion=fusion)  # type: ignore[arg-type]
        vector = vectors[q.text] if fusion != "bm25" else None
        hits = recall(
            indexes,
            query,
            OPERATOR,
            vector,
            count_tokens=embedder.count_tokens,
            class_weight=weight,
            now=now,
            ranking=ranking,
        )
        out.append((q.category, [h.memory.id for h in hits], q.evidence))
    return out


def table(
    stores: TenantStores,
    chats: Sequence[Chat],
    vectors: dict[str, np.ndarray],
    embedder: Embedder,
    **how: Any,
) -> dict[str, Any]:
    return summarise(row for chat in chats for row in ask(stores, chat, vectors, embedder, **how))


def http_check(
    base: Settings, chat: Chat, events: Sequence[Event], stores: TenantStores, vectors: dict[str, np.ndarray],
    embedder: Embedder, model: str, root: Path,
) -> dict[str, Any]:  # fmt: skip
    """One chat through a real server's ``POST …/recall`` with the defaults: the same ids, in order.
    The server embeds with the bench's model (else every turn's vector is of another model, recall
    falls back to BM25 alone, and every ranking differs)."""
    settings = isolated_settings(base, root / "http", partitions=1).model_copy(update={"embedder": model})
    asyncio.run(ensure_topics(settings))
    server = Server(settings, root / "http.log").start()
    try:
        server.wait_ready()

        async def produce() -> None:
            async with EventProducer(settings) as producer:
                await producer.send_many(e for e in events if e.tenant == chat.tenant)

        asyncio.run(produce())
        server.wait_ready(timeout=600)
        client = httpx.Client(timeout=60, auth=server.http.auth)
        local = ask(stores, chat, vectors, embedder)
        differ = 0
        for q, (_, ranked, _) in zip(chat.questions, local, strict=True):
            r = client.post(f"{server.url}/v1/tenants/{chat.tenant}/recall", json={"q": q.text})
            r.raise_for_status()
            differ += [h["id"] for h in r.json()["data"]] != ranked
        return {"chat": chat.tenant, "questions": len(local), "rankings_that_differ": differ}
    finally:
        server.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--split", choices=[*SPLITS, "both"], default="both")
    ap.add_argument("--fusions", default=",".join(FUSIONS), help="comma-separated fusion methods")
    ap.add_argument("--no-ablation", action="store_true")
    ap.add_argument("--embedder", default=None, help="ENGRAM_EMBEDDER's names (default: that setting's)")
    ap.add_argument("--http-check", default=None, metavar="CHAT", help="a chat to ask through HTTP too")
    args = ap.parse_args()
    base = load_settings()
    splits = list(SPLITS) if args.split == "both" else [args.split]
    chats = {name: load_chats(names=SPLITS[name]) for name in splits}
    every = [c for name in splits for c in chats[name]]
    model = args.embedder or base.embedder
    embedder = load_embedder(model)
    events = embedded_events(every, embedder, base.cache_dir)
    vectors = question_vectors(every, embedder, base.cache_dir)
    out: dict[str, Any] = {"benchmark": "recall_quality", "embedder": embedder.name, "limit": 10}
    out["splits"] = {name: [c.tenant for c in chats[name]] for name in splits}
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
        root = Path(tmp)
        stores = build(root / "tenants", events, embedder)
        for name in splits:
            rows: dict[str, Any] = {}
            for fusion in args.fusions.split(","):
                rows[fusion] = table(stores, chats[name], vectors, embedder, fusion=fusion)
                say(f"{name} {fusion}: {rows[fusion]['all']}")
            if not args.no_ablation:
                for label, (ranking, wall) in ABLATION.items():
                    now = datetime.now().astimezone() if wall else None
                    rows[label] = table(stores, chats[name], vectors, embedder, ranking=ranking, now=now)
                    say(f"{name} {label}: {rows[label]['all']}")
            out[name] = rows
        if args.http_check:
            [chat] = [c for c in every if c.tenant == f"realtalk-{args.http_check}"]
            kafka_local.start(base)
            out["http_check"] = http_check(base, chat, events, stores, vectors, embedder, model, root)
            say(f"http check: {out['http_check']}")
        stores.close()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
