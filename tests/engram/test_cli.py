"""The CLI against the real broker: produce from JSON lines, replay, Kafka status and tools."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from engram.streams.topics import partition_for

from engram.settings import Settings
from tests.factories import envelope, remembered
from tests.harness import settings_env

pytestmark = pytest.mark.integration


def engram(settings: Settings, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **settings_env(settings)}
    return subprocess.run(
        [sys.executable, "-m", "engram.cli", *args],
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_produce_reports_bad_lines_and_produces_good_ones(settings: Settings, tmp_path: Path) -> None:
    lines = [
        json.dumps(envelope("MemoryRemembered", remembered("m1"), tenant="acme")),
        json.dumps(envelope("MemoryRemembered", remembered("m2", importance=11), tenant="acme")),
        "this is not json",
        json.dumps(envelope("MemoryRemembered", remembered("m3"), tenant="acme")),
        json.dumps(
            envelope("KpiObserved", {"metric": "roas", "value": 3.1, "period": "2026-12"}, tenant="acme")
        ),
    ]
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(lines) + "\n")
    done = engram(settings, "produce", str(path))
    assert done.returncode == 1, done.stderr
    assert f"{path}:2: importance must be an integer 1-5" in done.stderr
    assert f"{path}:3: not JSON" in done.stderr
    assert "produced 3 events; 2 lines failed" in done.stdout

    replay = engram(settings, "replay", "acme")
    assert replay.returncode == 0, replay.stderr
    assert '<urn:engram:memory:m1> <https://engram.dev/ns#memoryId> "m1"' in replay.stdout
    assert '<urn:engram:memory:m3> <https://engram.dev/ns#memoryId> "m3"' in replay.stdout
    assert "urn:engram:memory:m2" not in replay.stdout
    assert '<urn:engram:kpi:roas:2026-12> <https://engram.dev/ns#value> "3.1"' in replay.stdout

    again = engram(settings, "produce", str(path))  # the same file twice: the same events, skipped
    assert again.returncode == 1 and "produced 3 events; 2 lines failed" in again.stdout
    assert facts(engram(settings, "replay", "acme").stdout) == facts(replay.stdout)

    ok = engram(settings, "produce", "-", stdin=lines[0] + "\n")
    assert ok.returncode == 0 and "produced 1 events; 0 lines failed" in ok.stdout


def test_replay_as_of_sees_only_what_the_log_had(settings: Settings, tmp_path: Path) -> None:
    import time
    from datetime import UTC, datetime

    first = tmp_path / "a.jsonl"
    first.write_text(json.dumps(envelope("MemoryRemembered", remembered("early"), tenant="acme")) + "\n")
    assert engram(settings, "produce", str(first)).returncode == 0
    time.sleep(1.0)
    cut = datetime.now(UTC).isoformat()
    time.sleep(1.0)
    second = tmp_path / "b.jsonl"
    second.write_text(json.dumps(envelope("MemoryRemembered", remembered("late"), tenant="acme")) + "\n")
    assert engram(settings, "produce", str(second)).returncode == 0
    then = engram(settings, "replay", "acme", "--as-of", cut)
    assert "memory:early" in then.stdout and "memory:late" not in then.stdout
    now = engram(settings, "replay", "acme")
    assert "memory:early" in now.stdout and "memory:late" in now.stdout
    assert "offset 2/2" in now.stderr  # the progress bar
    home = partition_for("acme", settings.events_partitions)
    at_first = engram(settings, "replay", "acme", "--as-of", f"{home}:0")  # a log position, included
    assert "memory:early" in at_first.stdout and "memory:late" not in at_first.stdout
    elsewhere = engram(settings, "replay", "acme", "--as-of", f"{home + 1}:0")
    assert elsewhere.returncode == 2 and f"on partition {home}" in elsewhere.stderr
    bad = engram(settings, "replay", "acme", "--as-of", "last tuesday")
    assert bad.returncode == 2 and "partition:offset" in bad.stderr
    kept = engram(settings, "replay", "acme", "--out", str(tmp_path / "kept"))
    assert kept.returncode == 0, kept.stderr
    assert (tmp_path / "kept" / "acme.nq").read_text() == now.stdout
    assert (tmp_path / "kept" / "acme" / "graph").is_dir()  # the rebuilt store, kept
    assert engram(settings, "replay", "acme", "--out", str(tmp_path / "kept")).returncode == 2  # not empty


def test_kafka_status_and_tools(settings: Settings) -> None:
    st = engram(settings, "kafka", "status")
    assert st.returncode == 0 and "answering" in st.stdout
    topics = engram(settings, "kafka", "tool", "topics", "--describe", "--topic", settings.events_topic)
    assert topics.returncode == 0, topics.stderr
    assert "retention.ms=-1" in topics.stdout and "message.timestamp.type=LogAppendTime" in topics.stdout
    assert f"PartitionCount: {settings.events_partitions}" in topics.stdout
    again = engram(settings, "kafka", "start")  # idempotent: reuses the broker that answers
    assert again.returncode == 0 and "took 0.0s" in again.stdout


def facts(nquads: str) -> list[str]:
    """The tenant's facts without the projection's position (which moves with every record)."""
    return [line for line in nquads.splitlines() if not line.startswith("<urn:engram:projection>")]


def test_produce_reports_every_hostile_line_and_produces_the_rest(settings: Settings, tmp_path: Path) -> None:
    good = json.dumps(envelope("ClockTicked", {"now": "2026-12-01T00:00:00Z"}, tenant="acme")).encode()
    lines = [
        good,
        json.dumps(envelope("MemoryRemembered", remembered("m1\n"), tenant="acme")).encode(),
        json.dumps(
            envelope("KpiObserved", {"metric": "roas", "value": float("nan"), "period": "2026-11"})
        ).encode(),
        b'{"type": "ClockTicked", "type": "KpiObserved"}',
        b'{"type": "ClockTicked", "tenant": "acme", "note": "\xff\xfe not utf-8"}',
        json.dumps(
            envelope("MemoryRemembered", remembered("m2", embedding=["x"], embedding_model="m"))
        ).encode(),
        json.dumps(
            envelope("MemoryRemembered", remembered("m3", importance=9, kind="wish"), tenant="acme")
        ).encode(),
        json.dumps(envelope("ClockTicked", {"now": "2026-12-02T00:00:00Z"}, tenant="acme")).encode(),
    ]
    path = tmp_path / "hostile.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    done = engram(settings, "produce", str(path))
    assert done.returncode == 1, done.stderr
    assert "produced 2 events; 6 lines failed" in done.stdout, done.stdout
    reasons = {
        int(line.split(":")[1]): line for line in done.stderr.splitlines() if line.startswith(str(path))
    }
    assert sorted(reasons) == [2, 3, 4, 5, 6, 7]
    assert "memory_id must match" in reasons[2]
    assert "finite" in reasons[3]
    assert "repeated keys" in reasons[4]
    assert "must be UTF-8" in reasons[5]
    assert "finite 32-bit floats" in reasons[6]  # the domain rules refuse it before Avro would
    assert "importance must be an integer" in reasons[7] and "kind must be one of" in reasons[7]


def test_vacuum_names_what_it_cannot_vacuum(settings: Settings) -> None:
    for bad, reason in (("nope", "no tenant 'nope'"), ("Bad Tenant", "invalid tenant id")):
        done = engram(settings, "vacuum", bad)
        assert done.returncode == 1 and reason in done.stderr, done.stderr


def test_vacuum_of_a_store_a_server_holds_says_so_and_changes_nothing(settings: Settings) -> None:
    from engram.projections.stores import TenantStores

    held = TenantStores(settings.tenants_dir).get("acme", create=True)  # as a running server would
    assert held is not None
    before = sorted(p.name for p in settings.tenants_dir.joinpath("acme").iterdir())
    done = engram(settings, "vacuum", "acme")
    assert done.returncode == 1, done.stderr
    assert "locked by another process using the same data directory" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert sorted(p.name for p in settings.tenants_dir.joinpath("acme").iterdir()) == before


def test_replay_refuses_what_is_not_a_tenant_id(settings: Settings) -> None:
    for bad in ("acme\n", "Bad Tenant", "../etc"):
        done = engram(settings, "replay", bad)
        assert done.returncode == 1 and "not a tenant id" in done.stderr, done.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["x\n", "--role", "operator", "--user", "dana"],
        ["Acme", "--role", "operator", "--user", "dana"],
        ["acme", "--role", "operator", "--user", "dana\n"],
        ["acme", "--role", "operator", "--user", ""],
        ["acme", "--role", "agent", "--user", "bot", "--on-behalf-of", ""],
        ["acme", "--role", "agent", "--user", "bot", "--on-behalf-of", "u\n"],
        ["acme", "--role", "user", "--user", "dana", "--teams", "a b"],
    ],
)
def test_token_refuses_what_the_server_would_refuse(
    args: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from engram.cli import main

    monkeypatch.setenv("ENGRAM_AUTH_SECRET", "cli-tests-secret-of-at-least-32-bytes")
    assert main(["token", *args]) == 1
    out = capsys.readouterr()
    assert out.out == "" and "engram token: " in out.err, out


def test_produce_refuses_a_line_the_projector_would_dead_letter(settings: Settings, tmp_path: Path) -> None:
    """The README's example line (a pipeline writing a memory) printed "produced 1 events; 0 lines
    failed" and was then dead-lettered by the projector's governance check; now it is FILE:LINE."""
    line = {
        "type": "MemoryRemembered",
        "tenant": "acme",
        "source": "pipeline",
        "actor": {"id": "etl", "role": "pipeline"},
        "payload": {
            "label": "Meta cap",
            "content": "Max $40k/month on Meta",
            "kind": "objective",
            "scope": "company",
            "importance": 5,
            "memory_class": "BudgetConstraintMemory",
            "properties": {"platform": "meta", "amount": 40000.0, "currency": "USD"},
        },
    }
    path = tmp_path / "pipeline.jsonl"
    path.write_text(json.dumps(line) + "\n")
    done = engram(settings, "produce", "--no-embed", str(path))
    assert done.returncode == 1, done.stdout
    assert (
        f"{path}:1: a pipeline may only emit KpiObserved, SpendObserved, ClockTicked, "
        "ConversationTurn and TurnsExtracted"
    ) in done.stderr
    assert "produced 0 events; 1 lines failed" in done.stdout
