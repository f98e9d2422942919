"""Bearer tokens minted with this deployment's secret, and the lifetimes they accept."""

from __future__ import annotations

import argparse
import sys

from engram.settings import Settings

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


def token(settings: Settings, args: argparse.Namespace) -> int:
    """Mint an HS256 bearer token with this deployment's secret (ENGRAM_AUTH_SECRET or the data
    directory's auth-secret), for the embedded default and for tests."""
    from engram.api.auth import mint

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


def mcp(settings: Settings, args: argparse.Namespace) -> int:
    """The MCP server over stdio: tools that call the engram API at ENGRAM_URL (or --url) with the
    bearer token in ENGRAM_TOKEN, whose tenant and principal they act as."""
    import asyncio
    import os

    from engram.api.mcp.stdio import DEFAULT_URL, serve_stdio

    token = os.environ.get("ENGRAM_TOKEN", "").strip()
    if not token:
        print("engram mcp: set ENGRAM_TOKEN to a bearer token (engram token TENANT ...)", file=sys.stderr)
        return 2
    url = args.url or os.environ.get("ENGRAM_URL") or DEFAULT_URL
    asyncio.run(serve_stdio(url, token))
    return 0
