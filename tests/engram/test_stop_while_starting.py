"""A process that cannot join the projector's consumer group (here: a session timeout the broker
refuses, InvalidSessionTimeoutError, retried for ever) still ends promptly on SIGTERM, saying why;
it once had to be killed with kill -9."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engram.harness import settings_env
from engram.settings import Settings

pytestmark = pytest.mark.integration

# `engram COMMAND` as the CLI runs it, but with a session timeout below the broker's minimum
# (group.min.session.timeout.ms, 6 s), which the settings themselves refuse
REFUSED = (
    "import sys\n"
    "from engram import cli\n"
    "load = cli.load_settings\n"
    "cli.load_settings = lambda: load().model_copy(update={'session_timeout_s': 4.0})\n"
    "sys.exit(cli.main([sys.argv[1]]))\n"
)


@pytest.mark.parametrize("command", ["worker", "serve"])
def test_a_process_that_cannot_join_the_group_stops_on_sigterm(
    settings: Settings, tmp_path: Path, command: str
) -> None:
    env = {**os.environ, **settings_env(settings), "ENGRAM_EMBEDDER": "hashing"}
    log_path = tmp_path / f"{command}.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen([sys.executable, "-c", REFUSED, command], env=env, stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 30
        while "InvalidSessionTimeoutError" not in log_path.read_text():  # its join was refused
            assert process.poll() is None and time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.1)
        process.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        code = process.wait(timeout=15)
        took = time.monotonic() - signalled
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    text = log_path.read_text()
    assert code == 0, text
    assert took < 5, f"{took:.1f} s to stop"
    assert f"engram {command} signalled while starting: it has not joined its consumer groups yet" in text
