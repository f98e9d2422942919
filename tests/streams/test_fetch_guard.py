"""The fetch guard on real aiokafka parsing: bytes the client cannot read become marked records.

Batches are built with aiokafka's own (pure Python) builder; the hostile ones are then edited the
way a rogue producer's bytes would differ, with the batch CRC recomputed so the broker (and the
client's CRC check) would accept them.
"""

from __future__ import annotations

import pytest
from aiokafka.consumer.fetcher import READ_UNCOMMITTED, PartitionRecords
from aiokafka.record.default_records import _DefaultRecordBatchBuilderPy
from aiokafka.record.memory_records import MemoryRecords
from aiokafka.record.util import calc_crc32c
from aiokafka.structs import TopicPartition
from engram.streams.fetch_guard import UNREADABLE, GuardedMemoryRecords, unreadable_reason

TP = TopicPartition("events", 0)
CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
BAD_KEY = b"\xff\xfe"


class _RawKey(str):
    """A header key the builder writes as arbitrary bytes (it calls ``key.encode``)."""

    def encode(self, *_args: object, **_kwargs: object) -> bytes:  # type: ignore[override]
        return BAD_KEY


def batch(
    records: list[tuple[bytes, list[tuple[str, bytes]]]], *, codec: str = "none", base: int = 0
) -> bytes:
    builder = _DefaultRecordBatchBuilderPy(2, CODECS[codec], 0, -1, -1, -1, 10_000_000)
    for i, (value, headers) in enumerate(records):
        builder.append(i, timestamp=1_700_000_000_000 + i, key=b"acme", value=value, headers=headers)
    raw = bytearray(builder.build())
    raw[0:8] = base.to_bytes(8, "big")
    return bytes(raw)


def with_crc(raw: bytes) -> bytes:
    """The batch with its CRC-32C (over everything after the crc field) recomputed."""
    out = bytearray(raw)
    out[17:21] = calc_crc32c(bytes(out[21:])).to_bytes(4, "big")
    return bytes(out)


def consume(data: bytes, fetch_offset: int = 0) -> list:
    return list(
        PartitionRecords(
            TP, GuardedMemoryRecords(data), None, fetch_offset, None, None, True, READ_UNCOMMITTED
        )
    )


def test_clean_batches_pass_through_untouched_for_every_codec() -> None:
    for codec in CODECS:
        data = batch([(b"a", [("h", b"1")]), (b"b", [])], codec=codec, base=40)
        got = consume(data, 40)
        assert [(r.offset, r.value, r.headers) for r in got] == [
            (40, b"a", (("h", b"1"),)),
            (41, b"b", ()),
        ], codec


def test_a_header_key_that_is_not_utf8_marks_that_record_only() -> None:
    data = batch([(b"a", []), (b"b", [(_RawKey("x"), b"v")]), (b"c", [("ok", b"1")])], base=10)
    with pytest.raises(UnicodeDecodeError):  # what the client alone does with it, every time
        list(PartitionRecords(TP, MemoryRecords(data), None, 10, None, None, True, READ_UNCOMMITTED))
    got = consume(data, 10)
    assert [r.offset for r in got] == [10, 11, 12]
    assert [unreadable_reason(r.headers) is None for r in got] == [True, False, True]
    reason = unreadable_reason(got[1].headers)
    assert reason is not None and "not UTF-8" in reason and "xff" in reason
    assert got[1].value == b"b" and got[1].key == b"acme"  # the bytes are kept for the dead letter
    assert got[2].headers == (("ok", b"1"),)


def test_a_refetch_after_the_unreadable_record_does_not_mark_it_again() -> None:
    data = batch([(b"a", [(_RawKey("x"), b"v")]), (b"b", [])], base=0)
    got = consume(data, 1)  # the position moved past offset 0; the broker returns the whole batch
    assert [(r.offset, unreadable_reason(r.headers)) for r in got] == [(1, None)]


def test_a_batch_that_cannot_be_decompressed_marks_each_of_its_offsets() -> None:
    data = bytearray(batch([(b"a" * 200, []), (b"b" * 200, []), (b"c", [])], codec="zstd", base=7))
    data[70:80] = b"\x00" * 10  # corrupt the compressed body
    got = consume(with_crc(bytes(data)), 8)
    assert [r.offset for r in got] == [8, 9]
    assert all("cannot be decompressed" in (unreadable_reason(r.headers) or "") for r in got)


def test_a_lone_surrogate_mark_cannot_come_from_the_wire() -> None:
    with pytest.raises(UnicodeEncodeError):
        UNREADABLE.encode("utf-8")
