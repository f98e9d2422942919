"""docker-compose.yml, checked without Docker: no engine runs where the tests run, so a wrong setting
name, a broker without a volume or a service started before what it needs would only show on a
user's machine. Every ``ENGRAM_*`` variable must be a setting and validate through ``Settings`` as
the worker would read it from its environment; every address must name a service and its port."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from engram.settings import REPO, Settings

COMPOSE = REPO / "docker-compose.yml"
BROKERS = ("kafka1", "kafka2", "kafka3")
WORKERS = ("engram1", "engram2")
INTERPOLATION = re.compile(r"\$\{(\w+)(?::?[?-][^}]*)?\}")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]  # type: ignore[no-any-return]


def worker_settings(service: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Settings:
    """The settings a worker reads from its environment: the compose file's ``ENGRAM_*`` values,
    ``${VAR:?…}`` filled in as the user must, and nothing of this process's own."""
    for name in [n for n in os.environ if n.startswith("ENGRAM_")]:
        monkeypatch.delenv(name)
    env = {k: str(v) for k, v in service["environment"].items()}
    for name, value in env.items():
        monkeypatch.setenv(name, INTERPOLATION.sub(lambda m: f"test-{m.group(1).lower()}", value))
    return Settings()


def volumes_of(service: dict[str, Any]) -> dict[str, str]:
    """Named volume -> mount point."""
    return dict(v.split(":")[:2] for v in service.get("volumes", []) if not v.startswith((".", "/")))


def test_every_engram_variable_is_a_setting_and_validates(
    services: dict[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    known = {f"ENGRAM_{name.upper()}" for name in Settings.model_fields}
    for name, service in services.items():
        ours = {k for k in service.get("environment", {}) if k.startswith("ENGRAM_")}
        assert ours <= known, f"{name}: not settings: {sorted(ours - known)}"
    for name in WORKERS:
        with monkeypatch.context() as m:
            s = worker_settings(services[name], m)
        # the default mode, scaled out: the workers share the object store, so tenants move
        assert s.store == "disk" and s.s3_endpoint == "http://s3:80" and s.tenants_move, name
        assert s.auth_secret == "test-engram_auth_secret"  # one secret, given by the user, for all
        assert str(s.data_dir) in volumes_of(services[name]).values()
        assert str(s.key_store_dir) == volumes_of(services[name])["engram-keys"]


def test_the_only_interpolated_variable_is_the_required_auth_secret() -> None:
    found = INTERPOLATION.findall(COMPOSE.read_text())
    assert set(found) == {"ENGRAM_AUTH_SECRET"}
    assert "${ENGRAM_AUTH_SECRET:?" in COMPOSE.read_text()  # required: no default secret ships


def test_three_kraft_brokers_on_volumes_with_replication_3_and_min_insync_2(
    services: dict[str, dict[str, Any]],
) -> None:
    voters = set()
    for i, name in enumerate(BROKERS, 1):
        env = services[name]["environment"]
        assert env["KAFKA_NODE_ID"] == i and env["KAFKA_PROCESS_ROLES"] == "broker,controller"
        assert env["KAFKA_ADVERTISED_LISTENERS"] == f"PLAINTEXT://{name}:9092"
        assert volumes_of(services[name]) == {f"{name}-data": env["KAFKA_LOG_DIRS"]}
        assert env["KAFKA_DEFAULT_REPLICATION_FACTOR"] == 3 and env["KAFKA_MIN_INSYNC_REPLICAS"] == 2
        assert env["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"] == 3
        assert env["KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"] == 2
        assert env["KAFKA_UNCLEAN_LEADER_ELECTION_ENABLE"] == "false"
        voters |= set(env["KAFKA_CONTROLLER_QUORUM_VOTERS"].split(","))
    assert voters == {f"{i}@{name}:9093" for i, name in enumerate(BROKERS, 1)}


def test_the_workers_reach_every_broker_with_topics_replicated_3(
    services: dict[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in WORKERS:
        with monkeypatch.context() as m:
            s = worker_settings(services[name], m)
        assert s.kafka_bootstrap.split(",") == [f"{b}:9092" for b in BROKERS]
        assert s.topic_replication == len(BROKERS)


def test_exactly_one_archiver(services: dict[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> None:
    """The archiver runs (the log outlives Kafka's retention), in one process only: two race on the
    archive's manifest (streams/archiver.py)."""
    on = []
    for name in WORKERS:
        with monkeypatch.context() as m:
            if worker_settings(services[name], m).archive_enabled:
                on.append(name)
    assert len(on) == 1, on


def test_workers_have_their_own_data_and_share_the_key_store(services: dict[str, dict[str, Any]]) -> None:
    data = [volumes_of(services[w]) for w in WORKERS]
    assert all(v["engram-keys"] == "/keys" for v in data)
    own = [{k for k in v if k != "engram-keys"} for v in data]
    assert all(len(o) == 1 for o in own) and not set.intersection(*own)
    assert all(services[w]["build"] == "." and services[w]["image"] == "engram:latest" for w in WORKERS)
    # the URL a worker advertises to the group by default is its host name's: the service name
    assert all(services[w]["hostname"] == w for w in WORKERS)
    assert (REPO / "Dockerfile").is_file()


def test_every_named_volume_is_declared_and_used(compose: dict[str, Any]) -> None:
    used = {v for s in compose["services"].values() for v in volumes_of(s)}
    assert used == set(compose["volumes"])
    assert {"s3-data", *(f"{b}-data" for b in BROKERS)} <= used


def test_every_service_restarts_has_a_healthcheck_and_waits_for_healthy_dependencies(
    services: dict[str, dict[str, Any]],
) -> None:
    assert set(services) == {*BROKERS, "s3", *WORKERS, "proxy"}
    for name, service in services.items():
        assert service["restart"] in ("always", "unless-stopped", "on-failure"), name
        check = service["healthcheck"]
        assert check["test"][0] in ("CMD", "CMD-SHELL") and check["interval"] and check["retries"], name
        depends = service.get("depends_on", {})
        assert isinstance(depends, dict), f"{name}: depends_on without conditions"
        for dep, how in depends.items():
            assert how == {"condition": "service_healthy"}, (name, dep)
            assert "healthcheck" in services[dep]
    for name in WORKERS:
        assert set(services[name]["depends_on"]) == {*BROKERS, "s3"}
        assert "http://127.0.0.1:8000/healthz" in " ".join(services[name]["healthcheck"]["test"])
    assert set(services["proxy"]["depends_on"]) == set(WORKERS)


def test_one_port_for_both_workers(services: dict[str, dict[str, Any]]) -> None:
    """Only the proxy publishes a port; its configuration forwards to every worker's API port."""
    published = {name: s["ports"] for name, s in services.items() if "ports" in s}
    assert published == {"proxy": ["8000:8080"]}
    (mount,) = services["proxy"]["volumes"]
    conf = (REPO / mount.split(":")[0]).read_text()
    assert re.search(r"^\s*listen 8080;", conf, re.M)
    upstream = re.findall(r"^\s*server (\S+?):(\d+)", conf, re.M)
    dockerfile = (REPO / "Dockerfile").read_text()
    port = re.search(r"ENGRAM_API_PORT=(\d+)", dockerfile)
    assert port is not None and upstream == [(w, port.group(1)) for w in WORKERS]
    (retry,) = re.findall(r"^\s*proxy_next_upstream (.*);", conf, re.M)
    assert "non_idempotent" not in retry  # a write the proxy already sent is never sent again


def test_the_object_store_and_its_credentials_match(
    services: dict[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    s3 = services["s3"]["environment"]
    assert volumes_of(services["s3"]) == {"s3-data": s3["JCLOUDS_FILESYSTEM_BASEDIR"]}
    with monkeypatch.context() as m:
        s = worker_settings(services[WORKERS[0]], m)
    assert (s.s3_access_key, s.s3_secret_key) == (s3["S3PROXY_IDENTITY"], s3["S3PROXY_CREDENTIAL"])


def test_the_compose_file_is_described_in_operations() -> None:
    text = (REPO / "docs" / "operations.md").read_text()
    for word in ("docker compose up", "ENGRAM_AUTH_SECRET", "min.insync.replicas", "engram-keys"):
        assert word in text, word
    assert Path(REPO / "deploy" / "nginx.conf").is_file()
