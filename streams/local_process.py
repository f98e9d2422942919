"""The local services' processes (the Kafka broker, s3proxy): a JVM launched in a session of its
own with its pid in a file, waited for until it answers, stopped with its whole process group.

Each service module (``kafka_local``, ``s3_local``) says what to run and how to tell that it
answers; this is the one place the process itself is handled.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)


def launch(cmd: list[str], out: Path, pid_file: Path) -> subprocess.Popen[bytes]:
    """Start ``cmd`` in its own session (a stop takes its children too), output appended to ``out``."""
    with open(out, "ab") as sink:
        proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    pid_file.write_text(str(proc.pid))
    return proc


def wait_until_answering(
    proc: subprocess.Popen[bytes],
    answering: Callable[[], bool],
    *,
    name: str,
    where: str,
    began: float,
    timeout: float,
    poll: float,
    out: Path,
    log_file: Path,
    pid_file: Path,
    error: type[Exception],
) -> float:
    """Seconds from ``began`` until ``answering()``; ``error`` if the process exits first (with the
    tail of its output) or ``timeout`` passes (naming its log)."""
    deadline = began + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pid_file.unlink(missing_ok=True)
            tail = out.read_text(errors="replace")[-1500:] if out.exists() else ""
            raise error(f"{name} exited with {proc.returncode}; see {out}:\n{tail}")
        if answering():
            elapsed = time.monotonic() - began
            log.info("%s answering on %s after %.1fs", name, where, elapsed)
            return elapsed
        time.sleep(poll)
    raise error(f"{name} did not answer within {timeout:.0f}s; see {log_file}")


def read_pid(pid_file: Path, marker: bytes | None = None) -> int | None:
    """The pid in ``pid_file`` if that process runs (and, with ``marker``, its command line holds
    it: a stale file's pid reused by another program is not ours)."""
    try:
        pid = int(pid_file.read_text().strip())
        os.kill(pid, 0)
    except (FileNotFoundError, ValueError, ProcessLookupError, PermissionError):
        return None
    cmdline = Path(f"/proc/{pid}/cmdline")
    if marker is not None and cmdline.exists() and marker not in cmdline.read_bytes():
        return None
    return pid


def alive(pid: int) -> bool:
    try:
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False  # our own child, now reaped
    except ChildProcessError:
        pass  # not our child: the kill probe below decides
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def stop(pid_file: Path, *, name: str, timeout: float, poll: float, marker: bytes | None = None) -> bool:
    """SIGTERM the process group of the pid in ``pid_file``, SIGKILL after ``timeout``; False when
    none of ours was running."""
    pid = read_pid(pid_file, marker)
    if pid is None:
        return False
    os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive(pid):
            break
        time.sleep(poll)
    else:
        log.warning("%s %d did not stop in %.0fs; killing it", name, pid, timeout)
        os.killpg(pid, signal.SIGKILL)
    pid_file.unlink(missing_ok=True)
    return True
