"""``engram import-conversations``: a whole chat history onto the conversations topic.

Reads LoCoMo-style JSON (``session_1``, ``session_2``… lists of turns with ``speaker``, ``dia_id``
and ``text`` or ``clean_text``, each with a ``date_time`` or its session's ``session_N_date_time``;
at the top level or under ``conversation``) or JSON lines of turns (``speaker``, ``text``, ``time``,
optional ``role``, ``turn_id`` and ``conversation_id``). Each turn is sealed and appended like a
turn sent over HTTP, for ``--user`` (the conversation's owner), with its event id derived from
the conversation and turn id, so importing the same file again stores nothing twice.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from engram.settings import Settings

TIME_FORMATS = ("%d.%m.%Y, %H:%M:%S", "%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y", "%Y-%m-%d %H:%M:%S")
SESSION_RE = re.compile(r"^session_(\d+)$")
CHUNK = 500
WHERE = "_where"  # where in the file a turn was read (a JSON line's number), for its error


def safe_id(text: str) -> str:
    """``text`` as an id (``[A-Za-z0-9][A-Za-z0-9_.-]*``, at most 128): ``D1:3`` becomes ``D1-3``."""
    cleaned = re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-._")[:128]
    return cleaned or "x"


def parse_when(text: Any, fallback: datetime) -> datetime:
    if isinstance(text, str):
        for fmt in TIME_FORMATS:
            try:
                return datetime.strptime(text.strip(), fmt).replace(tzinfo=UTC)
            except ValueError:
                continue
        try:
            parsed = datetime.fromisoformat(text)
            return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
        except ValueError:
            pass
    return fallback


def locomo_turns(doc: dict[str, Any], conversation_id: str, me: str | None) -> Iterator[dict[str, Any]]:
    """The turns of a LoCoMo-style document, in session order; a turn without a time of its own
    takes its session's (a second apart, so their order is kept)."""
    conv = doc.get("conversation", doc)
    sessions = sorted(
        (int(m.group(1)), key) for key in conv if (m := SESSION_RE.match(key)) and isinstance(conv[key], list)
    )
    speakers = doc.get("name") or {}
    me = me or speakers.get("speaker_1") or conv.get("speaker_a")
    clock = datetime(2000, 1, 1, tzinfo=UTC)
    for number, key in sessions:
        session_at = parse_when(conv.get(f"{key}_date_time"), clock)
        for i, turn in enumerate(conv[key]):
            text = turn.get("text") or turn.get("clean_text")
            if not isinstance(text, str) or not text.strip():
                continue
            at = parse_when(turn.get("date_time"), session_at + timedelta(seconds=i))
            clock = max(clock, at)
            speaker = str(turn.get("speaker") or "unknown")
            yield {
                "conversation_id": conversation_id,
                "turn_id": safe_id(str(turn.get("dia_id") or f"S{number}-{i + 1}")),
                "speaker": speaker,
                "role": "user" if speaker == me else "other",
                "text": text,
                "time": at.isoformat(),
            }


def json_lines(text: str, conversation_id: str, problems: list[str]) -> Iterator[dict[str, Any]]:
    """The turns of a JSON-lines file; a line that is not a JSON object is left out and named in
    ``problems`` with its number (the others are still imported)."""
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            turn = json.loads(line)
        except json.JSONDecodeError as exc:
            problems.append(f"line {n}: not JSON ({exc.msg} at column {exc.colno})")
            continue
        if not isinstance(turn, dict):
            problems.append(f"line {n}: a turn is a JSON object, not {type(turn).__name__}")
            continue
        yield {"conversation_id": conversation_id, "role": "user", **turn, WHERE: f"line {n}"}


def read_turns_file(
    path: Path, conversation_id: str, me: str | None
) -> tuple[list[dict[str, Any]], list[str]]:
    """The file's turns, and the lines left out (JSON lines only: a LoCoMo document is one JSON value)."""
    text = path.read_text(encoding="utf-8")
    problems: list[str] = []
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        return list(json_lines(text, conversation_id, problems)), problems
    if isinstance(doc, dict) and "text" in doc:  # JSON lines of one line
        return list(json_lines(text, conversation_id, problems)), problems
    if isinstance(doc, dict):
        return list(locomo_turns(doc, conversation_id, me)), problems
    if isinstance(doc, list):
        return [{"conversation_id": conversation_id, "role": "user", **t} for t in doc], problems
    raise ValueError(f"{path}: neither a LoCoMo-style conversation nor JSON lines of turns")


def bar(done: int, total: int, started: float) -> None:
    """A progress bar on stderr (no dependency)."""
    width = 30
    filled = width * done // max(total, 1)
    rate = done / max(time.monotonic() - started, 1e-9)
    sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} turns {rate:,.0f}/s")
    sys.stderr.flush()


def import_conversations(settings: Settings, args: argparse.Namespace) -> int:
    from engram.schemas.events import Actor  # before the payload modules: it imports them in order
    from engram.schemas.payloads import derive_turn_id
    from engram.streams.keystore import KeyStore
    from engram.streams.pipeline import Pipeline
    from engram.streams.producer import EventProducer
    from engram.streams.topics import ensure_topics

    path = Path(args.file)
    conversation_id = args.conversation or safe_id(path.stem)
    turns, unread = read_turns_file(path, conversation_id, args.me)
    actor = Actor("import", "operator", on_behalf_of=args.user)  # the owner is the user it is for
    pipeline = Pipeline(keys=KeyStore(settings.key_store_dir))
    started = time.monotonic()

    async def main() -> tuple[int, list[str]]:
        failed: list[str] = list(unread)
        produced = 0
        await ensure_topics(settings)
        async with EventProducer(settings) as producer:
            for start in range(0, len(turns), CHUNK):
                framed = []
                for n, t in enumerate(turns[start : start + CHUNK], start=start + 1):
                    turn_id = t.get("turn_id") or derive_turn_id(
                        str(t.get("speaker")), str(t.get("role")), str(t.get("time")), str(t.get("text"))
                    )
                    obj = {
                        "type": "ConversationTurn",
                        "tenant": args.tenant,
                        "source": "operator",
                        "actor": actor.to_avro(),
                        "occurred_at": t.get("time"),
                        "payload": {
                            "conversation_id": t.get("conversation_id", conversation_id),
                            "turn_id": turn_id,
                            "speaker": t.get("speaker"),
                            "role": t.get("role"),
                            "text": t.get("text"),
                        },
                    }
                    try:
                        framed.append(pipeline.write(obj))
                    except Exception as exc:  # a bad turn fails alone, with its number
                        failed.append(f"{t.get(WHERE) or f'turn {n}'}: {exc}")
                await producer.send_many(framed)
                produced += len(framed)
                bar(start + len(turns[start : start + CHUNK]), len(turns), started)
        sys.stderr.write("\n")
        return produced, failed

    produced, failed = asyncio.run(main())
    for line in failed:
        print(f"{path}: {line}", file=sys.stderr)
    conversations = len({t.get("conversation_id", conversation_id) for t in turns})
    seconds = time.monotonic() - started
    print(
        f"imported {produced} turns, {conversations} conversations, {seconds:.2f} seconds;"
        f" {len(failed)} failed"
    )
    return 0 if not failed else 1
