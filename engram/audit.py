"""The history of one memory, read from the log: what ``engram audit`` prints.

Read from the log and not from the projection, so it shows every event about the memory in log
order, with both times (valid and system), who wrote it, from where and why, and where the memory
stands in its supersession chain. The chain is as the log leaves it: supersessions, and
``replaces`` on a new memory, minus those a later MemoryRestored undid.
"""

from __future__ import annotations

import json
from typing import Any

from engram.schemas.payloads import PAYLOADS, MemoryEvent
from engram.settings import Settings
from engram.streams.event_log import MAX_LIMIT, read_events

# every event about a memory (its payload carries a memory_id), derived from the one registry
MEMORY_TYPES = tuple(name for name, cls in PAYLOADS.items() if issubclass(cls, MemoryEvent))


async def memory_history(settings: Settings, tenant: str, memory_id: str) -> dict[str, Any] | None:
    """Every event that touched ``memory_id`` (each with its ``relation`` to it) and its chain:
    ``replaces`` (what it replaced, and what those replaced, nearest first) and ``replaced_by``
    (what replaced it, then what replaced that). None when the memory never appears."""
    events: list[dict[str, Any]] = []
    skipped, cursor = 0, None
    while True:
        page = await read_events(settings, tenant, types=MEMORY_TYPES, limit=MAX_LIMIT, cursor=cursor)
        events.extend(page.events)
        skipped += page.skipped
        if page.next is None:
            break
        cursor = page.next
    touched = [{**e, "relation": rel} for e in events if (rel := relation(e, memory_id)) is not None]
    if not touched:
        return None
    replaced_by = supersessions(events)
    return {
        "tenant": tenant,
        "memory_id": memory_id,
        "events": touched,
        "chain": {
            "replaces": predecessors(replaced_by, memory_id),
            "replaced_by": successors(replaced_by, memory_id),
        },
        "skipped": skipped,
    }


def relation(event: dict[str, Any], memory_id: str) -> str | None:
    """How an event touches the memory: ``subject`` (it is about it), ``supersedes X`` (it names
    the memory as what replaces X), ``replaced by X`` (X is a new memory that replaces it)."""
    p = event["payload"]
    if p.get("memory_id") == memory_id:
        return "subject"
    if event["type"] == "MemorySuperseded" and p.get("superseded_by") == memory_id:
        return f"supersedes {p['memory_id']}"
    if event["type"] == "MemoryRemembered" and p.get("replaces") == memory_id:
        return f"replaced by {p['memory_id']}"
    return None


def supersessions(events: list[dict[str, Any]]) -> dict[str, str]:
    """What replaces each superseded memory after the events, in log order."""
    replaced_by: dict[str, str] = {}
    for e in events:
        p = e["payload"]
        if e["type"] == "MemorySuperseded":
            replaced_by[p["memory_id"]] = p["superseded_by"]
        elif e["type"] == "MemoryRemembered" and p.get("replaces"):
            replaced_by[p["replaces"]] = p["memory_id"]
        elif e["type"] == "MemoryRestored":
            replaced_by.pop(p["memory_id"], None)
    return replaced_by


def successors(replaced_by: dict[str, str], memory_id: str) -> list[str]:
    """What replaced the memory, then what replaced that, to the end (a cycle is cut)."""
    chain: list[str] = []
    at = replaced_by.get(memory_id)
    while at is not None and at != memory_id and at not in chain:
        chain.append(at)
        at = replaced_by.get(at)
    return chain


def predecessors(replaced_by: dict[str, str], memory_id: str) -> list[str]:
    """Breadth first, nearest first: a memory may have replaced several."""
    replaced: dict[str, list[str]] = {}
    for old, new in replaced_by.items():
        replaced.setdefault(new, []).append(old)
    out: list[str] = []
    frontier = [memory_id]
    while frontier:
        frontier = [
            old for m in frontier for old in replaced.get(m, []) if old != memory_id and old not in out
        ]
        out.extend(dict.fromkeys(frontier))
    return out


def render(history: dict[str, Any]) -> str:
    """The history as a timeline a person reads: one block per event, then the chain."""
    n = len(history["events"])
    lines = [
        f"memory {history['memory_id']} of tenant {history['tenant']}: {n} event{'s' * (n != 1)}, log order",
        "",
    ]
    for e in history["events"]:
        about = "" if e["relation"] == "subject" else f"  ({e['relation']})"
        actor = e["actor"]
        behalf = f", for {_plain(actor['on_behalf_of'])}" if actor["on_behalf_of"] else ""
        lines += [
            f"[{e['position']}] {e['type']}{about}",
            f"    logged {e['recorded_at']}; occurred {e['occurred_at']}",
            f"    by {_plain(actor['id'])} ({_plain(actor['role'])}{behalf}); source {e['source']}",
        ]
        why = [f"purpose: {_plain(e['purpose'])}"] if e["purpose"] else []
        if e["payload"].get("reason"):
            why.append(f"reason: {_plain(e['payload']['reason'])}")
        if why:
            lines.append("    " + "; ".join(why))
        lines.extend(f"    {line}" for line in _details(e))
        lines.append("")
    chain = history["chain"]
    lines += [
        "supersession chain:",
        f"    replaces:    {' <- '.join(chain['replaces']) or '(nothing)'}",
        f"    replaced by: {' -> '.join(chain['replaced_by']) or '(nothing: it is not superseded)'}",
    ]
    if history["skipped"]:
        lines.append(f"({history['skipped']} unreadable records of the tenant were passed over)")
    return "\n".join(lines) + "\n"


def _details(e: dict[str, Any]) -> list[str]:
    p = e["payload"]
    match e["type"]:
        case "MemoryRemembered":
            cls = "" if p["memory_class"] == "Memory" else f", class {p['memory_class']}"
            out = [
                f"label: {_show(p['label'])}",
                f"content: {_show(p['content'])}",
                f"{p['kind']}, {p['scope']} scope, importance {p['importance']}, "
                f"confidence {p['confidence']}{cls}",
            ]
            if p.get("properties"):
                out.append(f"properties: {_show(p['properties'])}")
            if p.get("replaces"):
                out.append(f"replaces {p['replaces']}")
            return out
        case "MemoryRevised":
            changes = {
                **p.get("changes", {}),
                **{f"properties.{k}": x for k, x in p.get("property_changes", {}).items()},
            }
            if not changes:
                return ["changes: (erased with the memory's key)"]
            return [f"changes: {', '.join(f'{k} = {_show(x)}' for k, x in changes.items())}"]
        case "MemorySuperseded":
            return [f"{p['memory_id']} superseded by {p['superseded_by']}"]
    return []


def _show(value: Any, width: int = 200) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= width else text[: width - 1] + "…"


def _plain(text: str) -> str:
    """Free text a writer chose, safe for a terminal: control characters (an escape sequence
    could rewrite what the auditor sees) shown escaped."""
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)
