"""One settings class for the whole process, read from ``ENGRAM_*`` environment variables.

Built by :func:`load_settings` (never at import time) so tests can point a process at its own
broker, topic prefix and data directory.
"""

from __future__ import annotations

import logging
import secrets
import socket
import uuid
from pathlib import Path
from typing import Literal

import platformdirs
from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

import engram.ontology
import engram.rules
from engram.files import create_once

REPO = Path(__file__).resolve().parents[1]  # the checkout (installed: site-packages)
ONTOLOGY_DIR = Path(engram.ontology.__file__).parent  # ontology/ in a checkout, engram/ontology installed
RULES_DIR = Path(engram.rules.__file__).parent
log = logging.getLogger(__name__)


def checkout_data_dir() -> Path | None:
    """``.engram/data`` of the source checkout this engram runs from (an editable install, as
    ``./dev`` makes), else None. ``./dev up`` serves from there, so ``.venv/bin/engram token`` in
    another shell, with nothing set, must sign with the secret kept there: with the user data
    directory as its default it signed with another, and every request was refused."""
    if (REPO / "dev").is_file() and (REPO / "pyproject.toml").is_file():
        return REPO / ".engram" / "data"
    return None


def default_data_dir() -> Path:
    """The checkout's data directory when run from a checkout; else the platform's user data
    directory for engram (``~/.local/share/engram`` on Linux, honouring ``XDG_DATA_HOME``). One
    fixed place either way, so ``engram token`` run from any directory signs with the secret the
    server checks. A default relative to the working directory made a second, silent
    ``auth-secret`` (and key store) wherever a command happened to run."""
    return checkout_data_dir() or platformdirs.user_data_path("engram", appauthor=False)


def default_cache_dir() -> Path:
    """The platform's user cache directory (``~/.cache/engram`` on Linux, honouring
    ``XDG_CACHE_HOME``): the fetched jars are re-downloadable, so they belong in a cache."""
    return platformdirs.user_cache_path("engram", appauthor=False)


class Settings(BaseSettings):
    """Every knob engram reads. The README's configuration table mirrors this class."""

    model_config = SettingsConfigDict(env_prefix="ENGRAM_", extra="ignore")

    data_dir: Path = Field(
        default_factory=default_data_dir,
        description="Per-tenant stores, secret, keys and broker data; if unset, .engram/data in a source "
        "checkout (as ./dev uses), else the user data directory.",
    )
    keys_dir: Path | None = Field(
        None,
        description="Key store of memories' data keys (crypto-shredding); DATA_DIR/keys if unset. "
        "Not on the log, and not in the same backups as it.",
    )
    cache_dir: Path = Field(
        default_factory=default_cache_dir,
        description="Kafka and s3proxy jars fetched from Maven Central; the minilm-int8 ONNX graph.",
    )
    archive_dir: Path | None = Field(
        None, description="The local object store (when no S3 endpoint is set); DATA_DIR/archive if unset."
    )
    s3_endpoint: str | None = Field(
        None,
        description="S3-compatible endpoint URL; with s3_bucket, objects go there instead of archive_dir.",
    )
    s3_bucket: str = Field("engram", description="Bucket of the object store (created if missing).")
    s3_access_key: str = Field(
        "engram", description="S3 access key (the local s3proxy's); empty: boto3's default credentials."
    )
    s3_secret_key: str = Field(
        "engram-secret",
        description="S3 secret key (the local s3proxy's); empty: boto3's default credentials.",
    )
    s3_region: str = Field("us-east-1", description="S3 region the requests are signed for.")
    archive_enabled: bool = Field(
        False, description="Run the archiver (events topic to the object store) inside `engram serve`."
    )
    archive_segment_records: int = Field(
        10_000, ge=1, description="Records of one archive segment: a partition's segment rolls at this."
    )
    archive_segment_bytes: int = Field(
        64 * 1_048_576, ge=1, description="Record bytes at which an archive segment rolls before its count."
    )
    archive_segment_age_s: float = Field(
        60.0,
        gt=0,
        description="A caught-up partition's open archive segment rolls once its first record is this old.",
    )
    snapshot_every: int | None = Field(
        None,
        ge=0,
        description="Take a tenant snapshot (its store, in the object store) every this many events it "
        "handles, so a replay or an as_of starts there; 0: only on demand. Unset: 250 in a local "
        "object store (hard links: a snapshot costs ~30 ms), 10000 in S3 (each uploads the whole store) "
        "or with ENGRAM_STORE=memory (each dumps the whole store).",
    )
    ontology_dir: Path = Field(ONTOLOGY_DIR, description="Turtle ontology and SHACL shapes.")
    rules_dir: Path = Field(RULES_DIR, description="Datalog rules (*.dlog).")
    kafka_bootstrap: str = Field("127.0.0.1:9092", description="Kafka bootstrap servers.")
    kafka_version: str = Field("4.1.1", description="Apache Kafka version of the local broker.")
    kafka_controller_port: int = Field(9093, description="KRaft controller port (local broker).")
    kafka_heap: str = Field("512m", description="Max JVM heap of the local broker.")
    topic_prefix: str = Field("engram", description="Prefix of every topic name.")
    events_partitions: int = Field(12, ge=1, description="Partitions of the events topic.")
    topic_replication: int = Field(1, ge=1, description="Replication factor of created topics.")
    consumer_group: str = Field(
        "engram-projector", description="Prefix of the projector's consumer group (see projector_group)."
    )
    api_host: str = Field("127.0.0.1", description="Address the HTTP API binds.")
    api_port: int = Field(8000, description="Port the HTTP API binds.")
    advertised_url: str | None = Field(
        None,
        description="The URL other processes of the consumer group forward a tenant's requests to when "
        "this one owns it; unset: http://<API host, or this machine's name if it binds all>:<API port>.",
    )
    route_wait_s: float = Field(
        5.0,
        gt=0,
        description="Longest a request waits for its tenant's partition to be assigned (a rebalance) or "
        "caught up after a move, before a 503 with Retry-After.",
    )
    wait_timeout_s: float = Field(10.0, gt=0, description="Longest `?wait=true` waits.")
    write_timeout_s: float = Field(
        10.0,
        gt=0,
        description="Longest a write waits for the log to take its event: past it (the broker down), "
        "503 with Retry-After; a retry with the same Idempotency-Key (or event_id) is deduplicated. "
        "As long as ENGRAM_WAIT_TIMEOUT_S: a broker slow under load is not taken for a dead one.",
    )
    write_queue: int = Field(
        2000,
        ge=1,
        description="Most memory writes queued or not yet acknowledged by the log in this process: past "
        "it a write is refused at once (503, Retry-After: 1), nothing written, instead of waiting "
        "behind the others; a bulk request's items count one each.",
    )
    ready_max_lag: int = Field(
        1000,
        ge=0,
        description="Most records this process's partitions may be behind and /readyz still answer 200 "
        "(~2.5 s of projection at ~400 events/s, well inside ENGRAM_WAIT_TIMEOUT_S); 0: caught up.",
    )
    log_summary_s: float = Field(
        10.0,
        ge=0,
        description="A warning or error repeated within this many seconds (same logger and message "
        "template) is counted, not printed: one summary line per interval. 0: every line printed.",
    )
    max_body_bytes: int = Field(1_048_576, ge=1, description="Largest request body; more is a 413.")
    max_header_bytes: int = Field(
        16_384, ge=1024, description="Largest request line + headers; more is a 431."
    )
    header_timeout_s: float = Field(10.0, gt=0, description="Time a request's headers must arrive in.")
    body_timeout_s: float = Field(30.0, gt=0, description="Time a request's body must arrive in (408).")
    max_connections: int = Field(
        1000, ge=1, description="Connections and requests in flight at once; more are answered 503."
    )
    allowed_hosts: str = Field("*", description="Host names served, comma separated (`*.x.com`, `*`).")
    max_open_stores: int = Field(256, ge=1, description="Tenant stores kept open at once.")
    open_stores_mb: int = Field(
        4096,
        ge=0,
        description="Memory the open tenants may hold, by their estimates (a disk store's ~6 MiB and "
        "unflushed writes, an in-memory store's quads, the vector index's capacity, the text overlay "
        "and caches); past it, the least recently used are closed. 0: bounded by count only.",
    )
    store_write_buffer_mb: int = Field(
        64,
        ge=0,
        description="The open disk stores' unflushed writes (RocksDB memtables, estimated) the projector "
        "allows before it flushes the largest stores down to half of it; 0: never (a store then "
        "flushes itself at 128 MB per column family).",
    )
    store: Literal["disk", "memory"] = Field(
        "disk",
        description="Where an open tenant's graph lives: `disk` (a RocksDB store per tenant) or `memory` "
        "(opened from its newest snapshot; the log after it is consumed again after a crash).",
    )
    rule_engine: Literal["core", "reference"] = Field(
        "core",
        description="What runs the rules: `core`, the compiled incremental engine (engram._core, Rust); "
        "`reference`, the Python engine it is tested against. A program the core does not evaluate (a "
        "SPARQL function it does not know) runs on the Python engine either way, with a warning. Read when "
        "the rules load.",
    )
    session_timeout_s: float = Field(
        10.0,
        ge=6.0,
        le=90.0,
        description="The projector's consumer-group session timeout: a process killed with kill -9 leaves "
        "the group, and its tenants move, after this; heartbeats go every third of it, at most 1 s. At "
        "least 6: brokers refuse less (group.min.session.timeout.ms); at most 90: faust refuses more "
        "(its broker_request_timeout).",
    )
    snapshot_keep: int = Field(
        3,
        ge=0,
        description="Snapshots kept per tenant: the newest this many, the first, and of the others one per "
        "window of a quarter to a half of their distance (in log records) from the newest, pruned by the "
        "process that takes one: an as_of d records back starts within d records; 0: keep every snapshot.",
    )
    snapshot_after_s: float = Field(
        5.0,
        gt=0,
        description="When tenants move (in memory, or on disk with a shared object store), a tenant's "
        "unsaved events are snapshotted at most this long after it was last saved; the projector's committed "
        "offsets wait for its snapshots.",
    )
    projector_batch_max: int = Field(
        2000,
        ge=1,
        description="Most records the projector takes at once (grouped by tenant, one commit each).",
    )
    key_wait_s: float = Field(
        300.0,
        ge=0,
        description="How long the projector waits at a record whose data key is neither in the key "
        "store nor destroyed there (unready, saying why, projecting nothing as erased) before it "
        "dead-letters the record with that reason and goes on.",
    )
    projector_batch_ms: float = Field(
        10000.0,
        gt=0,
        description="Time a projector batch should take: it holds as many records as are handled in it "
        "(lower bounds hurt throughput: 500 ms gave 165 events/s rules on, unbounded 408).",
    )
    sparql_timeout_s: float = Field(
        10.0,
        gt=0,
        description="Longest a SPARQL query evaluates: past it, its sandboxed evaluator is killed (422).",
    )
    embedder: str = Field(
        "minilm-int8",
        description="Embedding model: minilm-int8 (all-MiniLM-L6-v2 in int8 on onnxruntime, offline), minilm "
        "(the same weights in float32 numpy, ~3.5x slower, vectors of its own model id) or hashing[-DIM].",
    )
    query_embedding_worker: bool = Field(
        True,
        description="Embed recall and context queries in a helper process, overlapping the graph reads.",
    )
    extractor: str = Field(
        "patterns", description="What turns conversation turns into memories: patterns, llm or none."
    )
    extraction_llm_base_url: str | None = Field(
        None, description="OpenAI-compatible endpoint of the llm extractor (…/v1; Ollama, vLLM, OpenAI)."
    )
    extraction_llm_model: str | None = Field(None, description="Model the llm extractor asks.")
    extraction_llm_api_key: str | None = Field(
        None, description="Bearer key of the llm endpoint; unset: none sent."
    )
    extraction_llm_timeout_s: float = Field(
        30.0, gt=0, description="Longest wait for one completion (retryable)."
    )
    context_confidence_floor: float = Field(
        0.5, ge=0, le=1, description="Least confidence of a top-tier memory in the context."
    )
    extraction: bool = Field(
        True, description="Capture: extract memories from conversation turns inside `engram serve`."
    )
    extraction_turns: int = Field(
        6,
        ge=1,
        description="Unprocessed turns of a conversation that start its extraction at once: three "
        "exchanges, enough context for a statement and its correction, small enough to be quick.",
    )
    extraction_idle_s: float = Field(
        30.0, gt=0, description="Idle seconds after which a conversation's shorter tail is extracted."
    )
    extraction_retries: int = Field(
        3, ge=0, description="Retries of an extraction that failed retryably, before it is dead-lettered."
    )
    extraction_backoff_s: float = Field(
        0.5, ge=0, description="First retry delay of a failed extraction; doubled at each retry."
    )
    log_level: str = Field("INFO", description="Log level of engram's loggers.")
    auth_secret: str | None = Field(
        None,
        description="HS256 secret of bearer tokens; unset: one is generated in <data dir>/auth-secret.",
    )
    auth_public_key: Path | None = Field(
        None, description="PEM public key: bearer tokens are RS256/ES256 signed by its private key."
    )
    auth_jwks: Path | None = Field(None, description="JWKS file: bearer tokens signed by one of its keys.")
    auth_issuer: str = Field("engram", description="The `iss` every bearer token must carry.")
    rate_limit_per_s: float = Field(
        100.0, gt=0, description="Requests per second each principal (tenant and subject) may make."
    )
    rate_limit_burst: int = Field(
        200, ge=1, description="Requests a principal may make at once above the rate."
    )
    rate_limit_cost_ms: float = Field(
        5.0,
        gt=0,
        description="Server time one request token buys: a request costs one token per this many "
        "milliseconds of event-loop CPU time it takes (at least one). With the rate, it caps the share of "
        "the event loop one principal can hold: 100/s x 5 ms = 50%.",
    )

    @field_validator(
        "data_dir", "keys_dir", "cache_dir", "archive_dir", "ontology_dir", "rules_dir",
        "auth_public_key", "auth_jwks",
    )  # fmt: skip
    @classmethod
    def _absolute(cls, path: Path | None) -> Path | None:
        """Every path absolute (and ``~`` expanded) once, when the settings are read: a relative
        ``ENGRAM_DATA_DIR=data`` would otherwise mean another directory to each command run
        elsewhere, and to the broker and s3proxy, which are handed these paths and run elsewhere."""
        return None if path is None else path.expanduser().absolute()

    def data_dir_notice(self) -> str:
        """One line saying where this process keeps its data and why there, printed when a
        long-running command starts: the first thing to check when a token is refused."""
        if "data_dir" in self.model_fields_set:
            origin = "ENGRAM_DATA_DIR"
        elif self.data_dir == checkout_data_dir():
            origin = "this checkout's, as ./dev uses; ENGRAM_DATA_DIR moves it"
        else:
            origin = "the default; ENGRAM_DATA_DIR moves it"
        return f"engram data directory: {self.data_dir} ({origin})"

    @property
    def allowed_host_list(self) -> list[str]:
        return [h.strip() for h in self.allowed_hosts.split(",") if h.strip()] or ["*"]

    @property
    def events_topic(self) -> str:
        return f"{self.topic_prefix}.events"

    @property
    def dead_letters_topic(self) -> str:
        return f"{self.topic_prefix}.dead-letters"

    @property
    def conversations_topic(self) -> str:
        return f"{self.topic_prefix}.conversations"

    @property
    def key_stores_topic(self) -> str:
        """The id of the key store the log's events are sealed with (``streams.log_keys``)."""
        return f"{self.topic_prefix}.key-store"

    @property
    def tenants_dir(self) -> Path:
        return self.data_dir / "tenants"

    @property
    def key_store_dir(self) -> Path:
        return self.keys_dir or self.data_dir / "keys"

    @property
    def snapshot_interval(self) -> int:
        if self.snapshot_every is not None:
            return self.snapshot_every
        # a snapshot of a tenant in memory, or in S3, is the whole tenant each time
        return 10_000 if (self.s3_endpoint and self.s3_bucket) or self.store == "memory" else 250

    @property
    def archive_root(self) -> Path:
        return self.archive_dir or self.data_dir / "archive"

    @property
    def tenants_move(self) -> bool:
        """Whether this process shares its tenants with the others of a group: in memory (a tenant
        lives in its snapshots), or on disk with an object store other processes can share (S3, or
        ``ENGRAM_ARCHIVE_DIR`` outside the data directory). Then every process sharing that object
        store joins one consumer group, each projects its share of the partitions, and a tenant's
        store on disk is a cache of its newest snapshot (``projections.stores``). With the object
        store inside its own data directory a process is alone: it projects every tenant."""
        if self.store == "memory" or (self.s3_endpoint and self.s3_bucket):
            return True
        return self.archive_dir is not None and not self.archive_dir.resolve().is_relative_to(
            self.data_dir.resolve()
        )

    def token_secret(self) -> str:
        """The HS256 secret: ENGRAM_AUTH_SECRET, or one made once per data directory (mode 0600)."""
        if self.auth_secret:
            return self.auth_secret
        path = self.data_dir / "auth-secret"
        if not path.exists():  # tokens signed with another are refused
            log.info("making an auth secret in %s, if no other process does first", path)
        return create_once(path, lambda: secrets.token_urlsafe(48).encode()).decode().strip()

    def api_url(self) -> str:
        """The URL this process's API is reached at by the others of its group (``advertised_url``)."""
        if self.advertised_url:
            return self.advertised_url.rstrip("/")
        host = socket.gethostname() if self.api_host in ("0.0.0.0", "::", "") else self.api_host
        return f"http://{f'[{host}]' if ':' in host else host}:{self.api_port}"

    def projector_group(self) -> str:
        """The projector's consumer group: the prefix plus the id of this data directory.

        Committed offsets belong to the stores they were committed for, so a new (or wiped) data
        directory gets a group of its own and replays the log from the start.
        """
        marker = self.data_dir / "instance-id"
        instance = create_once(marker, lambda: uuid.uuid4().hex[:12].encode(), mode=0o644)
        return f"{self.consumer_group}-{instance.decode().strip()}"


def load_settings(**overrides: object) -> Settings:
    return Settings(**overrides)  # type: ignore[arg-type]
