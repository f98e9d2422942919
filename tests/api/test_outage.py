"""A broker outage, with a broker of the test's own (the session's broker is shared and stays up):
a write answers 503 with Retry-After within ENGRAM_WRITE_TIMEOUT_S, the next at once (nothing of it
written), its retry with the same Idempotency-Key after the broker returns is applied once and is
in the log once, the server logs a bounded number of lines
and does not spin while the broker is down."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest
from engram.streams import kafka_local
from engram.streams.topics import ensure_topics

from engram.settings import Settings
from tests.harness import Server, isolated_settings

pytestmark = pytest.mark.integration

TENANT = "outage-co"
WRITE_TIMEOUT_S = 2.0
OUTAGE_S = 15.0
WHO = {"source": "operator", "actor": {"id": "dana", "role": "operator"}}


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def remember(server: Server, key: str, label: str, timeout: float = 30) -> tuple[int, dict, dict, float]:
    began = time.monotonic()
    r = server.http.post(
        f"{server.url}/v1/tenants/{TENANT}/memories",
        json={**WHO, "label": label, "content": label, "kind": "fact", "importance": 3},
        headers={"Idempotency-Key": key},
        timeout=timeout,
    )
    return r.status_code, r.json(), dict(r.headers), time.monotonic() - began


def test_a_write_during_an_outage_is_a_prompt_503_and_its_retry_is_applied_once(
    private_broker: Settings, tmp_path: Path
) -> None:
    settings = isolated_settings(private_broker, tmp_path / "data").model_copy(
        update={"write_timeout_s": WRITE_TIMEOUT_S, "log_summary_s": 10.0}
    )
    asyncio.run(ensure_topics(settings))
    log_path = tmp_path / "server.log"
    server = Server(settings, log_path).start()
    try:
        server.wait_ready()
        status, body, _, _ = remember(server, "before", "written before the outage")
        assert status == 202, body
        server.wait_ready()
        assert server.proc is not None
        lines_before, cpu_before = len(log_path.read_text().splitlines()), cpu_s(server.proc.pid)

        kafka_local.stop(private_broker)
        down_at = time.monotonic()
        status, body, headers, took = remember(server, "during", "written during the outage")
        assert status == 503, body
        assert headers.get("retry-after") == "5"
        assert took < WRITE_TIMEOUT_S + 2.0, took  # bounded: not until the broker returns
        msg = body["detail"][0]["msg"]
        assert "Idempotency-Key" in msg and "not confirmed" in msg, msg
        # the log has left a record unacknowledged past the write timeout: the next write is refused
        # at once, nothing of it written, not held for another timeout
        status, body, headers, took_next = remember(server, "refused", "refused during the outage")
        assert status == 503 and headers.get("retry-after") == "5", body
        assert "nothing of this one was written" in body["detail"][0]["msg"], body
        assert took_next < 1.0, took_next
        ready = server.http.get(f"{server.url}/readyz", timeout=10)
        assert ready.status_code == 503 and ready.json()["broker"] is False, ready.text
        time.sleep(max(0.0, OUTAGE_S - (time.monotonic() - down_at)))
        outage_s = time.monotonic() - down_at
        lines = log_path.read_text().splitlines()[lines_before:]
        cpu = cpu_s(server.proc.pid) - cpu_before
        print(f"outage {outage_s:.1f}s: {len(lines)} log lines, {cpu:.2f} CPU s, 503 in {took:.2f}s")
        assert len(lines) <= 40, "\n".join(lines[:60])  # one line per kind per 10 s
        assert cpu < 0.25 * outage_s, cpu  # backs off: no hot loop

        kafka_local.start(private_broker)
        deadline = time.monotonic() + 60
        while True:  # the client's retry: same key, until the log takes it
            status, body, _, _ = remember(server, "during", "written during the outage")
            if status == 202 or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert status == 202, body
        server.wait_ready()
        listed = server.http.get(f"{server.url}/v1/tenants/{TENANT}/memories").json()
        labels = sorted(m["label"] for m in listed["data"])
        assert labels == ["written before the outage", "written during the outage"], labels
        events = server.http.get(f"{server.url}/v1/tenants/{TENANT}/events", params={"limit": 100}).json()
        ids = [e["event_id"] for e in events["data"]]
        print(f"events in the log for {TENANT}: {len(ids)} ({len(set(ids))} distinct ids)")
        assert len(ids) == 2  # each once: the retries waited for the record still in the producer
    finally:
        server.stop()
