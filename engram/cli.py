"""``engram``: the front door to the local stack, the log, replay and benchmarks.

This module parses and dispatches; each group of commands lives in its own ``engram.console``
module. ``produce`` stays here (the one event pipeline's entry from files).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path

from engram.console import access, capture, dev, history, importing, stack, upkeep
from engram.console.access import ttl_seconds
from engram.logs import setup_logging
from engram.schemas.vocabulary import Role
from engram.settings import Settings, load_settings

log = logging.getLogger("engram.cli")


def _produce(settings: Settings, args: argparse.Namespace) -> int:
    from engram.projections.knowledge import load_knowledge
    from engram.streams.embedder import load_embedder
    from engram.streams.keystore import KeyStore
    from engram.streams.log_keys import check_log_keys
    from engram.streams.pipeline import Pipeline
    from engram.streams.producer import EventProducer, produce_lines
    from engram.streams.topics import ensure_topics

    async def main() -> int:
        data = sys.stdin.buffer.read() if args.file == "-" else Path(args.file).read_bytes()
        # a line that is not UTF-8 fails alone, with its number (schemas.jsontext refuses it)
        text = data.decode("utf-8", "surrogateescape")
        embedder = None if args.no_embed else load_embedder(settings.embedder)
        knowledge = load_knowledge(
            settings.ontology_dir.resolve(), settings.rules_dir.resolve(), settings.rule_engine
        )
        lines = [line.removesuffix("\r") for line in text.split("\n")]
        # what it seals must be readable by the log's projectors: the same key store as theirs
        await ensure_topics(settings)
        await check_log_keys(settings)
        async with EventProducer(settings) as producer:
            pipeline = Pipeline(knowledge, KeyStore(settings.key_store_dir), embedder)
            report = await produce_lines(producer, lines, pipeline)
        for line, reason in report.failed:
            print(f"{args.file}:{line}: {reason}", file=sys.stderr)
        print(f"produced {report.produced} events; {len(report.failed)} lines failed")
        return 0 if report.ok else 1

    return asyncio.run(main())


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="engram",
        description="Governed, reasoning memory for AI agents. Configuration comes from "
        "ENGRAM_* environment variables (see the README).",
    )
    sub = p.add_subparsers(dest="command", required=True)

    k = sub.add_parser("kafka", help="the local single-node Kafka broker (KRaft, no Docker)")
    ksub = k.add_subparsers(dest="action", required=True)
    ksub.add_parser("start", help="fetch Kafka from Maven Central if needed, start, create topics")
    ksub.add_parser("stop", help="stop the broker this project started")
    ksub.add_parser("status", help="exit 0 if the broker answers")
    t = ksub.add_parser("tool", help="run a Kafka command-line tool from the same jars")
    t.add_argument(
        "tool", choices=["topics", "consumer-groups", "console-consumer", "console-producer", "get-offsets"]
    )
    t.add_argument("tool_args", nargs=argparse.REMAINDER, help="arguments for the tool")

    s3 = sub.add_parser("s3", help="the local S3-compatible server, s3proxy (for tests and CI, no Docker)")
    s3sub = s3.add_subparsers(dest="action", required=True)
    s3sub.add_parser("start", help="fetch s3proxy from Maven Central if needed, start (or reuse) it")
    s3sub.add_parser("stop", help="stop the s3proxy this project started")
    s3sub.add_parser("status", help="exit 0 if an S3 server answers on the endpoint")

    s = sub.add_parser("serve", help="run the API with the projector in one process")
    s.add_argument("--demo", action="store_true", help="seed the demo tenant 'acme' if absent")

    sub.add_parser(
        "worker",
        help="one of the consumer group's workers, until SIGTERM: the projector and capture of its "
        "tenants; with ENGRAM_ADVERTISED_URL it also serves the API there, else no HTTP",
    )

    pr = sub.add_parser("produce", help="append events from a JSON-lines file ('-' for stdin)")
    pr.add_argument("file")
    pr.add_argument(
        "--no-embed",
        action="store_true",
        help="do not embed new memories that carry no embedding (they are then found by BM25 only)",
    )

    im = sub.add_parser(
        "import",
        help="write memories from a JSON-lines file ('-' for stdin), one MemoryCreate body a line, "
        "through a running server's POST …/memories:batch; importing it again writes nothing twice",
    )
    im.add_argument("file", help="JSON lines, each a POST …/memories body ('-' for stdin)")
    im.add_argument("--tenant", required=True)
    im.add_argument(
        "--url", help="the engram API (default: this deployment's, ENGRAM_ADVERTISED_URL or ENGRAM_API_PORT)"
    )
    im.add_argument(
        "--token",
        help="a bearer token (default: one for an operator of the tenant, minted as engram token does)",
    )
    im.add_argument("--user", default="import", help="the minted token's subject (default: import)")
    im.add_argument(
        "--chunk",
        type=int,
        default=1000,
        help="memories a request, 1 to 1000 (default 1000), fewer if over the body limit",
    )

    ic = sub.add_parser(
        "import-conversations",
        help="append a chat history (LoCoMo-style JSON, or JSON lines of turns) to the conversations topic",
    )
    ic.add_argument("file")
    ic.add_argument("--tenant", required=True)
    ic.add_argument("--user", required=True, help="whose conversation it is (its owner)")
    ic.add_argument("--conversation", help="the conversation id (default: the file's name)")
    ic.add_argument("--me", help="the speaker who is the user (default: the file's first speaker)")

    r = sub.add_parser(
        "replay", help="rebuild a tenant from its snapshots, the archive and the log; print its N-Quads"
    )
    r.add_argument("tenant")
    r.add_argument(
        "--as-of",
        metavar="TIME|POSITION",
        help="as the system knew it then: events the log appended at or before an ISO time, or up to "
        "and including a log position partition:offset",
    )
    r.add_argument(
        "--out", metavar="DIR", help="keep the rebuilt store in DIR (and its N-Quads in DIR/TENANT.nq)"
    )

    ar = sub.add_parser("archive", help="the events topic as Avro files in the object store")
    arsub = ar.add_subparsers(dest="action", required=True)
    arsub.add_parser("run", help="archive the events topic until SIGTERM, resuming from the manifest")
    ast = arsub.add_parser("status", help="per partition: archived offsets, segments, bytes, Kafka's, gaps")
    ast.add_argument("--json", action="store_true", help="print it as JSON")

    st = sub.add_parser(
        "status",
        help="the projector's consumer group: members (their advertised URLs), the owner of each "
        "partition, its end offset, committed offset and lag",
    )
    st.add_argument("--json", action="store_true", help="print it as JSON")
    au = sub.add_parser(
        "audit",
        help="print one memory's history from the log: every event that touched it (when, who, why) "
        "and its supersession chain",
    )
    au.add_argument("tenant")
    au.add_argument("memory_id", help="the id of the memory whose history to print")
    au.add_argument("--json", action="store_true", help="print it as JSON instead of a timeline")

    ri = sub.add_parser(
        "rebuild-index", help="rebuild a tenant's text and vector indexes from its graph (server stopped)"
    )
    ri.add_argument("tenant")

    va = sub.add_parser(
        "vacuum",
        help="rewrite a tenant's store from its current facts, so forgotten words leave its files too "
        "(server stopped)",
    )
    va.add_argument("tenant")

    tk = sub.add_parser("token", help="mint a bearer token (HS256, this deployment's secret)")
    tk.add_argument("tenant")
    tk.add_argument("--role", required=True, choices=[r.value for r in Role])
    tk.add_argument(
        "--user", required=True, help="the token's subject: a user (or an agent's, a pipeline's id)"
    )
    tk.add_argument("--teams", help="the user's teams, comma separated")
    tk.add_argument(
        "--on-behalf-of", help="an agent's token: the user it acts for (required for --role agent)"
    )
    tk.add_argument("--ttl", type=ttl_seconds, default=3600.0, help="lifetime: 90s, 15m, 1h (default), 7d")

    mc = sub.add_parser(
        "mcp",
        help="the MCP server over stdio, for a desktop agent: the API at ENGRAM_URL "
        "(default http://127.0.0.1:8000) with the bearer token in ENGRAM_TOKEN",
    )
    mc.add_argument("--url", help="the engram API (default: ENGRAM_URL, else http://127.0.0.1:8000)")

    sh = sub.add_parser(
        "schema-history",
        help="record the current Envelope schema in schemas/avro/history/ (run after editing a schema)",
    )
    sh.add_argument("--check", action="store_true", help="only check; exit 1 if it is not recorded")

    b = sub.add_parser("bench", help="run bench/NAME.py (prints JSON)")
    b.add_argument("name")
    b.add_argument("bench_args", nargs=argparse.REMAINDER)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    settings = load_settings()
    setup_logging(settings.log_level, settings.log_summary_s)
    handlers = {
        "kafka": stack.kafka,
        "s3": stack.s3,
        "serve": stack.serve,
        "worker": stack.worker,
        "status": stack.status,
        "produce": _produce,
        "import": importing.import_memories,
        "import-conversations": capture.import_conversations,
        "replay": history.replay,
        "archive": history.archive,
        "audit": history.audit,
        "rebuild-index": upkeep.rebuild_index,
        "vacuum": upkeep.vacuum,
        "schema-history": dev.schema_history,
        "token": access.token,
        "mcp": access.mcp,
        "bench": dev.bench,
    }
    try:
        return handlers[args.command](settings, args)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # one clear line, not a stack trace, for an operator at a terminal
        log.debug("command failed", exc_info=True)
        print(f"engram {args.command}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
