"""Real processes for tests and benchmarks: an isolated slice of the broker and `engram serve`."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import httpx
from engram.api.auth import mint
from engram.streams.topics import ensure_topics

from engram.settings import Settings, load_settings


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def isolated_settings(base: Settings, data_dir: Path, *, partitions: int = 4) -> Settings:
    """A private slice of the broker: its own topics, consumer group, data directory and port."""
    tag = uuid.uuid4().hex[:10]
    return load_settings(
        kafka_bootstrap=base.kafka_bootstrap,
        cache_dir=base.cache_dir,
        topic_prefix=f"test-{tag}",
        consumer_group=f"test-{tag}-projector",
        data_dir=data_dir,
        events_partitions=partitions,
        api_port=free_port(),
        wait_timeout_s=30,
        write_timeout_s=30,  # a loaded test machine's broker may take seconds to ack: not an outage
        log_level="WARNING",
        rate_limit_per_s=100_000.0,  # tests and benchmarks measure the system, not the limiter
        rate_limit_burst=100_000,
    )


def settings_env(settings: Settings) -> dict[str, str]:
    """The environment that makes a child process use ``settings``: every setting that differs
    from its default (a test's ``model_copy(update=...)`` reaches the child), and these always, so
    the parent's environment cannot leak into the child through them."""
    changed = {
        f"ENGRAM_{name.upper()}": str(value)
        for name, spec in Settings.model_fields.items()
        if (value := getattr(settings, name)) is not None
        and value != spec.get_default(call_default_factory=True)
    }
    return changed | {
        "ENGRAM_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
        "ENGRAM_TOPIC_PREFIX": settings.topic_prefix,
        "ENGRAM_CONSUMER_GROUP": settings.consumer_group,
        "ENGRAM_DATA_DIR": str(settings.data_dir),
        "ENGRAM_KEYS_DIR": str(settings.key_store_dir),
        "ENGRAM_EVENTS_PARTITIONS": str(settings.events_partitions),
        "ENGRAM_API_PORT": str(settings.api_port),
        "ENGRAM_WAIT_TIMEOUT_S": str(settings.wait_timeout_s),
        "ENGRAM_SPARQL_TIMEOUT_S": str(settings.sparql_timeout_s),
        "ENGRAM_CACHE_DIR": str(settings.cache_dir),
        "ENGRAM_ONTOLOGY_DIR": str(settings.ontology_dir),
        "ENGRAM_RULES_DIR": str(settings.rules_dir),
        "ENGRAM_LOG_LEVEL": settings.log_level,
        "ENGRAM_RATE_LIMIT_PER_S": str(settings.rate_limit_per_s),
        "ENGRAM_RATE_LIMIT_BURST": str(settings.rate_limit_burst),
        "ENGRAM_RATE_LIMIT_COST_MS": str(settings.rate_limit_cost_ms),
        # the object store: a child given this process's environment would otherwise use the
        # environment's bucket, not the test's own (tests/conftest.py); "" is unset
        "ENGRAM_S3_ENDPOINT": settings.s3_endpoint or "",
        "ENGRAM_S3_BUCKET": settings.s3_bucket,
        **({"ENGRAM_AUTH_SECRET": settings.auth_secret} if settings.auth_secret else {}),
    }


TENANT_IN_PATH = re.compile(r"^/v1/tenants/([^/]+)")


class OperatorAuth(httpx.Auth):
    """Signs every request to a tenant's routes as that tenant's operator (``dana``), unless the
    request carries its own Authorization: tests and benchmarks speak as an operator by default."""

    def __init__(self, settings: Settings, user: str = "dana") -> None:
        self.settings, self.user = settings, user

    def auth_flow(self, request: httpx.Request) -> Iterator[httpx.Request]:
        found = TENANT_IN_PATH.match(request.url.path)
        if found and "authorization" not in request.headers:
            tenant = unquote(found.group(1))
            try:
                token = mint(self.settings, tenant, role="operator", user=self.user) if tenant else ""
            except ValueError:  # a tenant no token may name (the tests' bad paths): a token it is not
                token = "not-a-token"
            request.headers["Authorization"] = f"Bearer {token}"
        yield request


class Server:
    """`engram serve` (API + embedded projector) as a real child process on its own port.

    ``http`` is a client that speaks as each tenant's operator; ``bearer`` mints the header of any
    other principal."""

    def __init__(self, settings: Settings, log_path: Path) -> None:
        self.settings = settings
        self.log_path = log_path
        self.url = f"http://127.0.0.1:{settings.api_port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.http = httpx.Client(auth=OperatorAuth(settings), timeout=60)

    def bearer(self, tenant: str, *, role: str = "user", user: str = "dana", **claims: Any) -> dict[str, str]:
        """The Authorization header of a principal of ``tenant`` (see ``api.auth.mint``)."""
        return {"Authorization": f"Bearer {mint(self.settings, tenant, role=role, user=user, **claims)}"}

    def start(self) -> Server:
        self.settings.token_secret()  # made before the server starts, so both sides sign alike
        env = {**os.environ, **settings_env(self.settings)}
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "engram.cli", "serve"], env=env, stdout=out, stderr=subprocess.STDOUT
            )
        return self

    def readyz(self) -> dict:
        return httpx.get(f"{self.url}/readyz", timeout=10).json()  # type: ignore[no-any-return]

    def wait_ready(self, timeout: float = 90.0, interval: float = 0.05, *, caught_up: bool = True) -> dict:
        """Block until /readyz answers 200 and (``caught_up``) the projector has handled every record
        in the log, not merely enough to be ready (ENGRAM_READY_MAX_LAG); return its body."""
        deadline = time.monotonic() + timeout
        last: object = None
        while time.monotonic() < deadline:
            if self.proc is None or self.proc.poll() is not None:
                raise RuntimeError(f"server exited; see {self.log_path}")
            try:
                r = httpx.get(f"{self.url}/readyz", timeout=5)
                last = r.json()
                if r.status_code == 200 and not (caught_up and r.json().get("lag")):
                    return last  # type: ignore[return-value]
            except httpx.HTTPError as exc:
                last = exc
            time.sleep(interval)
        raise TimeoutError(f"not ready in {timeout}s: {last}; log: {self.log_path.read_text()[-3000:]}")

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Signal the server and wait for it; one that outlives a minute is killed (never left
        running after its test), and the timeout raised."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
                raise

    def stop(self) -> None:
        self.kill(signal.SIGTERM)


def serving(base: Settings, root: Path, **overrides: Any) -> Server:
    """A ready `engram serve` on a slice of ``base``'s broker of its own (its topics created), its
    data directory and log under ``root``, ``overrides`` applied to its settings."""
    settings = isolated_settings(base, root / "data").model_copy(update=overrides)
    asyncio.run(ensure_topics(settings))
    server = Server(settings, root / "server.log").start()
    server.wait_ready()
    return server
