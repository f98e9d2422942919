"""The Faust app every agent of engram runs in: raw bytes in and out (the pipeline decodes), one
consumer group per job, offsets from the start of the log for a new group, idempotent acks."""

from __future__ import annotations

import faust
from engram.streams import fetch_guard
from engram.streams.topics import DEAD_LETTER_MAX_BYTES

from engram.settings import Settings


def faust_app(
    settings: Settings, group: str, datadir: str, *, url: str | None = None, client_id: str | None = None
) -> faust.App:
    """An app in consumer group ``group``, its local state under ``data_dir/datadir``; ``url`` is
    what the group's assignment says this member is reached at (``streams.group``), ``client_id``
    what kind of process it is (``engram status``)."""
    fetch_guard.install()
    extra: dict[str, str] = {"canonical_url": url} if url is not None else {}
    if client_id is not None:
        extra["broker_client_id"] = client_id
    return faust.App(
        group,
        broker=f"kafka://{settings.kafka_bootstrap}",
        web_enabled=False,
        datadir=str(settings.data_dir / datadir),
        store="memory://",
        key_serializer="raw",
        value_serializer="raw",
        consumer_auto_offset_reset="earliest",
        producer_acks=-1,
        producer_max_request_size=DEAD_LETTER_MAX_BYTES,  # a dead letter is a record plus its reason
        topic_replication_factor=settings.topic_replication,  # its group-leader topic
        topic_partitions=settings.events_partitions,
        broker_commit_every=200,
        broker_commit_interval=1.0,
        # a worker that died (kill -9) leaves the group after this, not after Faust's 60 s default
        broker_session_timeout=settings.session_timeout_s,
        # after a kill -9 the survivors learn of the rebalance at their next heartbeat: at most 1 s
        broker_heartbeat_interval=min(1.0, settings.session_timeout_s / 3),
        # records fetched but not yet taken, all partitions in one queue: a fresh write waits behind at
        # most these (Faust's 4096 held it behind a whole backlog); the rate is unchanged (bench/throughput)
        stream_buffer_maxsize=500,
        **extra,
    )
