"""``engram import``: memories from JSON lines, written through a running server's bulk route.

Unlike ``engram produce``, which appends events to the log itself, this goes through the API
(``POST …/memories:batch``), so each memory is authorised, pre-checked against the tenant's
memories and answered as an HTTP write would be. A line without an ``event_id`` is given one
derived from the tenant, the file's SHA-256 and the line's number (not from a chunk's
Idempotency-Key, which the server would combine with the item's place in its chunk): importing the
same file again, with any ``--chunk``, answers every memory as it was written the first time and
appends nothing, and a line that names its own event keeps it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from engram.settings import Settings

if TYPE_CHECKING:  # imported where it is used: every other command starts without it
    import httpx

MOST_PER_BATCH = 1000  # the server's limit per request (api/models/memories.py)
ATTEMPTS = 5  # per chunk: the first send and four more after a 503 or 429, or no answer
BACKOFF_S = 1.0  # the wait before a retry the server gave no Retry-After for, doubled each time
MOST_WAIT_S = 30.0
TOKEN_TTL_S = 24 * 3600.0  # an import of millions of lines outlasts the default hour
ENVELOPE = len(b'{"memories":[]}')
IMPORT_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "urn:engram:import")
JSON_TYPES = {list: "an array", str: "a string", int: "a number", float: "a number", bool: "a boolean"}


@dataclass
class Line:
    """A memory read from the file: its line number and its body as JSON bytes."""

    number: int
    body: bytes


@dataclass
class Summary:
    """What the import did: ``lines`` read (blank ones not counted), ``accepted``, and ``refused``
    every line not written, bad JSON included (``status`` None: never sent); ``stopped`` the
    line the import stopped at and why, when the server refused it as a whole."""

    lines: int = 0
    accepted: int = 0
    refused: list[dict[str, Any]] = field(default_factory=list)
    stopped: dict[str, Any] | None = None

    def refuse(self, line: int, status: int | None, reason: str) -> None:
        self.refused.append({"line": line, "status": status, "reason": reason})

    def as_json(self) -> str:
        self.refused.sort(key=lambda r: r["line"])
        done = {"lines": self.lines, "accepted": self.accepted, "refused": self.refused}
        return json.dumps(done | ({"stopped": self.stopped} if self.stopped else {}))


class Stopped(Exception):
    """The server refused the import as a whole (a bad token, the wrong tenant) or stayed
    unavailable: no later chunk would fare better."""


def event_id(tenant: str, digest: str, number: int) -> str:
    """The event id of line ``number`` of the file whose SHA-256 is ``digest``, imported into
    ``tenant``: the same in every import of that file, whatever its chunks."""
    return str(uuid.uuid5(IMPORT_NAMESPACE, f"{tenant}\n{digest}\n{number}"))


def read_lines(data: bytes, tenant: str, summary: Summary) -> list[Line]:
    """The file's memories, each with its event id; a blank line is skipped, and a line that is not
    one JSON object is refused in ``summary`` with its number and never sent (it would make the
    whole request 422)."""
    from engram.schemas.jsontext import NotJson, loads

    digest = hashlib.sha256(data).hexdigest()
    memories: list[Line] = []
    for number, raw in enumerate(data.split(b"\n"), start=1):
        raw = raw.removesuffix(b"\r")
        if not raw.strip():
            continue
        summary.lines += 1
        try:
            value = loads(raw)
        except NotJson as exc:  # not UTF-8, not JSON, a repeated key: as the API reads a body
            summary.refuse(number, None, str(exc))
            continue
        if not isinstance(value, dict):
            summary.refuse(number, None, f"a memory is a JSON object, not {JSON_TYPES.get(type(value), 'a')}")
            continue
        if value.get("event_id") is None:
            value["event_id"] = event_id(tenant, digest, number)
        try:  # ASCII: a lone surrogate stays an escape the server refuses in this item alone
            body = json.dumps(value, allow_nan=False, separators=(",", ":"))
        except ValueError:  # json.loads reads NaN and Infinity; no JSON reader must
            summary.refuse(number, None, "not JSON: NaN and Infinity are not JSON numbers")
            continue
        memories.append(Line(number, body.encode()))
    return memories


def chunks(memories: list[Line], most: int, max_bytes: int) -> Iterator[list[Line]]:
    """``memories`` in request-sized chunks: at most ``most`` each and, where a line allows it,
    under the server's body limit (``ENGRAM_MAX_BODY_BYTES``)."""
    part: list[Line] = []
    size = ENVELOPE
    for line in memories:
        if part and (len(part) == most or size + 1 + len(line.body) > max_bytes):
            yield part
            part, size = [], ENVELOPE
        part.append(line)
        size += len(line.body) + 1
    if part:
        yield part


def send_chunk(http: httpx.Client, path: str, part: list[Line]) -> list[dict[str, Any]]:
    """One chunk's answers, in order. A 503 or 429 for the whole request, an item refused 503 (the
    server's write queue full) and no answer at all are sent again, waiting as the server says: the
    items name their events, so those written already are answered as they were, not written again."""
    import httpx

    body = b'{"memories":[' + b",".join(line.body for line in part) + b"]}"
    headers = {"Content-Type": "application/json"}
    for attempt in range(ATTEMPTS):
        last = attempt + 1 == ATTEMPTS
        wait = min(BACKOFF_S * 2**attempt, MOST_WAIT_S)
        try:
            r = http.post(path, content=body, headers=headers)
        except httpx.TransportError as exc:
            if last:
                raise Stopped(f"no answer from {http.base_url}: {type(exc).__name__}: {exc}") from exc
            time.sleep(wait)
            continue
        if r.status_code in (429, 503) and not last:
            time.sleep(min(_retry_after(r) or wait, MOST_WAIT_S))
            continue
        if r.status_code in (401, 403, 404, 429) or r.status_code >= 500:
            raise Stopped(f"{r.status_code} from {http.base_url}{path}: {_reason(r)}")
        if r.status_code != 200:  # the request as a whole (413: one line over the body limit)
            return [{"status": r.status_code, "reason": _reason(r)} for _ in part]
        results: list[dict[str, Any]] = r.json()["results"]
        if last or not any(a["status"] == 503 for a in results):
            return results
        time.sleep(wait)
    raise AssertionError("unreachable")  # the last attempt returns or raises


def _retry_after(response: httpx.Response) -> float | None:
    try:
        return max(0.0, float(response.headers.get("Retry-After", "")))
    except ValueError:
        return None


def _reason(response: httpx.Response) -> str:
    """The API's reason (its ``detail`` items' messages), else the response's status line."""
    try:
        detail = response.json().get("detail")
    except (ValueError, AttributeError):
        detail = None
    if isinstance(detail, list):
        return "; ".join(str(d.get("msg", d)) if isinstance(d, dict) else str(d) for d in detail)
    return str(detail) if detail else response.reason_phrase


def import_memories(settings: Settings, args: argparse.Namespace) -> int:
    import httpx

    from engram.api.auth import mint

    if not 1 <= args.chunk <= MOST_PER_BATCH:
        print(f"engram import: --chunk is 1 to {MOST_PER_BATCH}, not {args.chunk}", file=sys.stderr)
        return 2
    data = sys.stdin.buffer.read() if args.file == "-" else Path(args.file).read_bytes()
    summary = Summary()
    memories = read_lines(data, args.tenant, summary)
    token = args.token or mint(settings, args.tenant, role="operator", user=args.user, ttl_s=TOKEN_TTL_S)
    url = (args.url or settings.api_url()).rstrip("/")
    path = f"/v1/tenants/{quote(args.tenant, safe='')}/memories:batch"
    started, sent = time.monotonic(), 0
    auth = {"Authorization": f"Bearer {token}", "User-Agent": "engram-import"}
    with httpx.Client(base_url=url, headers=auth, timeout=settings.write_timeout_s + 60) as http:
        for part in chunks(memories, args.chunk, settings.max_body_bytes):
            try:
                answers = send_chunk(http, path, part)
            except Stopped as exc:  # what was written stays written: a rerun writes the rest
                summary.stopped = {"line": part[0].number, "reason": str(exc)}
                print(f"engram import: stopped at line {part[0].number}: {exc}", file=sys.stderr)
                break
            for line, answer in zip(part, answers, strict=True):
                if answer["status"] == 202:
                    summary.accepted += 1
                else:
                    summary.refuse(line.number, answer["status"], answer.get("reason") or "refused")
            sent += len(part)
            rate = sent / max(time.monotonic() - started, 1e-9)
            print(f"imported {sent}/{len(memories)} lines ({rate:,.0f}/s)", file=sys.stderr, flush=True)
    print(summary.as_json())
    return 1 if summary.refused or summary.stopped else 0
