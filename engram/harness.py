"""Real processes for tests and benchmarks: an isolated slice of the broker and `engram serve`."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx

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
        log_level="WARNING",
    )


def settings_env(settings: Settings) -> dict[str, str]:
    """The environment that makes a child process use ``settings``."""
    return {
        "ENGRAM_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
        "ENGRAM_TOPIC_PREFIX": settings.topic_prefix,
        "ENGRAM_CONSUMER_GROUP": settings.consumer_group,
        "ENGRAM_DATA_DIR": str(settings.data_dir),
        "ENGRAM_EVENTS_PARTITIONS": str(settings.events_partitions),
        "ENGRAM_API_PORT": str(settings.api_port),
        "ENGRAM_WAIT_TIMEOUT_S": str(settings.wait_timeout_s),
        "ENGRAM_CACHE_DIR": str(settings.cache_dir),
        "ENGRAM_LOG_LEVEL": settings.log_level,
    }


class Server:
    """`engram serve` (API + embedded projector) as a real child process on its own port."""

    def __init__(self, settings: Settings, log_path: Path) -> None:
        self.settings = settings
        self.log_path = log_path
        self.url = f"http://127.0.0.1:{settings.api_port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Server:
        env = {**os.environ, **settings_env(self.settings)}
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "engram.cli", "serve"], env=env, stdout=out, stderr=subprocess.STDOUT
            )
        return self

    def readyz(self) -> dict:
        return httpx.get(f"{self.url}/readyz", timeout=10).json()  # type: ignore[no-any-return]

    def wait_ready(self, timeout: float = 90.0, interval: float = 0.05) -> dict:
        """Block until /readyz says the projector has caught up; return its body."""
        deadline = time.monotonic() + timeout
        last: object = None
        while time.monotonic() < deadline:
            if self.proc is None or self.proc.poll() is not None:
                raise RuntimeError(f"server exited; see {self.log_path}")
            try:
                r = httpx.get(f"{self.url}/readyz", timeout=5)
                last = r.json()
                if r.status_code == 200:
                    return last  # type: ignore[return-value]
            except httpx.HTTPError as exc:
                last = exc
            time.sleep(interval)
        raise TimeoutError(f"not ready in {timeout}s: {last}; log: {self.log_path.read_text()[-3000:]}")

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=60)

    def stop(self) -> None:
        self.kill(signal.SIGTERM)
