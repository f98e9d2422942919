"""Commands that read the log's history: replay a tenant, archive the topic, audit a memory."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from engram.settings import Settings


def replay(settings: Settings, args: argparse.Namespace) -> int:
    """Rebuild a tenant from its nearest snapshot, the archive and the log, with a progress bar;
    print its facts as N-Quads, or keep the rebuilt store in ``--out``."""
    import gc
    import tempfile
    import time

    from engram.projections.read import export_nquads
    from engram.streams.asof import parse_as_of, replay_end
    from engram.streams.objects import open_objects
    from engram.streams.replay import replay_tenant
    from engram.streams.snapshots import Snapshots

    try:
        at = parse_as_of(args.as_of) if args.as_of else None
    except ValueError as exc:
        print(f"engram replay: --as-of: {exc}", file=sys.stderr)
        return 2
    out_dir = Path(args.out) if args.out else None
    if out_dir is not None and out_dir.exists() and any(out_dir.iterdir()):
        print(f"engram replay: --out {out_dir} is not empty", file=sys.stderr)
        return 2
    try:
        until = asyncio.run(replay_end(settings, args.tenant, at)) if at is not None else None
    except ValueError as exc:  # a position on another partition than the tenant's
        print(f"engram replay: --as-of: {exc}", file=sys.stderr)
        return 2
    started = time.monotonic()

    def tick(offset: int, end: int) -> None:
        width, done = 40, min(offset, end)
        filled = width * done // max(end, 1)
        print(f"\r[{'#' * filled}{'.' * (width - filled)}] offset {done}/{end}, "
              f"{time.monotonic() - started:.1f}s", end="", file=sys.stderr, flush=True)  # fmt: skip

    with tempfile.TemporaryDirectory() as tmp:
        root = out_dir or Path(tmp)
        try:
            graph = asyncio.run(
                replay_tenant(
                    settings, args.tenant, root, as_of_ms=at.time_ms if at else None, until_offset=until,
                    snapshots=Snapshots(open_objects(settings)), progress=tick,
                )
            )  # fmt: skip
        except (
            ValueError,
            LookupError,
        ) as exc:  # not a tenant id; offsets neither Kafka nor the archive hold
            print(f"\nengram replay: {exc}", file=sys.stderr)
            return 1
        print(file=sys.stderr)
        out = export_nquads(graph) if graph is not None else ""  # no event applied: no tenant
        del graph  # closes the store before its directory is removed
        gc.collect()
    if out_dir is not None:
        (out_dir / f"{args.tenant}.nq").write_text(out)
        print(f"replayed {args.tenant} into {out_dir} in {time.monotonic() - started:.1f}s", file=sys.stderr)
    else:
        sys.stdout.write(out)
    return 0


def archive(settings: Settings, args: argparse.Namespace) -> int:
    """``run``: copy the events topic to the object store until SIGTERM (``streams.archiver``).
    ``status``: per partition, what is archived and what Kafka still holds; exit 1 on a gap."""
    import json
    from dataclasses import asdict

    from engram.streams.archiver import archive_status, run_until_signalled
    from engram.streams.objects import open_objects

    objects = open_objects(settings)
    if args.action == "run":
        asyncio.run(run_until_signalled(settings, objects))
        return 0
    rows = asyncio.run(archive_status(settings, objects))
    if args.json:
        print(json.dumps([{**asdict(r), "lag": r.lag} for r in rows], indent=1))
    else:
        print(f"{settings.events_topic}: partition, archived offsets, segments, records, bytes, Kafka, gaps")
        for r in rows:
            archived = "-" if r.first_offset is None else f"{r.first_offset}..{r.last_offset}"
            held = f"{r.kafka_beginning}..{r.kafka_end - 1}" if r.kafka_end > r.kafka_beginning else "-"
            gaps = ", ".join(f"{a}..{b}" for a, b in r.gaps) or "none"
            print(
                f"p={r.partition} archived {archived} segments {r.segments} records {r.records} "
                f"bytes {r.bytes} kafka {held} (not yet archived: {r.lag}) gaps {gaps}"
            )
    return 1 if any(r.gaps for r in rows) else 0


def audit(settings: Settings, args: argparse.Namespace) -> int:
    """One memory's history from the log: every event that touched it, who, when and why, and its
    supersession chain (``engram.audit``); exit 1 if the memory never appears."""
    import json

    from engram.audit import memory_history, render

    history = asyncio.run(memory_history(settings, args.tenant, args.memory_id))
    if history is None:
        print(
            f"engram audit: memory {args.memory_id!r} never appears in tenant {args.tenant!r}'s events",
            file=sys.stderr,
        )
        return 1
    sys.stdout.write(
        json.dumps(history, indent=2, ensure_ascii=False) + "\n" if args.json else render(history)
    )
    return 0
