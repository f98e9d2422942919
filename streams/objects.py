"""A small object store for the archive and tenant snapshots: a local directory or an S3 bucket.

Both implementations take the same keys and answer the same way, so the archiver and snapshots
are written once and tested against both (tests/streams/test_objects.py runs one suite over a
directory and a real S3-compatible server). :func:`open_objects` picks one from the settings.

Keys are ``/``-separated segments of letters, digits and ``_ - . = +``, none empty and none
starting with a dot (so no ``.`` or ``..``, and the local store's temporary files never look like
keys): a key is a path under the local root, and a hostile one must not step out of it. The same
rule on S3 keeps a key portable between the two.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from botocore.exceptions import ClientError

from engram.files import sync_dir
from engram.settings import Settings

SEGMENT = re.compile(r"[A-Za-z0-9_=+-][A-Za-z0-9_.=+-]{0,254}")
MAX_KEY_BYTES = 1024  # S3's limit


class MissingObject(KeyError):
    """No object has this key."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key

    def __str__(self) -> str:
        return f"no object with key {self.key!r}"


def check_key(key: str) -> str:
    """``key`` if it is a valid object key, else a ValueError saying why."""
    if not isinstance(key, str) or not key:
        raise ValueError(f"an object key must be a non-empty string, not {key!r}")
    if len(key.encode()) > MAX_KEY_BYTES:
        raise ValueError(f"object key longer than {MAX_KEY_BYTES} bytes: {key[:60]!r}…")
    if key.startswith("/"):
        raise ValueError(f"object key {key!r} is absolute; keys are relative (a/b/c)")
    for segment in key.split("/"):
        if not segment:
            raise ValueError(f"object key {key!r} has an empty segment (// or a trailing /)")
        if segment.startswith("."):
            raise ValueError(f"object key {key!r} has a segment starting with a dot ({segment!r})")
        if not SEGMENT.fullmatch(segment):
            raise ValueError(
                f"object key {key!r}: segment {segment!r} may only hold letters, digits and _ - . = + "
                "(at most 255)"
            )
    return key


def check_prefix(prefix: str) -> str:
    """``prefix`` if some valid key could start with it ("" lists everything)."""
    if prefix:
        check_key(f"{prefix}x" if prefix.endswith("/") else prefix)
    return prefix


class Objects(Protocol):
    """Whole objects by key; a put replaces the object atomically (readers see old or new)."""

    def put(self, key: str, data: bytes) -> None: ...
    def put_new(self, key: str, data: bytes) -> bool: ...
    def get(self, key: str) -> bytes: ...
    def exists(self, key: str) -> bool: ...
    def list(self, prefix: str = "") -> list[str]: ...
    def delete(self, key: str) -> None: ...


class LocalObjects:
    """Objects as files under ``root``: a put writes a temporary file beside the target, flushes it
    to disk and renames it over the target, so a crash leaves the old object or the new one.

    A key cannot be both an object and a prefix of others (``a`` and ``a/b``): here ``a`` is a file
    or a directory. Putting one when the other exists is a ValueError.
    """

    def __init__(self, root: Path) -> None:
        self.root = root

    def _path(self, key: str) -> Path:
        return self.root.joinpath(*check_key(key).split("/"))

    def put(self, key: str, data: bytes) -> None:
        self._write(key, data, os.replace)

    def put_new(self, key: str, data: bytes) -> bool:
        """Puts the object only if there is none under ``key`` (a hard link cannot replace a file):
        True if this call created it. Of processes racing to create one, exactly one does."""
        try:
            self._write(key, data, os.link)
        except FileExistsError:
            return False
        return True

    def _write(self, key: str, data: bytes, place: Callable[[Path, Path], None]) -> None:
        """``data`` written and synced beside the target, then ``place``d there (a rename replaces,
        a link does not), the directory synced: a crash leaves the old object or the new one."""
        path = self._path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError) as exc:
            raise ValueError(f"object key {key!r} is under an existing object's key") from exc
        if path.is_dir():
            raise ValueError(f"object key {key!r} is the prefix of existing objects' keys")
        tmp = path.with_name(f".tmp-{path.name}-{uuid.uuid4().hex[:8]}")
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            place(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        sync_dir(path.parent)  # the rename or link itself is durable once its dir is synced

    def get(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise MissingObject(key) from None

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def list(self, prefix: str = "") -> list[str]:
        check_prefix(prefix)
        head = prefix.rpartition("/")[0]  # walk only the deepest directory the prefix names
        start = self.root.joinpath(*head.split("/")) if head else self.root
        keys = []
        for dirpath, dirnames, filenames in os.walk(start):
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
            rel = Path(dirpath).relative_to(self.root).as_posix()
            for name in filenames:
                key = name if rel == "." else f"{rel}/{name}"
                if not name.startswith(".") and key.startswith(prefix):
                    keys.append(key)
        return sorted(keys)

    def delete(self, key: str) -> None:
        """Remove the object if present, and the directories it leaves empty."""
        path = self._path(key)
        try:
            path.unlink()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return
        parent = path.parent
        while parent != self.root:
            try:
                parent.rmdir()
            except OSError:
                break  # not empty
            parent = parent.parent


class S3Objects:
    """Objects in an S3 bucket (path-style addressing, so any S3-compatible server works); the
    bucket is created if missing. A put is one PutObject, which S3 applies atomically."""

    def __init__(
        self,
        endpoint: str | None,
        bucket: str,
        *,
        access_key: str | None = None,
        secret_key: str | None = None,
        region: str = "us-east-1",
    ) -> None:
        import boto3  # here, not at the top: a local store never pays for importing it
        from botocore.config import Config

        self.bucket = bucket
        self.client: Any = boto3.client(
            "s3",
            endpoint_url=endpoint,
            aws_access_key_id=access_key or None,  # None: boto3's own credential chain
            aws_secret_access_key=secret_key or None,
            region_name=region,
            config=Config(
                s3={"addressing_style": "path"},
                # botocore's default CRC checksum headers are refused by some S3-compatible servers
                # (s3proxy 2.6.0 answers NotImplemented); send them only where an operation needs one
                request_checksum_calculation="when_required",
                response_checksum_validation="when_required",
                retries={"max_attempts": 5, "mode": "standard"},
            ),
        )
        self._ensure_bucket(region)

    def _ensure_bucket(self, region: str) -> None:
        try:
            self.client.head_bucket(Bucket=self.bucket)
            return
        except ClientError as exc:
            if _status(exc) != 404:
                raise
        try:
            if region == "us-east-1":
                self.client.create_bucket(Bucket=self.bucket)
            else:
                self.client.create_bucket(
                    Bucket=self.bucket,
                    CreateBucketConfiguration={"LocationConstraint": region},
                )
        except ClientError as exc:  # created meanwhile by another process: fine
            if exc.response.get("Error", {}).get("Code") != "BucketAlreadyOwnedByYou":
                raise

    def put(self, key: str, data: bytes) -> None:
        self.client.put_object(Bucket=self.bucket, Key=check_key(key), Body=data)

    def put_new(self, key: str, data: bytes) -> bool:
        """A conditional PutObject (``If-None-Match: *``): False when an object is there already.
        AWS S3 honours the condition; s3proxy 2.6 ignores it (measured: six racers all "created"),
        so a key seen to exist first is False here too, and racers that must agree on what was
        created read the key back once they all have written (``streams.group``)."""
        if self.exists(key):
            return False
        try:
            self.client.put_object(Bucket=self.bucket, Key=check_key(key), Body=data, IfNoneMatch="*")
        except ClientError as exc:
            if _status(exc) in (409, 412):  # the object exists (412), or a concurrent put won (409)
                return False
            raise
        return True

    def get(self, key: str) -> bytes:
        try:
            response = self.client.get_object(Bucket=self.bucket, Key=check_key(key))
        except ClientError as exc:
            if _status(exc) == 404:
                raise MissingObject(key) from None
            raise
        return response["Body"].read()

    def exists(self, key: str) -> bool:
        try:
            self.client.head_object(Bucket=self.bucket, Key=check_key(key))
        except ClientError as exc:
            if _status(exc) == 404:
                return False
            raise
        return True

    def list(self, prefix: str = "") -> list[str]:
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=check_prefix(prefix)
        )
        return sorted(obj["Key"] for page in pages for obj in page.get("Contents", []))

    def delete(self, key: str) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=check_key(key))


def _status(exc: ClientError) -> int | None:
    return exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")


def open_objects(settings: Settings) -> Objects:
    """S3 when ``ENGRAM_S3_ENDPOINT`` and ``ENGRAM_S3_BUCKET`` are set, else the local directory
    ``ENGRAM_ARCHIVE_DIR`` (default ``DATA_DIR/archive``)."""
    if settings.s3_endpoint and settings.s3_bucket:
        return S3Objects(
            settings.s3_endpoint,
            settings.s3_bucket,
            access_key=settings.s3_access_key,
            secret_key=settings.s3_secret_key,
            region=settings.s3_region,
        )
    return LocalObjects(settings.archive_root)
