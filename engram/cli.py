"""``engram``: the front door to the local stack, the log, replay and benchmarks."""

from __future__ import annotations

import argparse
import asyncio
import logging
import subprocess
import sys
from importlib import resources
from pathlib import Path

from engram.logs import setup_logging
from engram.settings import Settings, load_settings
from schemas.vocabulary import Role

log = logging.getLogger("engram.cli")


def _kafka(settings: Settings, args: argparse.Namespace) -> int:
    from streams import kafka_local
    from streams.topics import ensure_topics

    match args.action:
        case "start":
            took = kafka_local.start(settings)
            created = asyncio.run(ensure_topics(settings))
            print(
                f"kafka answering on {settings.kafka_bootstrap} (took {took:.1f}s); "
                f"topics created: {', '.join(created) or 'none (all present)'}"
            )
            return 0
        case "stop":
            stopped = kafka_local.stop(settings)
            print("kafka stopped" if stopped else "no broker of ours was running")
            return 0
        case "status":
            st = kafka_local.status(settings)
            state = "answering" if st.answering else "not answering"
            print(f"kafka on {st.bootstrap}: {state}; pid {st.pid or '-'}")
            return 0 if st.answering else 1
        case "tool":
            return kafka_local.run_tool(settings, args.tool, args.tool_args)
    return 2


def _s3(settings: Settings, args: argparse.Namespace) -> int:
    from streams import s3_local

    match args.action:
        case "start":
            took = s3_local.start(settings)
            url = s3_local.endpoint(settings)
            print(f"s3 answering on {url} (took {took:.1f}s)")
            if not settings.s3_endpoint:
                print(f"engram stores objects in {settings.archive_root}; ENGRAM_S3_ENDPOINT={url} uses this")
            return 0
        case "stop":
            stopped = s3_local.stop(settings)
            print("s3proxy stopped" if stopped else "no s3proxy of ours was running")
            return 0
        case "status":
            st = s3_local.status(settings)
            state = "answering" if st.answering else "not answering"
            print(f"s3 on {st.endpoint}: {state}; pid {st.pid or '-'}")
            return 0 if st.answering else 1
    return 2


def _serve(settings: Settings, args: argparse.Namespace) -> int:
    import uvicorn

    from api.main import create_app
    from api.server import uvicorn_config

    print(settings.data_dir_notice(), file=sys.stderr, flush=True)  # where its secret and stores are

    async def main() -> None:
        # Header and body read timeouts, header size limit and connection cap: see api/server.py.
        server = uvicorn.Server(uvicorn_config(create_app(settings), settings))
        serving = asyncio.create_task(server.serve())
        while not server.started and not serving.done():
            await asyncio.sleep(0.1)
        if args.demo and server.started:
            await _seed_demo(settings)
        await serving

    asyncio.run(main())
    return 0


async def _seed_demo(settings: Settings) -> None:
    from api.auth import mint
    from projections.knowledge import load_knowledge
    from streams.embedder import load_embedder
    from streams.ingest import produce_lines
    from streams.keystore import KeyStore
    from streams.producer import EventProducer

    if (settings.tenants_dir / "acme").exists():
        log.info("demo tenant acme already present; not seeding again")
    else:
        lines = (resources.files("engram") / "demo" / "acme.jsonl").read_text().splitlines()
        knowledge = load_knowledge(settings.ontology_dir.resolve(), settings.rules_dir.resolve())
        async with EventProducer(settings) as producer:
            keys = KeyStore(settings.key_store_dir)
            report = await produce_lines(producer, lines, load_embedder(settings.embedder), knowledge, keys)
        log.info("seeded demo tenant acme with %d events", report.produced)
    base = f"http://{settings.api_host}:{settings.api_port}"
    token = mint(settings, "acme", role="operator", user="dana", ttl_s=86400)
    print(
        f"\nengram is up on {base}. A demo token (acme's operator dana, valid 24 h; mint others with "
        f"`engram token`):\n  export TOKEN={token}\ntry:\n"
        f'  curl -s -H "Authorization: Bearer $TOKEN" {base}/v1/tenants/acme/memories\n',
        flush=True,
    )


def _produce(settings: Settings, args: argparse.Namespace) -> int:
    from projections.knowledge import load_knowledge
    from streams.embedder import load_embedder
    from streams.ingest import produce_lines
    from streams.keystore import KeyStore
    from streams.producer import EventProducer

    async def main() -> int:
        data = sys.stdin.buffer.read() if args.file == "-" else Path(args.file).read_bytes()
        # a line that is not UTF-8 fails alone, with its number (schemas.jsontext refuses it)
        text = data.decode("utf-8", "surrogateescape")
        embedder = None if args.no_embed else load_embedder(settings.embedder)
        knowledge = load_knowledge(settings.ontology_dir.resolve(), settings.rules_dir.resolve())
        lines = [line.removesuffix("\r") for line in text.split("\n")]
        async with EventProducer(settings) as producer:
            report = await produce_lines(
                producer, lines, embedder, knowledge, KeyStore(settings.key_store_dir)
            )
        for line, reason in report.failed:
            print(f"{args.file}:{line}: {reason}", file=sys.stderr)
        print(f"produced {report.produced} events; {len(report.failed)} lines failed")
        return 0 if report.ok else 1

    return asyncio.run(main())


def _replay(settings: Settings, args: argparse.Namespace) -> int:
    """Rebuild a tenant from its nearest snapshot, the archive and the log, with a progress bar;
    print its facts as N-Quads, or keep the rebuilt store in ``--out``."""
    import gc
    import tempfile
    import time

    from projections.read import export_nquads
    from streams.asof import parse_as_of, replay_end
    from streams.objects import open_objects
    from streams.replay import replay_tenant
    from streams.snapshots import Snapshots

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


def _archive(settings: Settings, args: argparse.Namespace) -> int:
    """``run``: copy the events topic to the object store until SIGTERM (``streams.archiver``).
    ``status``: per partition, what is archived and what Kafka still holds; exit 1 on a gap."""
    import json
    from dataclasses import asdict

    from streams.archiver import archive_status, run_until_signalled
    from streams.objects import open_objects

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


def _audit(settings: Settings, args: argparse.Namespace) -> int:
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


def _rebuild_index(settings: Settings, args: argparse.Namespace) -> int:
    """Both search indexes of a tenant from its graph, with a progress bar (the server must be
    stopped: a store has one opener)."""
    import time

    from projections.knowledge import load_knowledge
    from projections.stores import TenantStores
    from streams.embedder import load_embedder

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


def _vacuum(settings: Settings, args: argparse.Namespace) -> int:
    from projections.stores import StoreLocked, TenantStores

    stores = TenantStores(settings.tenants_dir)
    try:
        count = stores.vacuum(args.tenant)
    except (LookupError, ValueError, StoreLocked) as exc:
        print(f"engram vacuum: {exc}", file=sys.stderr)
        return 1
    print(f"vacuumed {args.tenant}: {count} quads written afresh")
    return 0


TTL_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def ttl_seconds(text: str) -> float:
    """``90s``, ``15m``, ``1h``, ``7d`` (or plain seconds) as seconds."""
    number, unit = (text[:-1], text[-1]) if text[-1:] in TTL_UNITS else (text, "s")
    try:
        seconds = float(number) * TTL_UNITS[unit]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 90s, 15m, 1h, 7d)") from exc
    if not 0 < seconds <= 366 * 86400:
        raise argparse.ArgumentTypeError(f"a token lives more than 0 s and at most 366 days, not {text!r}")
    return seconds


def _token(settings: Settings, args: argparse.Namespace) -> int:
    """Mint an HS256 bearer token with this deployment's secret (ENGRAM_AUTH_SECRET or the data
    directory's auth-secret), for the embedded default and for tests."""
    from api.auth import mint

    teams = [t.strip() for t in (args.teams or "").split(",") if t.strip()]
    try:
        token = mint(
            settings,
            args.tenant,
            role=args.role,
            user=args.user,
            teams=teams,
            on_behalf_of=args.on_behalf_of,
            ttl_s=args.ttl,
        )
    except ValueError as exc:  # the claims the server would refuse
        print(f"engram token: {exc}", file=sys.stderr)
        return 1
    print(token)
    return 0


def _schema_history(settings: Settings, args: argparse.Namespace) -> int:
    from streams import schema_history

    return schema_history.main(["--check"] if args.check else [])


def _bench(settings: Settings, args: argparse.Namespace) -> int:
    script = Path("bench") / f"{args.name}.py"
    if not script.exists():
        print(f"no benchmark {script} (run from the repository root)", file=sys.stderr)
        return 2
    return subprocess.call([sys.executable, str(script), *args.bench_args])


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

    pr = sub.add_parser("produce", help="append events from a JSON-lines file ('-' for stdin)")
    pr.add_argument("file")
    pr.add_argument(
        "--no-embed",
        action="store_true",
        help="do not embed new memories that carry no embedding (they are then found by BM25 only)",
    )

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
    setup_logging(settings.log_level)
    handlers = {
        "kafka": _kafka,
        "s3": _s3,
        "serve": _serve,
        "produce": _produce,
        "replay": _replay,
        "archive": _archive,
        "audit": _audit,
        "rebuild-index": _rebuild_index,
        "vacuum": _vacuum,
        "schema-history": _schema_history,
        "token": _token,
        "bench": _bench,
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
