"""What an HTTP write costs between its request and the bytes handed to Kafka, before and after
``streams.pipeline`` (issue 23): the old path built the event, sealed and encoded it to check it,
encoded it again, decoded and unsealed that to get the event the projector would see, and the
producer encoded it a third time; the new one seals and encodes once and keeps the event beside the
bytes. Both paths run here, interleaved, on the same writes (a memory with a 384-d vector, sealed
with a real key store, and a KPI): no broker, no pre-check (the same in both). Prints one JSON
object: per-write µs, median of ``--rounds`` rounds of ``--writes`` writes each.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from engram.projections.knowledge import load_knowledge
from engram.projections.validation import check_property_names
from engram.schemas.events import Event, content_digest, event_from_json
from engram.streams import codec
from engram.streams.keystore import KeyStore
from engram.streams.pipeline import MAX_EVENT_BYTES, Pipeline, open_event, seal

ACTOR = {"id": "dana", "role": "operator"}


def memory(i: int) -> dict[str, Any]:
    return {
        "type": "MemoryRemembered",
        "tenant": "acme",
        "source": "operator",
        "actor": ACTOR,
        "event_id": str(uuid.uuid4()),
        "payload": {
            "label": f"Meta cap {i}",
            "content": "Never spend more than $40k a month on Meta without the CMO's sign-off",
            "kind": "objective",
            "scope": "company",
            "importance": 5,
            "memory_class": "BudgetConstraintMemory",
            "properties": {"platform": "meta", "amount": 40000.0, "currency": "USD"},
            "embedding": [((i * 7 + k) % 97) / 97 for k in range(384)],
            "embedding_model": "all-MiniLM-L6-v2",
        },
    }


def kpi(i: int) -> dict[str, Any]:
    return {
        "type": "KpiObserved",
        "tenant": "acme",
        "source": "pipeline",
        "actor": ACTOR,
        "event_id": str(uuid.uuid4()),
        "payload": {"metric": "roas", "value": 2.0 + i / 1000, "period": "2026-12"},
    }


def _encode_checked(event: Event) -> bytes:
    data = codec.encode(event)
    assert len(data) <= MAX_EVENT_BYTES
    return data


def old_path(envelope: dict[str, Any], pipeline: Pipeline) -> tuple[Event, bytes]:
    """Before: ingest.prepare (build, check names, seal, encode to check), Commands.validated (encode,
    decode, unseal) and producer.send (encode again)."""
    assert pipeline.knowledge is not None and pipeline.keys is not None
    event = event_from_json(envelope)
    check_property_names(pipeline.knowledge, event)
    event = seal(event, pipeline.keys)
    _encode_checked(event)
    event = open_event(codec.decode(_encode_checked(event)), pipeline.keys)
    value = _encode_checked(event)
    codec.headers(event)
    return event, value


def new_path(envelope: dict[str, Any], pipeline: Pipeline) -> tuple[Event, bytes]:
    framed = pipeline.write(envelope)
    framed.headers()
    return framed.event, framed.value


def same(a: Event, b: Event) -> bool:
    """The same event but for the seal's random nonce (and so its ciphertext) and the "now" each
    path's builder took for ``occurred_at``."""
    plain = [replace(e.payload, sealed=None) if hasattr(e.payload, "sealed") else e.payload for e in (a, b)]
    return plain[0] == plain[1] and content_digest(a) == content_digest(b)


def per_write_us(path: Callable[..., Any], envelopes: list[dict[str, Any]], pipeline: Pipeline) -> float:
    started = time.perf_counter()
    for envelope in envelopes:
        path(envelope, pipeline)
    return (time.perf_counter() - started) / len(envelopes) * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--writes", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
        pipeline = Pipeline(load_knowledge(), KeyStore(Path(tmp)))
        out: dict[str, Any] = {"bench": "write_path", "writes": args.writes, "rounds": args.rounds}
        for name, make in (("memory_384d_sealed", memory), ("kpi", kpi)):
            envelopes = [make(i) for i in range(args.writes)]
            old_event, _ = old_path(envelopes[0], pipeline)  # warm: keys made, schemas parsed
            new_event, _ = new_path(envelopes[0], pipeline)
            assert same(old_event, new_event), "the two paths must hand the pre-check the same event"
            old, new = [], []
            for _ in range(args.rounds):  # interleaved, so drift hits both alike
                old.append(per_write_us(old_path, envelopes, pipeline))
                new.append(per_write_us(new_path, envelopes, pipeline))
            o, n = statistics.median(old), statistics.median(new)
            out[name] = {
                "old_us": round(o, 1),
                "new_us": round(n, 1),
                "saved_us": round(o - n, 1),
                "saved_pct": round(100 * (o - n) / o, 1),
            }
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
