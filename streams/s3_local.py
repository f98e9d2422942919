"""A local S3-compatible server for tests and CI: s3proxy, fetched from Maven Central, no Docker.

Run like the local broker (``kafka_local``): one shaded jar fetched once into the cache by Maven,
a JVM on this machine, its blobs under ``DATA_DIR/s3proxy/blobs``. It listens on
``ENGRAM_S3_ENDPOINT`` when that names this machine, else on :data:`DEFAULT_ENDPOINT`, and accepts
``ENGRAM_S3_ACCESS_KEY`` / ``ENGRAM_S3_SECRET_KEY``. ``start`` is idempotent: an S3 server that
already answers there is reused.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import httpx
from engram.streams import local_process

from engram.settings import Settings

log = logging.getLogger(__name__)

S3PROXY_VERSION = "2.6.0"
# The shaded artifact: s3proxy and jclouds, Jetty and logback in one jar, so nothing else resolves.
ARTIFACT = f"org.gaul:s3proxy:{S3PROXY_VERSION}:jar:jar-with-dependencies"
DEFAULT_ENDPOINT = "http://127.0.0.1:9070"
LOOPBACK = {"127.0.0.1", "localhost", "::1"}
MARKER = b"s3proxy"  # in our server's command line: a stale pid file's pid reused elsewhere is not it


class S3Error(RuntimeError):
    """The local S3 server could not be fetched, started or stopped."""


@dataclass(frozen=True)
class S3Status:
    answering: bool
    pid: int | None
    endpoint: str


def endpoint(settings: Settings) -> str:
    """Where the local server listens: the configured endpoint, else the default one."""
    return (settings.s3_endpoint or DEFAULT_ENDPOINT).rstrip("/")


def server_dir(settings: Settings) -> Path:
    return settings.data_dir / "s3proxy"


def jar_path(settings: Settings) -> Path:
    return settings.cache_dir / f"s3proxy-{S3PROXY_VERSION}" / "s3proxy.jar"


def ensure_jar(settings: Settings) -> Path:
    """Fetch the s3proxy jar with Maven once; later calls find it in the cache."""
    target = jar_path(settings)
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    if shutil.which("mvn") is None:
        raise S3Error("Maven (mvn) is not on PATH; it fetches s3proxy from Maven Central")
    staging = target.parent / "partial"
    shutil.rmtree(staging, ignore_errors=True)
    log.info("fetching s3proxy %s from Maven Central", S3PROXY_VERSION)
    cmd = ["mvn", "-q", "-B", "dependency:copy", f"-Dartifact={ARTIFACT}", f"-DoutputDirectory={staging}"]
    # cwd: a directory with no pom.xml, so Maven runs the goal outside any project
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=target.parent)
    jars = list(staging.glob("s3proxy-*.jar"))
    if done.returncode != 0 or len(jars) != 1:
        raise S3Error(f"mvn failed ({done.returncode}): {done.stdout[-2000:]}{done.stderr[-2000:]}")
    jars[0].rename(target)  # the rename is the "complete" marker: a partial download is never used
    shutil.rmtree(staging, ignore_errors=True)
    log.info("s3proxy jar ready at %s", target)
    return target


def _listen_address(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    if parts.scheme != "http" or parts.hostname not in LOOPBACK or parts.port is None:
        raise S3Error(
            f"the local s3proxy serves http://127.0.0.1:PORT only, not {url!r} "
            "(unset ENGRAM_S3_ENDPOINT, or point it at this machine)"
        )
    return parts.hostname, parts.port


def _escape(value: str) -> str:
    """A Java properties value: a backslash would start an escape sequence."""
    return value.replace("\\", "\\\\")


def _properties(settings: Settings) -> str:
    if not settings.s3_access_key or not settings.s3_secret_key:
        raise S3Error("the local s3proxy needs ENGRAM_S3_ACCESS_KEY and ENGRAM_S3_SECRET_KEY")
    host, port = _listen_address(endpoint(settings))
    key, secret = _escape(settings.s3_access_key), _escape(settings.s3_secret_key)
    return "\n".join(
        [
            f"s3proxy.endpoint=http://{host}:{port}",
            "s3proxy.authorization=aws-v2-or-v4",
            f"s3proxy.identity={key}",
            f"s3proxy.credential={secret}",
            # no s3proxy.virtual-host: path-style addressing only
            "jclouds.provider=filesystem-nio2",
            f"jclouds.identity={key}",
            f"jclouds.credential={secret}",
            f"jclouds.filesystem.basedir={_escape(str(server_dir(settings).resolve() / 'blobs'))}",
            "",
        ]
    )


def answers(url: str, timeout: float = 2.0) -> bool:
    """True when an S3 server answers on ``url`` (an unsigned request is refused the S3 way)."""
    try:
        response = httpx.get(url, timeout=timeout)
    except httpx.HTTPError:
        return False
    return "x-amz-request-id" in response.headers


def _pid_file(settings: Settings) -> Path:
    return server_dir(settings) / "s3proxy.pid"


def status(settings: Settings) -> S3Status:
    url = endpoint(settings)
    return S3Status(answers(url), local_process.read_pid(_pid_file(settings), MARKER), url)


def start(settings: Settings, *, timeout: float = 60.0) -> float:
    """Start (or reuse) the local s3proxy; return the seconds it took to answer."""
    began = time.monotonic()
    url = endpoint(settings)
    if answers(url):
        log.info("an S3 server already answers on %s; reusing it", url)
        return 0.0
    props_text = _properties(settings)  # refuses a remote endpoint before anything is fetched
    java = shutil.which("java")
    if java is None:
        raise S3Error("java is not on PATH; the local s3proxy needs a JRE (11+)")
    jar = ensure_jar(settings)
    sdir = server_dir(settings)
    (sdir / "blobs").mkdir(parents=True, exist_ok=True)
    props = sdir / "s3proxy.properties"
    props.touch(mode=0o600)  # it holds the secret key
    props.write_text(props_text)
    cmd = [
        java,
        "-Xmx256m",
        "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1",  # a test server: start fast rather than peak throughput
        "-XX:ActiveProcessorCount=2",
        "-Dlogback.statusListenerClass=ch.qos.logback.core.status.NopStatusListener",
        "-jar",
        str(jar),
        "--properties",
        str(props),
    ]
    out_path = sdir / "s3proxy.out"
    proc = local_process.launch(cmd, out_path, _pid_file(settings))
    return local_process.wait_until_answering(
        proc,
        lambda: answers(url, timeout=1.0),
        name="s3proxy",
        where=url,
        began=began,
        timeout=timeout,
        poll=0.1,
        out=out_path,
        log_file=out_path,
        pid_file=_pid_file(settings),
        error=S3Error,
    )


def stop(settings: Settings, *, timeout: float = 20.0) -> bool:
    """Stop the s3proxy this project started; False when none of ours was running."""
    return local_process.stop(_pid_file(settings), name="s3proxy", timeout=timeout, poll=0.1, marker=MARKER)
