"""The embedded default's broker: Apache Kafka in KRaft mode, fetched from Maven Central, no Docker.

``start`` is idempotent: a broker that already answers on the bootstrap address is reused, a
stopped one is started again on its existing storage, a new one is formatted first.

A bootstrap of several addresses is a local cluster of as many nodes (each broker and controller,
the quorum all of them, one cluster id): node ``i`` listens on the ``i``-th address, its controller
on ``ENGRAM_KAFKA_CONTROLLER_PORT + i``; the internal topics get replication ``min(3, nodes)`` and
every topic ``min.insync.replicas=min(2, nodes)``, as in docker-compose.yml. ``start`` starts the
nodes that do not answer (so it also restarts one that died), ``stop`` stops them all.
"""

from __future__ import annotations

import asyncio
import logging
import re
import shutil
import subprocess
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
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


def broker_dir(settings: Settings, node: int = 0) -> Path:
    """Node ``node``'s storage, pid and logs (the first node's is where a single broker's always was)."""
    return settings.data_dir / ("kafka" if node == 0 else f"kafka-{node + 1}")


def addresses(settings: Settings) -> list[tuple[str, int]]:
    """The local nodes' (host, port): one per bootstrap address."""
    found = []
    for address in settings.kafka_bootstrap.split(","):
        host, _, port = address.strip().rpartition(":")
        found.append((host or "127.0.0.1", int(port)))
    return found


def node_bootstrap(settings: Settings, node: int) -> str:
    host, port = addresses(settings)[node]
    return f"{host}:{port}"


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


def _server_properties(settings: Settings, node: int = 0) -> str:
    nodes = addresses(settings)
    host, port = nodes[node]
    cport = settings.kafka_controller_port
    voters = ",".join(f"{i + 1}@{h}:{cport + i}" for i, (h, _) in enumerate(nodes))
    replicas, min_isr = min(3, len(nodes)), min(2, len(nodes))
    return "\n".join(
        [
            "process.roles=broker,controller",
            f"node.id={node + 1}",
            f"controller.quorum.voters={voters}",
            f"listeners=PLAINTEXT://{host}:{port},CONTROLLER://{host}:{cport + node}",
            f"advertised.listeners=PLAINTEXT://{host}:{port}",
            "controller.listener.names=CONTROLLER",
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name=PLAINTEXT",
            f"log.dirs={broker_dir(settings, node) / 'logs'}",
            "num.partitions=1",
            "auto.create.topics.enable=false",
            f"offsets.topic.replication.factor={replicas}",
            "offsets.topic.num.partitions=4",
            f"transaction.state.log.replication.factor={replicas}",
            f"transaction.state.log.min.isr={min_isr}",
            # acks=all is acknowledged once this many replicas hold a write: one node may be down
            f"min.insync.replicas={min_isr}",
            "unclean.leader.election.enable=false",
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


def _pid_file(settings: Settings, node: int = 0) -> Path:
    return broker_dir(settings, node) / "broker.pid"


def status(settings: Settings) -> list[BrokerStatus]:
    """Each local node's: whether it answers on its own address, and its pid if it runs."""
    found = []
    for node, (host, port) in enumerate(addresses(settings)):
        address, pid = f"{host}:{port}", local_process.read_pid(_pid_file(settings, node))
        found.append(BrokerStatus(answers(address), pid, address))
    return found


def _cluster_id(settings: Settings) -> str:
    """The id a node already formatted carries (every node of a cluster shares it), else a new one."""
    for node in range(len(addresses(settings))):
        meta = broker_dir(settings, node) / "logs" / "meta.properties"
        if meta.exists() and (found := re.search(r"^cluster\.id=(\S+)$", meta.read_text(), re.M)):
            return found.group(1)
    return uuid.uuid4().hex[:22]


def _launch(settings: Settings, node: int, cluster_id: str) -> subprocess.Popen[bytes]:
    """Write node ``node``'s properties, format its storage if new, and start it (not waiting)."""
    bdir = broker_dir(settings, node)
    bdir.mkdir(parents=True, exist_ok=True)
    props = bdir / "server.properties"
    props.write_text(_server_properties(settings, node))
    if not (bdir / "logs" / "meta.properties").exists():
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
    return local_process.launch(cmd, bdir / "kafka.out", _pid_file(settings, node))


def start(settings: Settings, *, timeout: float = 90.0) -> float:
    """Start (or reuse) the local broker, or each node of a local cluster that does not answer (all
    launched before any is waited for: a node answers once a quorum of controllers runs); return
    the seconds it took until each answered."""
    began = time.monotonic()
    nodes = range(len(addresses(settings)))
    down = [n for n in nodes if not answers(node_bootstrap(settings, n))]
    if not down:
        log.info("kafka already answering on %s; reusing it", settings.kafka_bootstrap)
        return 0.0
    ensure_jars(settings)
    cluster_id = _cluster_id(settings)
    launched = [(n, _launch(settings, n, cluster_id)) for n in down]
    for node, proc in launched:
        bdir = broker_dir(settings, node)
        where = node_bootstrap(settings, node)
        local_process.wait_until_answering(
            proc,
            lambda where=where: answers(where, timeout=1.0),
            name="broker" if len(nodes) == 1 else f"broker {node + 1}",
            where=where,
            began=began,
            timeout=timeout,
            poll=0.25,
            out=bdir / "kafka.out",
            log_file=bdir / "kafka.log",
            pid_file=_pid_file(settings, node),
            error=KafkaError,
        )
    return time.monotonic() - began


def stop(settings: Settings, *, timeout: float = 30.0) -> bool:
    """Stop the broker (every node) this project started, the nodes together (one stopped after the
    others would wait for a quorum that is gone); False when none of ours was running."""
    nodes = range(len(addresses(settings)))

    def one(node: int) -> bool:
        return local_process.stop(_pid_file(settings, node), name="broker", timeout=timeout, poll=0.2)

    with ThreadPoolExecutor(max_workers=len(nodes)) as pool:
        return any(list(pool.map(one, nodes)))
