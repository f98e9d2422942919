"""Files made once and shared by processes: a secret, a master key, an instance id.

Processes started together on one fresh directory (compose starts two workers on one key volume)
must all read the same bytes, and none may read a file before its bytes are there. So the bytes
are written to a file of this process's own, made durable, then linked into place: ``link`` is
atomic and fails if the name exists, so the first process's file wins whole and every other
process reads that one. Creating the name first and writing it after (``O_EXCL`` then ``write``)
let a second process read an empty file.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Callable
from pathlib import Path


def create_once(
    path: Path, make: Callable[[], bytes], *, mode: int = 0o600, sync_parent: bool = True
) -> bytes:
    """The file's bytes: made by ``make`` if the file is absent, by whichever process links first.
    ``sync_parent`` False: the caller makes the directory's new entry durable (``sync_dir``), once
    for many files, before it relies on any of them."""
    with contextlib.suppress(FileNotFoundError):
        return _read_whole(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    made = make()
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(made)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:  # another process linked first: theirs is read
            made = b""
    finally:
        tmp.unlink(missing_ok=True)
    if sync_parent:
        sync_dir(path.parent)
    return made or _read_whole(path)


def _read_whole(path: Path) -> bytes:
    data = path.read_bytes()
    if not data:  # only a file made by hand, or by an older engram's create-then-write, is empty
        raise ValueError(f"{path} is empty: remove it to have a new one made, or restore it")
    return data


def sync_dir(directory: Path) -> None:
    """Make a directory's entries durable (a name linked or unlinked in it)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
