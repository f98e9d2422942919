"""``engram s3 start|status|stop``: a private s3proxy (own data directory and port), started twice
(the second start reuses it), stopped twice (the second finds none of ours)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from engram.streams import s3_local
from engram.streams.objects import S3Objects

from engram.settings import load_settings
from tests.harness import free_port

pytestmark = pytest.mark.integration


def engram(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "engram.cli", *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_start_is_idempotent_and_stop_stops_ours(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    env = {
        "ENGRAM_DATA_DIR": str(tmp_path / "data"),
        "ENGRAM_CACHE_DIR": str(load_settings().cache_dir),
        "ENGRAM_S3_ENDPOINT": url,
        "ENGRAM_LOG_LEVEL": "WARNING",
    }
    assert engram(env, "s3", "status").returncode == 1
    try:
        first = engram(env, "s3", "start")
        assert first.returncode == 0, first.stderr
        assert f"s3 answering on {url}" in first.stdout
        again = engram(env, "s3", "start")
        assert again.returncode == 0 and "(took 0.0s)" in again.stdout  # reused, not started twice
        status = engram(env, "s3", "status")
        assert status.returncode == 0 and "answering; pid " in status.stdout

        store = S3Objects(url, "cli-bucket", access_key="engram", secret_key="engram-secret")
        store.put("k/v", b"\x00\xff")
        sdir = tmp_path / "data" / "s3proxy"
        assert (sdir / "blobs" / "cli-bucket" / "k" / "v").read_bytes() == b"\x00\xff"  # under the data dir
        props = sdir / "s3proxy.properties"
        assert props.stat().st_mode & 0o077 == 0  # it holds the secret key
    finally:
        stopped = engram(env, "s3", "stop")
    assert stopped.returncode == 0 and "s3proxy stopped" in stopped.stdout
    assert engram(env, "s3", "status").returncode == 1
    assert "no s3proxy of ours was running" in engram(env, "s3", "stop").stdout


def test_a_remote_endpoint_is_not_served_locally(tmp_path: Path) -> None:
    settings = load_settings(data_dir=tmp_path / "data", s3_endpoint="https://s3.example.invalid")
    with pytest.raises(s3_local.S3Error, match=r"serves http://127\.0\.0\.1:PORT only"):
        s3_local.start(settings)
    assert not (tmp_path / "data").exists()
