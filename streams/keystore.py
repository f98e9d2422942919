"""The key store: memories' data keys, kept off the log, destroyed when a memory is forgotten.

Envelope encryption, as a KMS does it: each data key is stored wrapped by a master key
(:class:`MasterKey`, the shape of KMS Encrypt/Decrypt with an encryption context), one file per
key under ``keys_dir/<tenant>/``, so the server and ``engram produce`` can share a directory
without a shared file to race on. The default master key is a local file (``master.key``, mode
0600); a production deployment implements :class:`MasterKey` over its KMS and keeps the wrapped
keys where it keeps secrets. Destroying a key overwrites and unlinks its file and leaves a
tombstone, so a destroyed key is never silently re-created: an event sealed with it again would
put new personal data on the log for a memory that was forgotten.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from engram.schemas import vocabulary as v

from engram.files import create_once, sync_dir

log = logging.getLogger(__name__)

ERASURES = "erasures"  # per tenant: one byte appended for each key destroyed
# Unwrapped keys kept, the most recently used (~350 bytes each): every memory has a key of its own,
# so an unbounded cache grew with every write for the life of the server (issue 28, ~0.35 KB per
# write per key store; the server holds two). A miss reads and unwraps one small file.
KEY_CACHE = 10_000


class KeyErased(LookupError):
    """The key was destroyed (its memory was forgotten)."""


class KeyMissing(LookupError):
    """The key was never in this key store: not destroyed (no tombstone), so not a forgotten
    memory but a wrong, lost or partly restored key store. Projecting the event as erased would
    tell the operator the data was erased when it was not: the projector waits instead, loudly."""


class MasterKey(Protocol):
    """Wraps and unwraps data keys; ``context`` binds a wrapped key to its tenant and key id."""

    def encrypt(self, plaintext: bytes, context: bytes) -> bytes: ...

    def decrypt(self, blob: bytes, context: bytes) -> bytes: ...


class LocalMasterKey:
    """A 256-bit AES-GCM key in a local file, made on first use (mode 0600)."""

    def __init__(self, path: Path) -> None:
        # made whole then linked into place: processes starting together on a fresh key volume all
        # read the one key, never a file still being written (engram.files)
        self._aead = AESGCM(create_once(path, lambda: AESGCM.generate_key(bit_length=256)))

    def encrypt(self, plaintext: bytes, context: bytes) -> bytes:
        nonce = os.urandom(12)
        return nonce + self._aead.encrypt(nonce, plaintext, context)

    def decrypt(self, blob: bytes, context: bytes) -> bytes:
        return self._aead.decrypt(blob[:12], blob[12:], context)


class KeyStore:
    """Per-memory data keys by (tenant, key id); safe to share between processes."""

    def __init__(self, directory: Path, master: MasterKey | None = None) -> None:
        self.directory = directory
        self.master = master or LocalMasterKey(directory / "master.key")
        self._cache: OrderedDict[tuple[str, str], bytes] = OrderedDict()
        self._lock = threading.Lock()

    def _path(self, tenant: str, key_id: str) -> Path:
        if not v.full_match(v.TENANT_RE, tenant):
            raise ValueError(f"invalid tenant id {tenant!r}")
        return self.directory / tenant / (hashlib.sha256(key_id.encode()).hexdigest()[:40] + ".key")

    @staticmethod
    def _context(tenant: str, key_id: str) -> bytes:
        return f"{tenant}\x00{key_id}".encode()

    def data_key(self, tenant: str, key_id: str, *, create: bool = False) -> bytes | None:
        """The key, made if ``create`` and absent; None if it was destroyed. Raises KeyErased when
        it was destroyed and ``create`` asks for it again, KeyMissing when it is absent without
        having been destroyed and ``create`` is not asked."""
        with self._lock:
            found = self._cache.get((tenant, key_id))
            if found is not None:
                self._cache.move_to_end((tenant, key_id))
                return found
            path = self._path(tenant, key_id)
            if path.exists():
                key = self.master.decrypt(path.read_bytes(), self._context(tenant, key_id))
            elif not create:
                if path.with_suffix(".erased").exists():
                    return None
                raise KeyMissing(
                    f"the key of {key_id} of tenant {tenant} is not in the key store {self.directory} "
                    "and was never destroyed there: this key store is not the one the log was "
                    "written with, or lost keys (ENGRAM_KEYS_DIR)"
                )
            elif path.with_suffix(".erased").exists():
                raise KeyErased(f"the key of {key_id} was destroyed: that memory was forgotten")
            else:
                key = self._make(tenant, key_id)
            self._remember(tenant, key_id, key)
            return key

    def make_many(self, wanted: Iterable[tuple[str, str]]) -> None:
        """Make every (tenant, key id) in ``wanted`` that does not exist yet; one that was destroyed
        is left alone (sealing with it is refused, as ``data_key`` says). Each key's file is synced
        as it is written, its directory once for all of them (a key made alone syncs both)."""
        with self._lock:
            todo = [
                (t, k)
                for t, k in dict.fromkeys(wanted)
                if (t, k) not in self._cache
                and not (path := self._path(t, k)).exists()
                and not path.with_suffix(".erased").exists()
            ]
            if len(todo) < 2:
                return  # one key is made as it is sealed
            made = [self._make(tenant, key_id, sync_parent=False) for tenant, key_id in todo]
            for directory in {self._path(tenant, key_id).parent for tenant, key_id in todo}:
                sync_dir(directory)
            for (tenant, key_id), key in zip(todo, made, strict=True):
                self._remember(tenant, key_id, key)

    def _make(self, tenant: str, key_id: str, *, sync_parent: bool = True) -> bytes:
        """A new data key, durable before any event sealed with it is on the log (``make_many``
        syncs the directory for a batch); if another process made it first, theirs is the key."""
        context = self._context(tenant, key_id)
        wrapped = create_once(
            self._path(tenant, key_id),
            lambda: self.master.encrypt(AESGCM.generate_key(bit_length=256), context),
            sync_parent=sync_parent,
        )
        return self.master.decrypt(wrapped, context)

    def _remember(self, tenant: str, key_id: str, key: bytes) -> None:
        self._cache[(tenant, key_id)] = key
        self._cache.move_to_end((tenant, key_id))
        if len(self._cache) > KEY_CACHE:
            self._cache.popitem(last=False)

    def destroy(self, tenant: str, key_id: str) -> bool:
        """Erase the key (idempotent); True if there was one to erase."""
        with self._lock:
            self._cache.pop((tenant, key_id), None)
            path = self._path(tenant, key_id)
            tomb = path.with_suffix(".erased")
            if not tomb.exists():
                tomb.parent.mkdir(parents=True, exist_ok=True)
                tomb.touch()
                with open(self.directory / tenant / ERASURES, "ab") as f:  # one byte per erasure
                    f.write(b"x")
                    f.flush()
                    os.fsync(f.fileno())
            if not path.exists():
                return False
            with open(path, "r+b") as f:  # best effort on flash and copy-on-write disks
                f.write(b"\x00" * len(path.read_bytes()))
                f.flush()
                os.fsync(f.fileno())
            path.unlink()
            return True


def erasures(keys_dir: Path, tenant: str) -> int:
    """How many of the tenant's keys were ever destroyed: a copy of its memories made when this
    was lower may hold words that are erased now (any process may ask; it only grows)."""
    try:
        return (keys_dir / tenant / ERASURES).stat().st_size
    except FileNotFoundError:
        return 0


class ReadOnlyKeys:
    """A key store that reads but never makes or destroys keys: replay's (it rebuilds, it does
    not act; the live projector destroyed what was forgotten). A key it cannot find was destroyed
    or is missing: both read as erased here, a missing one said in the log (the live projector is
    where a missing key stops the projection)."""

    def __init__(self, keys: KeyStore) -> None:
        self._keys = keys

    def data_key(self, tenant: str, key_id: str, *, create: bool = False) -> bytes | None:
        try:
            return self._keys.data_key(tenant, key_id)
        except KeyMissing as exc:
            log.error("%s; a replay reads it as erased", exc)
            return None

    def destroy(self, tenant: str, key_id: str) -> bool:
        return False
