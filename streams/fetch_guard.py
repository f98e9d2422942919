"""A record the Kafka client cannot parse is handed on as *unreadable*, not raised forever.

aiokafka parses a fetched batch strictly: a header key that is not UTF-8, or a batch it cannot
decompress, raises out of ``getmany`` at that offset, and the next fetch starts at the same
offset and raises again. One such record, produced by anyone with write access to the topic,
would stall the projector for every tenant on the partition and make replay abort. The client
has no hook for this, so :func:`install` swaps the ``MemoryRecords`` the fetcher builds for a
wrapper that keeps each batch's bytes: a batch that iterates cleanly costs nothing extra; one
that raises is re-read here, tolerantly, record by record. Every record that parses strictly is
yielded as usual; every one that does not is yielded at its own offset with its key and value
(when they could be read) and the header :data:`UNREADABLE` carrying the reason, so the
projector dead-letters exactly that offset and the stream goes on.

Only message format v2 is handled: Kafka 4 brokers accept nothing older.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from aiokafka import codec
from aiokafka.consumer import fetcher
from aiokafka.record.memory_records import MemoryRecords
from aiokafka.record.util import decode_varint

# A header key no record on the wire can have: keys are decoded as strict UTF-8, which never
# yields a lone surrogate. A producer cannot forge the mark.
UNREADABLE = "\udcffengram-unreadable"

_HEADER = struct.Struct(">qiibIhiqqqhii")  # the v2 batch header, 61 bytes
_LOG_OVERHEAD = 12  # base offset (8) + batch length (4)
_CODECS = {1: codec.gzip_decode, 2: codec.snappy_decode, 3: codec.lz4_decode, 4: codec.zstd_decode}
_LOG_APPEND_TIME = 0x08


@dataclass
class ParsedRecord:
    """The fields the fetcher reads from a record (``offset`` … ``checksum``)."""

    offset: int
    timestamp: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    checksum: None = None


def unreadable_reason(headers: Any) -> str | None:
    """The reason a record could not be parsed, if the guard marked it so."""
    for key, value in headers or ():
        if key == UNREADABLE:
            return (value or b"").decode("utf-8", "replace")
    return None


class _Reader:
    """Reads varints and byte strings from a buffer, failing with a plain ValueError."""

    def __init__(self, buffer: bytes, pos: int = 0) -> None:
        self.buffer, self.pos = buffer, pos

    def varint(self) -> int:
        if self.pos >= len(self.buffer):
            raise ValueError("truncated record")
        value, self.pos = decode_varint(self.buffer, self.pos)
        return value

    def blob(self) -> bytes | None:
        n = self.varint()
        if n < 0:
            return None
        if self.pos + n > len(self.buffer):
            raise ValueError("truncated record")
        out = self.buffer[self.pos : self.pos + n]
        self.pos += n
        return out


def reread_batch(raw: bytes, after: int, failure: BaseException) -> Iterator[ParsedRecord]:
    """The records of one v2 batch with offsets above ``after``, each strict or marked unreadable."""
    (base, _len, _epoch, magic, _crc, attrs, last_delta, first_ts, max_ts, *_rest, count) = (
        _HEADER.unpack_from(raw)
    )
    ts_type = 1 if attrs & _LOG_APPEND_TIME else 0

    def unreadable(
        offset: int,
        reason: str,
        key: bytes | None = None,
        value: bytes | None = None,
        headers: list[tuple[str, bytes | None]] | None = None,
        ts: int = first_ts,
    ) -> ParsedRecord:
        mark = (UNREADABLE, reason[:2000].encode("utf-8", "backslashreplace"))
        return ParsedRecord(offset, ts, ts_type, key, value, [*(headers or []), mark])

    def whole_batch(reason: str) -> Iterator[ParsedRecord]:
        for offset in range(max(base, after + 1), base + last_delta + 1):
            yield unreadable(offset, reason)

    if magic != 2:
        yield from whole_batch(f"record batch of message format v{magic}: {failure}")
        return
    body = raw[_HEADER.size :]
    compression = attrs & 0x07
    if compression:
        try:
            body = bytes(_CODECS[compression](bytes(body)))
        except Exception as exc:  # any codec's failure: missing library, corrupt data, unknown id
            yield from whole_batch(f"record batch cannot be decompressed (codec {compression}): {exc}")
            return
    reader = _Reader(bytes(body))
    for _ in range(count):
        try:
            length = reader.varint()
            start = reader.pos
            reader.varint()  # attributes, unused in v2
            ts_delta, offset_delta = reader.varint(), reader.varint()
            key, value = reader.blob(), reader.blob()
            raw_headers = [(reader.blob(), reader.blob()) for _ in range(reader.varint())]
            if reader.pos - start != length:
                raise ValueError(f"record length {length} does not match its fields")
        except Exception as exc:  # the record's own framing is broken: nothing after it is findable
            yield from whole_batch(f"record batch is corrupt: {exc}")
            return
        offset = base + offset_delta
        timestamp = max_ts if ts_type else first_ts + ts_delta
        if offset <= after:
            continue
        problems = []
        headers: list[tuple[str, bytes | None]] = []
        for h_key, h_value in raw_headers:
            if h_key is None:
                problems.append("a header key is null")
                continue
            try:
                headers.append((h_key.decode("utf-8"), h_value))
            except UnicodeDecodeError:
                problems.append(f"header key {h_key[:100]!r} is not UTF-8")
                headers.append((h_key.decode("utf-8", "backslashreplace"), h_value))
        if problems:
            reason = "the Kafka client cannot read this record: " + "; ".join(problems)
            yield unreadable(offset, reason, key, value, headers, timestamp)
        else:
            yield ParsedRecord(offset, timestamp, ts_type, key, value, headers)


class _GuardedBatch:
    """A data batch that falls back to :func:`reread_batch` when the client's parser raises."""

    def __init__(self, batch: Any, raw: memoryview) -> None:
        self._batch, self._raw = batch, raw

    def __getattr__(self, name: str) -> Any:
        return getattr(self._batch, name)

    def __iter__(self) -> Iterator[Any]:
        last = -1
        try:
            for record in self._batch:
                last = record.offset
                yield record
        except Exception as exc:
            yield from reread_batch(bytes(self._raw), last, exc)


class GuardedMemoryRecords:
    """``MemoryRecords`` that keeps the bytes of each batch it hands out."""

    def __init__(self, data: bytes) -> None:
        self._records = MemoryRecords(data)
        self._data = memoryview(data)
        self._pos = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._records, name)

    def has_next(self) -> bool:
        return self._records.has_next()

    def next_batch(self) -> Any:
        batch = self._records.next_batch()
        if batch is None:
            return None
        (length,) = struct.unpack_from(">i", self._data, self._pos + 8)
        end = self._pos + _LOG_OVERHEAD + length
        raw, self._pos = self._data[self._pos : end], end
        if batch.is_control_batch:
            return batch
        return _GuardedBatch(batch, raw)


def install() -> None:
    """Make every aiokafka consumer in this process hand on unreadable records (idempotent)."""
    fetcher.MemoryRecords = GuardedMemoryRecords  # type: ignore[misc]
