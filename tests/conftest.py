"""Fixtures every test folder shares.

Real parts: the local Kafka broker and the local S3 server, s3proxy (each started here if nothing
answers, once per session, only for a test that asks for it; such tests are marked
``integration``), ``engram serve`` processes, and a tenant's on-disk store.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import hypothesis
import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError
from engram.streams import kafka_local, s3_local
from engram.streams.objects import Objects, S3Objects, open_objects
from engram.streams.topics import ensure_topics

from engram.settings import REPO, Settings, load_settings
from tests.harness import Server, free_port, isolated_settings
from tests.tenant import Tenant

# A plain `pytest` keeps the data directory `./dev test` uses (the broker's and s3proxy's storage
# and pid files), never the user data directory a real deployment defaults to.
os.environ.setdefault("ENGRAM_DATA_DIR", str(REPO / ".engram" / "data"))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that needs the broker or s3proxy is an integration test (``-m "not integration"``
    skips them)."""
    for item in items:
        if {"broker", "private_broker", "private_cluster", "s3"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def broker() -> Iterator[Settings]:
    """The local broker; stopped at the end only if this session started it."""
    base = load_settings()
    already = kafka_local.answers(base.kafka_bootstrap)
    kafka_local.start(base)
    yield base
    if not already:
        kafka_local.stop(base)


@pytest.fixture(scope="session")
def s3() -> Iterator[Settings]:
    """The local S3 server: settings whose ``s3_endpoint`` and keys reach it. Stopped at the end
    only if this session started it."""
    base = load_settings()
    endpoint = s3_local.endpoint(base)
    already = s3_local.answers(endpoint)
    s3_local.start(base)
    yield load_settings(s3_endpoint=endpoint)
    if not already:
        s3_local.stop(base)


@pytest.fixture
def private_broker(tmp_path: Path) -> Iterator[Settings]:
    """A single-node broker on ports of its own, storage under the test's directory, for tests that
    stop or kill it (the session's broker is shared and stays up)."""
    base = load_settings()
    own = load_settings(
        cache_dir=base.cache_dir,
        data_dir=tmp_path / "broker",
        kafka_bootstrap=f"127.0.0.1:{free_port()}",
        kafka_controller_port=free_port(),
        kafka_heap="256m",
    )
    kafka_local.start(own)
    yield own
    kafka_local.stop(own)


def _free_ports(n: int) -> int:
    """The first of ``n`` consecutive free ports (a local cluster's controllers take ``port + i``)."""
    while True:
        first = free_port()
        try:
            for port in range(first, first + n):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
            return first
        except OSError:
            continue


@pytest.fixture
def private_cluster(tmp_path: Path) -> Iterator[Settings]:
    """Three nodes (each broker and controller, heap 256m) on ports of their own, storage under the
    test's directory, with the settings a user of such a cluster sets: every address in the
    bootstrap, topics created with replication 3 (the nodes require min.insync.replicas=2)."""
    base = load_settings()
    own = load_settings(
        cache_dir=base.cache_dir,
        data_dir=tmp_path / "cluster",
        kafka_bootstrap=",".join(f"127.0.0.1:{free_port()}" for _ in range(3)),
        kafka_controller_port=_free_ports(3),
        kafka_heap="256m",
        topic_replication=3,
    )
    kafka_local.start(own)
    yield own
    kafka_local.stop(own, timeout=1.0)  # its storage is thrown away: no need to wait for a clean stop


@pytest.fixture
def settings(broker: Settings, tmp_path: Path) -> Iterator[Settings]:
    """A private slice of the broker and a data directory of the test's own; with an S3 endpoint
    set (``ENGRAM_S3_ENDPOINT``: any S3), a bucket of its own too, named like its topics and
    emptied and removed afterwards, so no test reads another's archive or snapshot descriptors."""
    s = isolated_settings(broker, tmp_path / "data")
    if s.s3_endpoint:
        s = s.model_copy(update={"s3_bucket": s.topic_prefix})
    asyncio.run(ensure_topics(s))
    yield s
    if s.s3_endpoint:
        _remove_bucket(open_objects(s))  # opened (so created) here if the test never did
    asyncio.run(_drop_topics(s))


async def _drop_topics(s: Settings) -> None:
    """Delete a test's topics (its own and its consumer groups' Faust topics, all under its prefix):
    a long-lived dev broker that kept every test's partitions took minutes to restart, then failed."""
    admin = AIOKafkaAdminClient(bootstrap_servers=s.kafka_bootstrap)
    await admin.start()
    try:
        names = [
            t
            for t in await admin.list_topics()
            if t.startswith(f"{s.topic_prefix}.") or t.startswith(f"{s.topic_prefix}-")
        ]
        if names:
            with contextlib.suppress(KafkaError):
                await admin.delete_topics(names)
    finally:
        await admin.close()


@pytest.fixture
def s3_objects(s3: Settings) -> Iterator[S3Objects]:
    """A bucket of the test's own on the S3 server, emptied and removed afterwards."""
    objects = open_objects(s3.model_copy(update={"s3_bucket": f"test-{uuid.uuid4().hex[:12]}"}))
    assert isinstance(objects, S3Objects)
    yield objects
    _remove_bucket(objects)


def _remove_bucket(objects: Objects) -> None:
    """Empty and delete a test's bucket."""
    assert isinstance(objects, S3Objects)
    for key in objects.list():
        objects.delete(key)
    objects.client.delete_bucket(Bucket=objects.bucket)


@pytest.fixture
def server(settings: Settings, tmp_path: Path) -> Iterator[Server]:
    srv = Server(settings, tmp_path / "server.log").start()
    srv.wait_ready()
    yield srv
    srv.stop()


@pytest.fixture
def tenant(tmp_path: Path) -> Tenant:
    """A tenant's real on-disk store, fed one partition's events (``tests.tenant``)."""
    return Tenant(tmp_path / "graph", step_ms=1)


# `pytest --hypothesis-profile=no-shrink`: a failing example as found, without minutes of shrinking
hypothesis.settings.register_profile(
    "no-shrink", phases=[hypothesis.Phase.explicit, hypothesis.Phase.reuse, hypothesis.Phase.generate]
)
