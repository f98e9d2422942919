"""A stopped tenant's upkeep: its search indexes rebuilt from its graph, its store vacuumed."""

from __future__ import annotations

import argparse
import sys

from engram.settings import Settings


def rebuild_index(settings: Settings, args: argparse.Namespace) -> int:
    """Both search indexes of a tenant from its graph, with a progress bar (the server must be
    stopped: a store has one opener)."""
    import time

    from engram.projections.knowledge import load_knowledge
    from engram.projections.stores import TenantStores
    from engram.streams.embedder import load_embedder

    embedder = load_embedder(settings.embedder)
    knowledge = load_knowledge(settings.ontology_dir.resolve(), settings.rules_dir.resolve())
    stores = TenantStores(settings.tenants_dir, knowledge=knowledge, vectors=(embedder.name, embedder.dim))
    if not stores.exists(args.tenant):
        print(f"engram rebuild-index: no tenant {args.tenant!r} in {settings.tenants_dir}", file=sys.stderr)
        return 1
    started = time.monotonic()
    indexes = stores.indexes(args.tenant)
    assert indexes is not None

    def tick(done: int, total: int) -> None:
        width = 40
        filled = width * done // max(total, 1)
        rate = done / max(time.monotonic() - started, 1e-9)
        print(
            f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} memories, {rate:.0f}/s",
            end="",
            file=sys.stderr,
            flush=True,
        )

    count = indexes.rebuild(tick=tick)
    indexes.commit(indexes.graph.checkpoint(), save_vectors=True)
    print(file=sys.stderr)
    print(
        f"rebuilt {args.tenant}: {indexes.text.count()} documents, {indexes.vectors.count()} vectors "
        f"({embedder.name}) from {count} memories in {time.monotonic() - started:.1f}s"
    )
    stores.close()
    return 0


def vacuum(settings: Settings, args: argparse.Namespace) -> int:
    from engram.projections.stores import StoreLocked, TenantStores

    stores = TenantStores(settings.tenants_dir)
    try:
        count = stores.vacuum(args.tenant)
    except (LookupError, ValueError, StoreLocked) as exc:
        print(f"engram vacuum: {exc}", file=sys.stderr)
        return 1
    print(f"vacuumed {args.tenant}: {count} quads written afresh")
    return 0
