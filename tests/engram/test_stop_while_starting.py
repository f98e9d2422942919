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

from engram.settings import Settings
from tests.harness import free_port, settings_env

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
    # what it cancelled says so in a line each, not as crashes with tracebacks
    assert "Traceback" not in text and '"exc"' not in text, text


@pytest.mark.parametrize("command", ["worker", "serve"])
def test_a_process_whose_broker_does_not_answer_says_so_in_one_line(
    settings: Settings, tmp_path: Path, command: str
) -> None:
    """Not uvicorn's startup traceback and an exit code of 3: what is wrong and what to do."""
    nobody = f"127.0.0.1:{free_port()}"  # nothing listens there
    env = {
        **os.environ, **settings_env(settings), "ENGRAM_EMBEDDER": "hashing",
        "ENGRAM_KAFKA_BOOTSTRAP": nobody, "ENGRAM_DATA_DIR": str(tmp_path / "data"),
    }  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "engram.cli", command], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1, done.stderr
    assert (
        f"engram {command}: BrokerUnreachable: cannot reach the Kafka broker at {nobody} "
        "(ENGRAM_KAFKA_BOOTSTRAP): start the local one with `engram kafka start`"
    ) in done.stderr
    assert "Traceback" not in done.stderr and "never retrieved" not in done.stderr, done.stderr
