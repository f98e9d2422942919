"""Two and three `engram serve` processes in one consumer group (stores in memory or on disk, one
object store, one key store and auth secret, a data directory each): a request sent to any is
answered by the tenant's owner, and a kill -9 of one under a write load loses nothing and applies
nothing twice: the survivors take its tenants over from their snapshots and the log, and each
answers every read. On disk, a process keeps a copy of only the tenants it owns."""

from __future__ import annotations

import asyncio
import random
import secrets
import time
from pathlib import Path
from typing import Any

import pytest
from engram.streams.group import group_status, projector_group
from engram.streams.objects import open_objects
from engram.streams.topics import partition_for

from engram.settings import Settings
from tests.factories import random_stream
from tests.harness import Server, free_port, isolated_settings
from tests.streams.test_crash import Feeder, assert_equals_its_replay, interleave

pytestmark = pytest.mark.integration

PARTITIONS, TENANTS, PER_TENANT = 12, 24, 60


def members(broker: Settings, tmp_path: Path, n: int, store: str = "memory") -> list[Settings]:
    """``n`` processes' settings: what they must share, shared; their stores' directories and
    ports their own."""
    a = isolated_settings(broker, tmp_path / "p0", partitions=PARTITIONS).model_copy(
        update={
            "store": store,
            "snapshot_every": 30,
            "snapshot_after_s": 1.0,
            "archive_dir": tmp_path / "objects",
            "keys_dir": tmp_path / "keys",
            "auth_secret": secrets.token_urlsafe(32),
        }
    )
    own = [{"data_dir": tmp_path / f"p{i}", "api_port": free_port()} for i in range(1, n)]
    return [a, *(a.model_copy(update=u) for u in own)]


def pair(broker: Settings, tmp_path: Path) -> tuple[Settings, Settings]:
    a, b = members(broker, tmp_path, 2)
    return a, b


def status(settings: Settings) -> dict[str, Any]:
    return asyncio.run(group_status(settings, projector_group(settings, open_objects(settings))))


def wait_members(settings: Settings, urls: set[str], timeout: float = 60) -> dict[str, Any]:
    """The group's status once exactly these members own every partition between them."""
    deadline, found = time.monotonic() + timeout, {}
    while time.monotonic() < deadline:
        found = status(settings)
        owners = {p["owner"] for p in found["partitions"]}
        if found["state"] == "Stable" and {m["url"] for m in found["members"]} == urls == owners:
            return found
        time.sleep(0.2)
    raise TimeoutError(f"the group did not settle on {urls}: {found}")


def start(settings: Settings, log: Path, request: pytest.FixtureRequest) -> Server:
    return start_all([settings], [log], request)[0]


def start_all(settings: list[Settings], logs: list[Path], request: pytest.FixtureRequest) -> list[Server]:
    """Start the processes together (they join the group while the others start), then wait for
    each to be ready."""
    servers = [Server(s, log).start() for s, log in zip(settings, logs, strict=True)]
    for server in servers:
        request.addfinalizer(server.stop)  # a failed assertion must not leave a process running
    for server in servers:
        server.wait_ready()
    return servers


def test_a_request_to_a_process_that_does_not_own_the_tenant_is_answered_by_its_owner(
    broker: Settings, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    sa, sb = pair(broker, tmp_path)
    a = start(sa, tmp_path / "a.log", request)
    b = start(sb, tmp_path / "b.log", request)
    found = wait_members(sa, {a.url, b.url})
    assert {m["url"]: len(m["partitions"]) for m in found["members"]} == {a.url: 6, b.url: 6}
    owners = {p["partition"]: p["owner"] for p in found["partitions"]}
    tenant = next(f"acme{i}" for i in range(100) if owners[partition_for(f"acme{i}", PARTITIONS)] == b.url)

    body = {"source": "operator", "label": "L", "content": "C", "kind": "fact", "importance": 3,
            "memory_id": "m1"}  # fmt: skip
    r = a.http.post(f"{a.url}/v1/tenants/{tenant}/memories", params={"wait": "true"}, json=body)
    assert r.status_code == 202 and r.json()["applied"], r.text  # written and waited for at the owner
    assert r.headers["x-engram-owner"] == b.url
    position = f"{r.json()['partition']}:{r.json()['offset']}"
    via_a = a.http.get(f"{a.url}/v1/tenants/{tenant}/memories/m1")
    via_b = b.http.get(f"{b.url}/v1/tenants/{tenant}/memories/m1")
    assert via_a.status_code == via_b.status_code == 200, via_a.text
    assert via_a.json() == via_b.json() and via_a.headers["x-engram-owner"] == b.url
    assert "x-engram-owner" not in via_b.headers  # answered where it arrived
    # the position token passes through: the owner answers once that write is applied
    ctx = a.http.get(f"{a.url}/v1/tenants/{tenant}/context", params={"after": position})
    assert ctx.status_code == 200 and ctx.headers["x-engram-owner"] == b.url, ctx.text
    assert not (sa.tenants_dir / tenant).exists()  # the non-owner never opened the tenant's store
    # the token is the owner's to check: a bad one is refused there, as it would be here
    bad = a.http.get(f"{a.url}/v1/tenants/{tenant}/memories/m1", headers={"Authorization": "Bearer nope"})
    assert bad.status_code == 401 and bad.headers["x-engram-owner"] == b.url
    # no loops: a forwarded request that lands on a non-owner is refused with a retry hint
    looped = a.http.get(f"{a.url}/v1/tenants/{tenant}/memories/m1", headers={"X-Engram-Forwarded": b.url})
    assert looped.status_code == 503 and looped.headers["retry-after"] == "1", looped.text
    assert "owned by" in looped.json()["detail"][0]["msg"]


@pytest.mark.parametrize(("n", "store"), [(2, "memory"), (3, "memory"), (2, "disk")])
def test_kill_9_of_one_of_n_processes_loses_and_doubles_nothing(
    broker: Settings, tmp_path: Path, request: pytest.FixtureRequest, n: int, store: str
) -> None:
    settings = members(broker, tmp_path, n, store)
    assert all(s.tenants_move for s in settings)
    rng = random.Random(20261205 + n)
    streams, models = {}, {}
    for i in range(TENANTS):
        tenant = f"g{i:02d}"
        streams[tenant], models[tenant] = random_stream(rng, tenant, PER_TENANT)
    events = interleave(rng, streams)
    servers = start_all(settings, [tmp_path / f"p{i}.log" for i in range(n)], request)
    found = wait_members(settings[0], {s.url for s in servers})
    *survivors, victim = servers
    victim_partitions = {p["partition"] for p in found["partitions"] if p["owner"] == victim.url}
    victim_tenants = [t for t in streams if partition_for(t, PARTITIONS) in victim_partitions]
    assert victim_tenants and len(victim_tenants) < TENANTS

    feeder = Feeder(settings[0], events, chunk=20, pause_s=0.1)  # ~7 s in all: the kill lands in it
    feeder.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and sum(victim.readyz()["handled"].values()) < 60:
        time.sleep(0.02)
    handled_by_victim = sum(victim.readyz()["handled"].values())
    victim.kill()  # SIGKILL: no revocation, no snapshot, no commit
    killed = time.monotonic()
    assert handled_by_victim > 0 and feeder.produced < len(events), "the kill did not land mid-stream"
    feeder.join(timeout=60)
    assert feeder.error is None, feeder.error

    # the survivors own every partition once the group notices (session timeout), and catch up
    settled = wait_members(settings[0], {s.url for s in survivors}, timeout=60)
    took_over = time.monotonic() - killed
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and any(p["lag"] for p in status(settings[0])["partitions"]):
        time.sleep(0.2)
    assert not any(p["lag"] for p in status(settings[0])["partitions"])
    print(
        {
            "n": n,
            "store": store,
            "handled_by_victim_at_kill": handled_by_victim,
            "takeover_s": round(took_over, 1),
        }
    )
    owners = {p["partition"]: p["owner"] for p in settled["partitions"]}
    by_url = {s.url: s for s in survivors}
    if store == "disk":  # a process keeps a copy of the tenants it owns, and of no other
        for server in survivors:
            kept = sorted(p.name for p in server.settings.tenants_dir.iterdir() if (p / "graph").is_dir())
            assert kept and all(owners[partition_for(t, PARTITIONS)] == server.url for t in kept), kept
    for tenant, model in models.items():
        owner = by_url[owners[partition_for(tenant, PARTITIONS)]]
        live = owner.http.get(f"{owner.url}/v1/tenants/{tenant}/graph")
        assert live.status_code == 200 and "x-engram-owner" not in live.headers, (tenant, live.text[:300])
        for other in survivors:  # every survivor answers for every tenant, the owner's graph
            if other is not owner:
                via = other.http.get(f"{other.url}/v1/tenants/{tenant}/graph")
                assert via.status_code == 200 and via.headers["x-engram-owner"] == owner.url, via.text[:300]
                assert via.text == live.text, tenant
        replay_dir = tmp_path / "replay" / tenant
        assert_equals_its_replay(owner, settings[0], tenant, model, live.text, replay_dir, PER_TENANT)
