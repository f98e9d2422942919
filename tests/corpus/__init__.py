"""Hostile inputs the tests iterate, kept as data so a new probe is a new line, not new code.

``times.txt``: ISO-8601 times, one a line; each either parses to an instant of years 0001-9999 UTC
or is refused with a reason, on every route and input path. ``http_bodies.jsonl``: request bodies
with the status and a word of the reason each must get.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).parent
WHO = {"source": "operator", "actor": {"id": "dana", "role": "operator"}}
TEMPLATES = {
    "MEMORY": {**WHO, "label": "L", "content": "C", "kind": "fact", "importance": 3},
    "KPI": {**WHO, "metric": "roas", "value": 1.5, "period": "2026-12"},
}


def times() -> list[str]:
    """Every time of the corpus (white space kept: a padded time is a probe too)."""
    lines = (HERE / "times.txt").read_text(encoding="utf-8").split("\n")
    return [line for line in lines if line and not line.startswith("#")]


@dataclass(frozen=True)
class Body:
    why: str
    method: str
    path: str  # under /v1/tenants/{tenant}/
    content: bytes
    content_type: str
    status: int
    msg: str  # a word the refusal's message must hold


def http_bodies() -> list[Body]:
    out = []
    for line in (HERE / "http_bodies.jsonl").read_text(encoding="utf-8").splitlines():
        d = json.loads(line)
        if "raw" in d:  # bytes, one character each
            content = d["raw"].encode("latin-1")
        elif "body" in d:
            content = json.dumps(TEMPLATES[d["body"]]).encode(d["encoding"])
        else:
            content = d["text"].encode("utf-8")
        ctype = d.get("content_type", "application/json")
        out.append(Body(d["why"], d["method"], d["path"], content, ctype, d["status"], d["msg"]))
    return out
