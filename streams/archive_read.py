"""The archive's format and its reader: Kafka records as Avro object container files, plus a manifest.

Layout in the object store (``streams.objects``), one tree per topic::

    events/<topic>/manifest.json
    events/<topic>/p=<partition>/<first offset:020d>-<last offset:020d>.avro

A segment is a plain Avro object container file (deflate) of ``engram.archive.LogRecord``
(``schemas/avro/``): every record of one partition's offset range as Kafka held it, the value's
bytes untouched, so any Avro tool reads it and a replay from it decides on each record as live did.
The manifest is the archive's table of contents and the archiver's progress: a segment exists for a
reader only once the manifest lists it (``streams.archiver`` writes the segment, then the manifest).
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from functools import cache
from itertools import pairwise
from typing import Any

import fastavro
from engram.schemas import avro_dir
from engram.streams.objects import MissingObject, Objects
from fastavro.schema import parse_schema

ROOT = "events"
SCHEMA_FILE = "engram.archive.LogRecord.avsc"
MANIFEST_FORMAT = 1
CODEC = "deflate"  # in the Avro specification: every Avro tool reads it without an extra library
SEGMENT_NAME = re.compile(r"p=(\d+)/(\d{20})-(\d{20})\.avro")


class ArchiveError(RuntimeError):
    """The archive is not what its manifest says (a segment missing, altered or malformed)."""


class ArchiveGap(LookupError):
    """Offsets a reader needs are neither in Kafka nor in the archive: never skipped silently."""

    def __init__(self, topic: str, partition: int, first: int, last: int, where: str = "") -> None:
        self.topic, self.partition, self.first, self.last = topic, partition, first, last
        super().__init__(
            f"offsets {first}..{last} of {topic} partition {partition} are neither in Kafka nor in "
            f"the archive{f' ({where})' if where else ''}"
        )

    def __str__(self) -> str:
        return str(self.args[0])


@cache
def log_record_schema() -> Any:
    return parse_schema(json.loads((avro_dir() / SCHEMA_FILE).read_text()))


def topic_root(topic: str) -> str:
    return f"{ROOT}/{topic}"


def manifest_key(topic: str) -> str:
    return f"{topic_root(topic)}/manifest.json"


def segment_key(topic: str, partition: int, first: int, last: int) -> str:
    return f"{topic_root(topic)}/p={partition}/{first:020d}-{last:020d}.avro"


def parse_segment_key(topic: str, key: str) -> tuple[int, int, int] | None:
    """(partition, first, last) of a segment's key under ``topic``; None for any other key."""
    prefix = f"{topic_root(topic)}/"
    found = SEGMENT_NAME.fullmatch(key[len(prefix) :]) if key.startswith(prefix) else None
    return (int(found[1]), int(found[2]), int(found[3])) if found else None


@dataclass(frozen=True)
class LogRecord:
    """A Kafka record as archived (and as a replay needs it)."""

    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]

    def to_avro(self) -> dict[str, Any]:
        return {
            "partition": self.partition,
            "offset": self.offset,
            "timestamp": self.timestamp,
            "key": self.key,
            "headers": [{"key": k, "value": v} for k, v in self.headers],
            "value": self.value,
        }

    @classmethod
    def from_avro(cls, record: dict[str, Any]) -> LogRecord:
        return cls(
            record["partition"],
            record["offset"],
            record["timestamp"],
            record["key"],
            record["value"],
            [(h["key"], h["value"]) for h in record["headers"]],
        )


@dataclass(frozen=True)
class Segment:
    """A manifest's entry: one segment object and what it holds."""

    key: str
    first_offset: int
    last_offset: int
    records: int
    first_timestamp: int
    last_timestamp: int
    bytes: int
    sha256: str


@dataclass
class Manifest:
    """Every segment of a topic, per partition in offset order."""

    topic: str
    partitions: dict[int, list[Segment]] = field(default_factory=dict)

    def segments(self, partition: int) -> list[Segment]:
        return self.partitions.setdefault(partition, [])

    def next_offset(self, partition: int) -> int | None:
        """The offset after the last archived one; None when nothing of the partition is archived."""
        segments = self.partitions.get(partition)
        return segments[-1].last_offset + 1 if segments else None

    def to_bytes(self) -> bytes:
        body = {
            "format": MANIFEST_FORMAT,
            "topic": self.topic,
            "partitions": {
                str(p): [asdict(s) for s in segments] for p, segments in sorted(self.partitions.items())
            },
        }
        return json.dumps(body, indent=1).encode() + b"\n"

    @classmethod
    def from_bytes(cls, data: bytes) -> Manifest:
        body = json.loads(data)
        if body.get("format") != MANIFEST_FORMAT:
            raise ArchiveError(f"manifest format {body.get('format')!r}; this reader knows {MANIFEST_FORMAT}")
        return cls(
            body["topic"],
            {int(p): [Segment(**s) for s in segments] for p, segments in body["partitions"].items()},
        )

    @classmethod
    def load(cls, objects: Objects, topic: str, *, attempts: int = 5) -> Manifest:
        """The topic's manifest; an empty one when nothing was archived yet. A manifest that does
        not parse is read again (``attempts`` times, 0.1 s more apart each time): an object store
        that serves a put still being written (s3proxy's file backend can) gives a torn read."""
        key = manifest_key(topic)
        for attempt in range(1, attempts + 1):
            try:
                data = objects.get(key)
            except MissingObject:
                return cls(topic)
            try:
                manifest = cls.from_bytes(data)
                break
            except (ValueError, KeyError, TypeError) as exc:  # JSONDecodeError and UnicodeDecodeError too
                if attempt == attempts:
                    raise ArchiveError(f"{key} does not parse after {attempts} reads: {exc}") from exc
                time.sleep(0.1 * attempt)
        if manifest.topic != topic:
            raise ArchiveError(f"{key} describes topic {manifest.topic!r}")
        return manifest


def sync_marker(topic: str, partition: int, first: int) -> bytes:
    """A segment's sync marker, from where it starts: the same records give the same bytes."""
    return hashlib.sha256(f"{topic}/{partition}/{first}".encode()).digest()[:16]


def encode_segment(topic: str, partition: int, records: list[LogRecord]) -> bytes:
    """The object container file of ``records`` (one partition, offset order): deterministic, no
    wall-clock metadata, so rewriting a segment writes the same bytes."""
    first, last = records[0].offset, records[-1].offset
    metadata = {
        "engram.topic": topic,
        "engram.partition": str(partition),
        "engram.first_offset": str(first),
        "engram.last_offset": str(last),
    }
    out = io.BytesIO()
    fastavro.writer(
        out,
        log_record_schema(),
        (r.to_avro() for r in records),
        codec=CODEC,
        metadata=metadata,
        sync_marker=sync_marker(topic, partition, first),
    )
    return out.getvalue()


def decode_segment(data: bytes) -> Iterator[LogRecord]:
    for record in fastavro.reader(io.BytesIO(data)):
        yield LogRecord.from_avro(record)  # type: ignore[arg-type]


def describe_segment(topic: str, key: str, data: bytes) -> Segment:
    """The manifest entry of a segment object, after checking it holds what its key says (how a
    segment written just before a crash, and not yet in the manifest, is adopted)."""
    parsed = parse_segment_key(topic, key)
    if parsed is None:
        raise ArchiveError(f"{key!r} is not a segment key of {topic}")
    partition, first, last = parsed
    try:
        records = list(decode_segment(data))
    except Exception as exc:  # a truncated or foreign file fails anywhere in the reader
        raise ArchiveError(f"{key}: not a readable Avro container: {type(exc).__name__}: {exc}") from exc
    offsets = [r.offset for r in records]
    if (
        not records
        or offsets[0] != first
        or offsets[-1] != last
        or any(b <= a for a, b in pairwise(offsets))
        or any(r.partition != partition for r in records)
    ):
        raise ArchiveError(f"{key}: its records are not offsets {first}..{last} of partition {partition}")
    return Segment(
        key,
        first,
        last,
        len(records),
        records[0].timestamp,
        records[-1].timestamp,
        len(data),
        hashlib.sha256(data).hexdigest(),
    )


def covering(manifest: Manifest, partition: int, start: int, end: int) -> list[Segment]:
    """The segments holding offsets ``start`` to ``end - 1``; ArchiveGap naming the first range that
    none holds."""
    chosen: list[Segment] = []
    wanted = start
    for segment in manifest.partitions.get(partition, []):
        if wanted >= end:
            break
        if segment.last_offset < wanted:
            continue
        if segment.first_offset > wanted:
            break
        chosen.append(segment)
        wanted = segment.last_offset + 1
    if wanted < end:
        later = [s.first_offset for s in manifest.partitions.get(partition, []) if s.first_offset > wanted]
        last = min([end, *later]) - 1
        raise ArchiveGap(manifest.topic, partition, wanted, last)
    return chosen


def segment_records(objects: Objects, segment: Segment, start: int, end: int) -> list[LogRecord]:
    """The records of ``segment`` with ``start <= offset < end``, after checking its digest."""
    try:
        data = objects.get(segment.key)
    except MissingObject:
        raise ArchiveError(f"{segment.key} is in the manifest but not in the store") from None
    if hashlib.sha256(data).hexdigest() != segment.sha256:
        raise ArchiveError(f"{segment.key} does not match the manifest's sha256")
    return [r for r in decode_segment(data) if start <= r.offset < end]


def read_archived(
    objects: Objects, topic: str, partition: int, start_offset: int, end_offset: int
) -> Iterator[LogRecord]:
    """Archived records of ``partition`` with offsets ``start_offset`` to ``end_offset - 1``, in
    order. The manifest must cover the whole range (ArchiveGap before anything is read if not)."""
    for segment in covering(Manifest.load(objects, topic), partition, start_offset, end_offset):
        yield from segment_records(objects, segment, start_offset, end_offset)
