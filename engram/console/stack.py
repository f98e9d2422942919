"""The local stack and the long-running processes: the broker, the object store, `engram serve`
(API and projector) and `engram worker` (the projector alone)."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from importlib import resources
from typing import TYPE_CHECKING, Any

from engram.settings import Settings

if TYPE_CHECKING:
    from engram.commands.answers import Attribution

log = logging.getLogger("engram.cli")


def kafka(settings: Settings, args: argparse.Namespace) -> int:
    from engram.streams import kafka_local
    from engram.streams.topics import ensure_topics

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
            nodes = kafka_local.status(settings)  # a line per node of a local cluster
            for st in nodes:
                state = "answering" if st.answering else "not answering"
                print(f"kafka on {st.bootstrap}: {state}; pid {st.pid or '-'}")
            return 0 if all(st.answering for st in nodes) else 1
        case "tool":
            return kafka_local.run_tool(settings, args.tool, args.tool_args)
    return 2


def s3(settings: Settings, args: argparse.Namespace) -> int:
    from engram.streams import s3_local

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


def serve(settings: Settings, args: argparse.Namespace, *, kind: str = "serve") -> int:
    """``kind``: the command, ``serve`` or ``worker`` (one with a URL), as ``engram status`` shows it."""
    import functools

    import uvicorn

    from engram.api.main import create_app
    from engram.api.server import uvicorn_config
    from engram.process import run_command, running
    from engram.streams.log_keys import check_log_keys
    from engram.streams.topics import ensure_topics

    print(settings.data_dir_notice(), file=sys.stderr, flush=True)  # where its secret and stores are

    async def main() -> None:
        # a broker that does not answer, or a log this key store cannot unseal, is said in one line
        # here, not in uvicorn's startup traceback
        await ensure_topics(settings)
        await check_log_keys(settings)
        # Header and body read timeouts, header size limit and connection cap: see api/server.py.
        app = create_app(settings, functools.partial(running, kind=kind, keys_checked=True))
        server = uvicorn.Server(uvicorn_config(app, settings))
        serving = asyncio.create_task(server.serve())
        while not server.started and not serving.done():
            if server.should_exit:  # signalled while starting: uvicorn would wait for the start first,
                # and the projector's may never end (a join the broker refuses is retried for ever)
                log.warning(
                    "engram serve signalled while starting: it has not joined its consumer groups yet "
                    "(see any errors above); stopping without having started"
                )
                serving.cancel()
                await asyncio.gather(serving, return_exceptions=True)
                return
            await asyncio.sleep(0.1)
        if args.demo and server.started:
            await seed_demo(settings, app)
        await serving

    return run_command(main())


def worker(settings: Settings, args: argparse.Namespace) -> int:
    """One of the group's workers. With ``ENGRAM_ADVERTISED_URL`` it serves the API there as
    ``engram serve`` does (the group routes its tenants' requests, writes too, to it); without, it
    projects and captures its tenants and serves no HTTP: FastAPI is never imported."""
    if settings.advertised_url:
        return serve(settings, argparse.Namespace(demo=False), kind="worker")
    from engram.process import run_command, work_until_signalled

    print(settings.data_dir_notice(), file=sys.stderr, flush=True)
    return run_command(work_until_signalled(settings))


DEMO_TENANT = "acme"
DEMO_OPERATOR = ("dana", "operator")


def status(settings: Settings, args: argparse.Namespace) -> int:
    """The projector's consumer group: its members (URLs), each partition's owner and lag."""
    from engram.streams.group import group_status, projector_group
    from engram.streams.objects import open_objects

    group = projector_group(settings, open_objects(settings))
    found = asyncio.run(group_status(settings, group))
    if args.json:
        print(json.dumps(found, indent=2))
        return 0
    print(f"group {found['group']}: {found['state']}, {len(found['members'])} members")
    for m in found["members"]:
        kind = m.get("kind") or "other"
        print(f"  {m['url'] or m['member']}  ({kind} on {m['host']}): partitions {m['partitions']}")
    print("partition  owner                               end  committed  lag")
    for p in found["partitions"]:
        owner = p["owner"] or "-"
        print(f"{p['partition']:>9}  {owner:<32} {p['end']:>6} {p['committed']:>10} {p['lag']:>4}")
    return 0


def demo_spine() -> tuple[dict[str, dict[str, Any]], Attribution]:
    """The demo tenant's onboarding request (engram/demo/acme-onboarding.json), checked by the
    route's own model, as the slots and the attribution the onboarding command takes."""
    from engram.api.models.onboarding import OnboardingRequest
    from engram.commands.answers import Attribution
    from engram.schemas.events import Actor

    text = (resources.files("engram") / "demo" / "acme-onboarding.json").read_text()
    request = OnboardingRequest.model_validate_json(text)
    by = Attribution(source="onboarding", actor=Actor(*DEMO_OPERATOR), occurred_at=request.occurred_at)
    return request.memories(), by


def demo_envelopes(tenant: str = DEMO_TENANT) -> list[dict[str, Any]]:
    """The demo tenant's events as JSON envelopes (for ``engram produce`` and tests): the writes
    its onboarding makes, then engram/demo/acme.jsonl."""
    from engram.commands.onboarding import writes

    memories, by = demo_spine()
    spine = [b.envelope("MemoryRemembered", tenant, p) for _, p, b in writes(tenant, memories, by)]
    text = (resources.files("engram") / "demo" / "acme.jsonl").read_text()
    rest = [json.loads(line) for line in text.splitlines()]
    as_json = json.loads(json.dumps(spine, default=lambda t: t.isoformat()))
    return [*as_json, *({**line, "tenant": tenant} for line in rest)]


async def seed_demo(settings: Settings, app: Any) -> None:
    """Seed the demo tenant on the running server: its spine through the onboarding command (the
    route's path), then the rest of its history (engram/demo/acme.jsonl)."""
    from engram.api.auth import mint
    from engram.commands.onboarding import onboard
    from engram.streams.producer import produce_lines

    if (settings.tenants_dir / DEMO_TENANT).exists():
        log.info("demo tenant acme already present; not seeding again")
    else:
        runtime = app.state.runtime
        memories, by = demo_spine()
        await onboard(runtime.commands, DEMO_TENANT, memories, by)
        lines = (resources.files("engram") / "demo" / "acme.jsonl").read_text().splitlines()
        report = await produce_lines(runtime.producer, lines, runtime.commands.pipeline)
        log.info("seeded demo tenant acme: onboarded %s and %d events", ", ".join(memories), report.produced)
    base = f"http://{settings.api_host}:{settings.api_port}"
    token = mint(settings, "acme", role="operator", user="dana", ttl_s=86400)
    print(
        f"\nengram is up on {base}. A demo token (acme's operator dana, valid 24 h; mint others with "
        f"`engram token`):\n  export TOKEN={token}\ntry:\n"
        f'  curl -s -H "Authorization: Bearer $TOKEN" {base}/v1/tenants/acme/memories\n',
        flush=True,
    )
