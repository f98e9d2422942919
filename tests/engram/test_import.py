"""``engram import`` against a real server: good lines written, a bad JSON line and an invalid
memory reported by line, and the same file imported again (in other chunks too) appending nothing
to the log."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engram.settings import Settings
from tests.harness import Server, serving, settings_env

pytestmark = pytest.mark.integration

TENANT = "import-co"


@pytest.fixture(scope="module")
def server(broker: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = serving(broker, tmp_path_factory.mktemp("import"))
    yield srv
    srv.stop()


def engram(server: Server, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, **settings_env(server.settings)}
    return subprocess.run(
        [sys.executable, "-m", "engram.cli", *args], env=env, input=stdin, capture_output=True, timeout=300
    )


def memory(label: str, **extra: Any) -> str:
    body = {"source": "operator", "label": label, "content": f"{label}, in words", "kind": "fact"}
    return json.dumps({**body, "importance": 3, **extra})


def events_of(server: Server) -> list[str]:
    r = server.http.get(f"{server.url}/v1/tenants/{TENANT}/events", params={"limit": 1000})
    assert r.status_code == 200, r.text
    return [e["event_id"] for e in r.json()["data"]]


def test_import_writes_good_lines_reports_bad_ones_and_a_rerun_writes_nothing(
    server: Server, tmp_path: Path
) -> None:
    own = str(uuid.uuid4())
    lines = [
        memory("Markets", event_id=own),  # names its event: kept
        memory("Tone", kind="preference"),
        '{"label": "not json"',
        memory("Budget", importance=9),  # invalid: importance is 1 to 5
        "",  # blank: skipped, not counted
        memory("Launch"),
    ]
    path = tmp_path / "memories.jsonl"
    path.write_text("\n".join(lines) + "\n")
    first = engram(server, "import", str(path), "--tenant", TENANT, "--chunk", "2")
    assert first.returncode == 1, first.stderr
    summary = json.loads(first.stdout)
    assert (summary["lines"], summary["accepted"]) == (5, 3)
    [bad_json, invalid] = summary["refused"]
    assert (bad_json["line"], bad_json["status"]) == (3, None) and "not JSON" in bad_json["reason"]
    assert (invalid["line"], invalid["status"]) == (4, 422) and "importance" in invalid["reason"]
    assert b"imported 4/4 lines" in first.stderr  # the progress lines: 2 chunks of 2

    server.wait_ready()  # every record applied
    listed = server.http.get(f"{server.url}/v1/tenants/{TENANT}/memories").json()["data"]
    assert sorted(m["label"] for m in listed) == ["Launch", "Markets", "Tone"]
    assert {m["actor"]["id"] for m in listed} == {"import"}  # the token minted for an operator
    logged = events_of(server)
    assert len(logged) == 3 and own in logged

    again = engram(server, "import", "-", "--tenant", TENANT, "--chunk", "2", stdin=path.read_bytes())
    assert again.returncode == 1, again.stderr
    assert json.loads(again.stdout) == summary  # the same lines accepted, the same refused
    assert events_of(server) == logged  # the same event ids: nothing new in the log
    other_chunks = engram(server, "import", str(path), "--tenant", TENANT, "--chunk", "3")
    assert json.loads(other_chunks.stdout) == summary
    assert events_of(server) == logged  # an event id is the line's, not its place in a chunk

    only_good = tmp_path / "good.jsonl"
    only_good.write_text(memory("Region") + "\n")
    ok = engram(server, "import", str(only_good), "--tenant", TENANT)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout) == {"lines": 1, "accepted": 1, "refused": []}


def test_import_refuses_a_chunk_over_the_limit(server: Server, tmp_path: Path) -> None:
    path = tmp_path / "one.jsonl"
    path.write_text(memory("One") + "\n")
    done = engram(server, "import", str(path), "--tenant", TENANT, "--chunk", "1001")
    assert done.returncode == 2 and b"--chunk is 1 to 1000" in done.stderr
