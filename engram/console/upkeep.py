"""A stopped tenant's upkeep: its search indexes rebuilt from its graph, its store vacuumed."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from engram.settings import Settings

if TYPE_CHECKING:
    import numpy as np


def rebuild_index(settings: Settings, args: argparse.Namespace) -> int:
    """Both search indexes of a tenant from its graph, with a progress bar (the server must be
    stopped: a store has one opener). A memory with no vector of the configured model (the model
    changed, or a revision dropped it) is embedded again: the vector index is a cache of the model."""
    import time

    from engram.projections.knowledge import load_knowledge
    from engram.projections.stores import TenantStores
    from engram.streams.embedder import load_embedder, memory_embedding

    embedder = load_embedder(settings.embedder)
    embed_pairs = memory_embedding(embedder)
    embedded = [0]

    def embed(memories: Sequence[tuple[str, str]]) -> np.ndarray:
        embedded[0] += len(memories)
        return embed_pairs(memories)

    knowledge = load_knowledge(
        settings.ontology_dir.resolve(), settings.rules_dir.resolve(), settings.rule_engine
    )
    stores = TenantStores(
        settings.tenants_dir,
        knowledge=knowledge,
        vectors=(embedder.name, embedder.dim),
        embed=embed,
        memory=settings.store == "memory",
    )
    if stores.memory:  # the graph is read from its newest snapshot
        from engram.streams.objects import open_objects
        from engram.streams.snapshots import Snapshots

        stores.snapshots = Snapshots(open_objects(settings))
    if not stores.exists(args.tenant):
        print(f"engram rebuild-index: no tenant {args.tenant!r} in {settings.tenants_dir}", file=sys.stderr)
        return 1
    started = time.monotonic()
    indexes = stores.indexes(args.tenant)
    assert indexes is not None
    embedded[0] = 0  # opening caught the indexes up; what counts is the rebuild below

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

    count = indexes.rebuild(tick=tick, reembed=True)
    indexes.commit(indexes.graph.checkpoint(), save_vectors=True)
    print(file=sys.stderr)
    print(
        f"rebuilt {args.tenant}: {indexes.text.count()} documents, {indexes.vectors.count()} vectors "
        f"({embedder.name}; {embedded[0]} embedded anew) from {count} memories in "
        f"{time.monotonic() - started:.1f}s"
    )
    stores.close()
    return 0


def vacuum(settings: Settings, args: argparse.Namespace) -> int:
    from engram.projections.stores import TenantStores
    from engram.projections.tenant_graph import StoreLocked

    stores = TenantStores(settings.tenants_dir)
    try:
        count = stores.vacuum(args.tenant)
    except (LookupError, ValueError, StoreLocked) as exc:
        print(f"engram vacuum: {exc}", file=sys.stderr)
        return 1
    print(f"vacuumed {args.tenant}: {count} quads written afresh")
    return 0
