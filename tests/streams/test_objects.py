"""The object store: one behavioural suite over a local directory and a real S3 server (s3proxy).

The archiver and tenant snapshots are written once against ``Objects``; these tests hold both
implementations to the same answers, so a deployment may switch between them.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from engram.streams.objects import LocalObjects, MissingObject, Objects, S3Objects, check_key, open_objects

from engram.settings import Settings, load_settings


def s3_objects(s3: Settings, bucket: str) -> S3Objects:
    assert s3.s3_endpoint
    return S3Objects(
        s3.s3_endpoint,
        bucket,
        access_key=s3.s3_access_key,
        secret_key=s3.s3_secret_key,
        region=s3.s3_region,
    )


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.integration)])
def objects(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Objects]:
    if request.param == "local":
        yield LocalObjects(tmp_path / "objects")
        return
    store = s3_objects(request.getfixturevalue("s3"), f"test-{uuid.uuid4().hex[:12]}")
    yield store
    for key in store.list():
        store.delete(key)
    store.client.delete_bucket(Bucket=store.bucket)


def test_binary_round_trip(objects: Objects) -> None:
    data = bytes(range(256)) * 64 + os.urandom(1 << 20)
    objects.put("tenants/acme/snapshot.bin", data)
    objects.put("empty", b"")
    assert objects.get("tenants/acme/snapshot.bin") == data
    assert objects.get("empty") == b""
    assert objects.exists("tenants/acme/snapshot.bin") and objects.exists("empty")


def test_put_replaces_and_is_idempotent(objects: Objects) -> None:
    objects.put("a/k", b"first")
    objects.put("a/k", b"second, longer")
    assert objects.get("a/k") == b"second, longer"
    objects.put("a/k", b"second, longer")
    assert objects.get("a/k") == b"second, longer"
    assert objects.list() == ["a/k"]  # one object, and no temporary file shows


def test_put_new_never_replaces(objects: Objects) -> None:
    assert objects.put_new("once/id", b"first") is True
    assert objects.put_new("once/id", b"late") is False
    assert objects.get("once/id") == b"first"
    assert objects.list("once/") == ["once/id"]  # no temporary left beside it


def test_local_put_new_creates_once_among_racers(tmp_path: Path) -> None:
    """Of racers creating one key, exactly one does and every racer then reads its object (a hard
    link cannot replace a file). S3 servers differ: AWS honours ``If-None-Match``, s3proxy does not."""
    objects = LocalObjects(tmp_path)
    for round_ in range(20):
        key = f"race/{round_}"
        with ThreadPoolExecutor(6) as pool:
            created = list(pool.map(lambda i, key=key: objects.put_new(key, f"racer {i}".encode()), range(6)))
        assert created.count(True) == 1
        assert objects.get(key) == f"racer {created.index(True)}".encode()


def test_list_by_prefix_is_sorted(objects: Objects) -> None:
    keys = ["t/acme/2", "t/acme/10", "u/x", "t/acme-old/1", "t/acme/1", "t/beta/1", "top"]
    for i, key in enumerate(keys):
        objects.put(key, str(i).encode())
    assert objects.list() == sorted(keys)
    assert objects.list("t/acme/") == ["t/acme/1", "t/acme/10", "t/acme/2"]
    assert objects.list("t/acme") == ["t/acme-old/1", "t/acme/1", "t/acme/10", "t/acme/2"]
    assert objects.list("t/acme/1") == ["t/acme/1", "t/acme/10"]
    assert objects.list("to") == ["top"]
    assert objects.list("nothing/") == []


def test_missing_key_is_a_clear_error(objects: Objects) -> None:
    assert not objects.exists("no/such/key")
    with pytest.raises(MissingObject, match="no object with key 'no/such/key'") as caught:
        objects.get("no/such/key")
    assert isinstance(caught.value, KeyError) and caught.value.key == "no/such/key"
    objects.delete("no/such/key")  # deleting what is not there is not an error


def test_delete(objects: Objects) -> None:
    objects.put("d/one", b"1")
    objects.put("d/two", b"2")
    objects.delete("d/one")
    assert objects.list("d/") == ["d/two"] and not objects.exists("d/one")
    with pytest.raises(MissingObject):
        objects.get("d/one")
    objects.delete("d/two")
    assert objects.list() == []


HOSTILE = [
    "",
    "/etc/passwd",
    "../escape",
    "a/../../escape",
    "a/./b",
    "a//b",
    "a/",
    ".hidden",
    "a/.tmp-x",
    "a\\..\\b",
    "a\x00b",
    "line\nbreak",
    "sp ace",
    "ünïcode",
    "x" * 256,
    "/".join(["abcd"] * 206),  # 1,029 characters: over S3's 1,024-byte limit
]


@pytest.mark.parametrize("key", HOSTILE, ids=[repr(k)[:20] for k in HOSTILE])
def test_hostile_keys_are_refused(objects: Objects, key: str, tmp_path: Path) -> None:
    for call in (lambda: objects.put(key, b"x"), lambda: objects.get(key), lambda: objects.exists(key)):
        with pytest.raises(ValueError, match="object key"):
            call()
    with pytest.raises(ValueError, match="object key"):
        objects.delete(key)
    assert objects.list() == []
    assert sorted(p.name for p in tmp_path.iterdir()) in ([], ["objects"])  # nothing written beside


@pytest.mark.parametrize("prefix", ["/", "../", "a/../", "a//", ".x", "a b"])
def test_hostile_prefixes_are_refused(objects: Objects, prefix: str) -> None:
    with pytest.raises(ValueError, match="object key"):
        objects.list(prefix)


def test_valid_keys_pass_the_check() -> None:
    for key in ["a", "tenants/acme/events/000000000042.avro", "x=1/y+2/z_3-4.v1", "A" * 255]:
        assert check_key(key) == key


def test_local_put_is_atomic_and_cleans_up(tmp_path: Path) -> None:
    store = LocalObjects(tmp_path / "objects")
    store.put("deep/down/k", b"v")
    assert [p.name for p in (tmp_path / "objects" / "deep" / "down").iterdir()] == ["k"]  # no temp left
    with pytest.raises(ValueError, match="prefix of existing"):
        store.put("deep/down", b"would hide deep/down/k")
    with pytest.raises(ValueError, match="under an existing object"):
        store.put("deep/down/k/below", b"would turn k into a directory")
    store.delete("deep/down/k")
    assert list((tmp_path / "objects").iterdir()) == []  # the directories it left empty are gone


def test_open_objects_is_local_without_an_endpoint(tmp_path: Path) -> None:
    settings = load_settings(data_dir=tmp_path / "data", s3_endpoint=None)
    store = open_objects(settings)
    assert isinstance(store, LocalObjects) and store.root == tmp_path / "data" / "archive"
    store = open_objects(load_settings(archive_dir=tmp_path / "elsewhere", s3_endpoint=None))
    assert isinstance(store, LocalObjects) and store.root == tmp_path / "elsewhere"


def test_open_objects_is_s3_with_an_endpoint(s3: Settings) -> None:
    bucket = f"test-{uuid.uuid4().hex[:12]}"
    store = open_objects(s3.model_copy(update={"s3_bucket": bucket}))
    assert isinstance(store, S3Objects) and store.bucket == bucket
    store.put("k", b"v")
    again = s3_objects(s3, bucket)  # the bucket exists now: opened, not created again
    assert again.get("k") == b"v"
    again.delete("k")
    store.client.delete_bucket(Bucket=bucket)


def test_wrong_credentials_are_refused(s3: Settings) -> None:
    from botocore.exceptions import ClientError

    assert s3.s3_endpoint
    with pytest.raises(ClientError):
        S3Objects(s3.s3_endpoint, "test-denied", access_key="intruder", secret_key="guess")
