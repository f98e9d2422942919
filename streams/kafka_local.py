"""The embedded default's broker: Apache Kafka in KRaft mode, fetched from Maven Central, no Docker.

``start`` is idempotent: a broker that already answers on the bootstrap address is reused, a
stopped one is started again on its existing storage, a new one is formatted first.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import subprocess
import time
import uuid
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from aiokafka import AIOKafkaClient
from engram.streams import local_process

from engram.settings import Settings

log = logging.getLogger(__name__)

KAFKA_MAIN = "kafka.Kafka"
STORAGE_TOOL = "kafka.tools.StorageTool"
TOOLS = {
    "topics": "org.apache.kafka.tools.TopicCommand",
    "consumer-groups": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "console-consumer": "org.apache.kafka.tools.consumer.ConsoleConsumer",
    "console-producer": "org.apache.kafka.tools.ConsoleProducer",
    "get-offsets": "org.apache.kafka.tools.GetOffsetShell",
}


class KafkaError(RuntimeError):
    """The local broker could not be fetched, started or stopped."""


@dataclass(frozen=True)
class BrokerStatus:
    answering: bool
    pid: int | None
    bootstrap: str


def _resource(name: str) -> Path:
    return Path(str(resources.files("engram.streams") / "kafka" / name))


def lib_dir(settings: Settings) -> Path:
    return settings.cache_dir / f"kafka-{settings.kafka_version}" / "lib"


def broker_dir(settings: Settings) -> Path:
    return settings.data_dir / "kafka"


def _host_port(bootstrap: str) -> tuple[str, int]:
    first = bootstrap.split(",")[0]
    host, _, port = first.rpartition(":")
    return host or "127.0.0.1", int(port)


def ensure_jars(settings: Settings) -> Path:
    """Fetch Kafka and its dependencies with Maven once; later calls find them in the cache."""
    target = lib_dir(settings)
    if (target / ".complete").exists():
        return target
    if shutil.which("mvn") is None:
        raise KafkaError("Maven (mvn) is not on PATH; it fetches Kafka from Maven Central")
    staging = target.with_name("lib.partial")
    shutil.rmtree(staging, ignore_errors=True)
    log.info("fetching Apache Kafka %s from Maven Central", settings.kafka_version)
    cmd = [
        "mvn",
        "-q",
        "-B",
        "-f",
        str(_resource("pom.xml")),
        f"-Dkafka.version={settings.kafka_version}",
        "dependency:copy-dependencies",
        f"-DoutputDirectory={staging}",
        "-DincludeScope=runtime",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise KafkaError(f"mvn failed ({done.returncode}): {done.stdout[-2000:]}{done.stderr[-2000:]}")
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    (target / ".complete").write_text(settings.kafka_version)
    log.info("kafka jars ready in %s (%d jars)", target, len(list(target.glob("*.jar"))))
    return target


def _java(settings: Settings, *args: str, log4j: str) -> list[str]:
    java = shutil.which("java")
    if java is None:
        raise KafkaError("java is not on PATH; the local broker needs a JDK (17+)")
    return [
        java,
        f"-Dlog4j2.configurationFile={_resource(log4j)}",
        "-cp",
        str(lib_dir(settings) / "*"),
        *args,
    ]


def run_tool(settings: Settings, tool: str, args: list[str]) -> int:
    """Run one of Kafka's command-line tools from the same jars as the broker."""
    if tool not in TOOLS:
        raise KafkaError(f"unknown tool {tool!r}; one of: {', '.join(sorted(TOOLS))}")
    ensure_jars(settings)
    cmd = _java(settings, TOOLS[tool], log4j="tools-log4j2.properties")
    if not any(a.startswith("--bootstrap") for a in args):
        cmd += ["--bootstrap-server", settings.kafka_bootstrap]
    return subprocess.call([*cmd, *args])


def _server_properties(settings: Settings) -> str:
    host, port = _host_port(settings.kafka_bootstrap)
    cport = settings.kafka_controller_port
    return "\n".join(
        [
            "process.roles=broker,controller",
            "node.id=1",
            f"controller.quorum.voters=1@{host}:{cport}",
            f"listeners=PLAINTEXT://{host}:{port},CONTROLLER://{host}:{cport}",
            f"advertised.listeners=PLAINTEXT://{host}:{port}",
            "controller.listener.names=CONTROLLER",
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name=PLAINTEXT",
            f"log.dirs={broker_dir(settings) / 'logs'}",
            "num.partitions=1",
            "auto.create.topics.enable=false",
            "offsets.topic.replication.factor=1",
            "offsets.topic.num.partitions=4",
            "transaction.state.log.replication.factor=1",
            "transaction.state.log.min.isr=1",
            "group.initial.rebalance.delay.ms=0",
            # engram's topics keep everything (retention.ms=-1), so checking often costs nothing; a
            # topic given a retention (the archive's tests) loses its old segments within a second
            "log.retention.check.interval.ms=1000",
            "num.network.threads=2",
            "num.io.threads=2",
            "",
        ]
    )


async def _answers(bootstrap: str, timeout: float) -> bool:
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)  # a refused probe is not an error
    client = AIOKafkaClient(bootstrap_servers=bootstrap, request_timeout_ms=int(timeout * 1000))
    try:
        await asyncio.wait_for(client.bootstrap(), timeout)
        return True
    except Exception:
        return False
    finally:
        await client.close()


def answers(bootstrap: str, timeout: float = 2.0) -> bool:
    """True when a Kafka broker answers a metadata request on ``bootstrap``."""
    return asyncio.run(_answers(bootstrap, timeout))


def _pid_file(settings: Settings) -> Path:
    return broker_dir(settings) / "broker.pid"


def status(settings: Settings) -> BrokerStatus:
    pid = local_process.read_pid(_pid_file(settings))
    return BrokerStatus(answers(settings.kafka_bootstrap), pid, settings.kafka_bootstrap)


def start(settings: Settings, *, timeout: float = 90.0) -> float:
    """Start (or reuse) the local broker; return the seconds it took to answer."""
    began = time.monotonic()
    if answers(settings.kafka_bootstrap):
        log.info("kafka already answering on %s; reusing it", settings.kafka_bootstrap)
        return 0.0
    ensure_jars(settings)
    bdir = broker_dir(settings)
    bdir.mkdir(parents=True, exist_ok=True)
    props = bdir / "server.properties"
    props.write_text(_server_properties(settings))
    if not (bdir / "logs" / "meta.properties").exists():
        cluster_id = uuid.uuid4().hex[:22]
        fmt = _java(
            settings,
            STORAGE_TOOL,
            "format",
            "-t",
            cluster_id,
            "-c",
            str(props),
            log4j="tools-log4j2.properties",
        )
        done = subprocess.run(fmt, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise KafkaError(f"formatting KRaft storage failed: {done.stdout}{done.stderr}")
    heap = settings.kafka_heap
    cmd = _java(
        settings,
        f"-Xms{heap}",
        f"-Xmx{heap}",
        "-XX:+UseG1GC",
        "-XX:MaxGCPauseMillis=20",
        "-XX:ActiveProcessorCount=2",
        f"-Dengram.log.file={bdir / 'kafka.log'}",
        KAFKA_MAIN,
        str(props),
        log4j="log4j2.properties",
    )
    proc = local_process.launch(cmd, bdir / "kafka.out", _pid_file(settings))
    return local_process.wait_until_answering(
        proc,
        lambda: answers(settings.kafka_bootstrap, timeout=1.0),
        name="broker",
        where=settings.kafka_bootstrap,
        began=began,
        timeout=timeout,
        poll=0.25,
        out=bdir / "kafka.out",
        log_file=bdir / "kafka.log",
        pid_file=_pid_file(settings),
        error=KafkaError,
    )


def stop(settings: Settings, *, timeout: float = 30.0) -> bool:
    """Stop the broker this project started; False when none of ours was running."""
    return local_process.stop(_pid_file(settings), name="broker", timeout=timeout, poll=0.2)
