"""Files made once and shared: processes starting together on a fresh directory (compose starts two
workers on one key volume) all read the same master key, auth secret and instance id, and none
reads a file before its bytes are there (it did: ``AESGCM key must be 128, 192, or 256 bits``)."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

import pytest
from engram.streams.keystore import KeyStore

from engram.files import create_once
from engram.settings import load_settings

PROCESSES = 8
ROUNDS = 20


def start_together(
    gate: multiprocessing.synchronize.Barrier, directory: str, out: multiprocessing.Queue
) -> None:
    """One process starting on the shared directory: what it read, or the error it met."""
    try:
        gate.wait(timeout=30)
        keys = KeyStore(Path(directory) / "keys")
        sealed = keys.master.encrypt(b"probe", b"ctx")
        settings = load_settings(data_dir=Path(directory), auth_secret=None)
        out.put((settings.token_secret(), settings.projector_group(), sealed))
    except BaseException as e:  # reported to the test, which names it
        out.put(repr(e))


def test_eight_processes_starting_at_once_on_a_fresh_directory_share_one_key_secret_and_id(
    tmp_path: Path,
) -> None:
    ctx = multiprocessing.get_context("fork")
    for round_ in range(ROUNDS):
        directory = tmp_path / f"round-{round_}"
        gate, out = ctx.Barrier(PROCESSES), ctx.Queue()
        procs = [
            ctx.Process(target=start_together, args=(gate, str(directory), out)) for _ in range(PROCESSES)
        ]
        for p in procs:
            p.start()
        seen = [out.get(timeout=60) for _ in procs]
        for p in procs:
            p.join(timeout=30)
        errors = [s for s in seen if isinstance(s, str)]
        assert not errors, f"round {round_}: {errors}"
        assert len({(secret, group) for secret, group, _ in seen}) == 1, f"round {round_}: {seen}"
        master = KeyStore(directory / "keys").master  # every process sealed with the one key
        assert all(master.decrypt(sealed, b"ctx") == b"probe" for _, _, sealed in seen)
        left = [p.name for p in directory.rglob("*") if p.name.endswith(".tmp")]
        assert not left, f"round {round_}: temporary files left: {left}"
    assert os.stat(tmp_path / "round-0" / "keys" / "master.key").st_mode & 0o777 == 0o600
    assert os.stat(tmp_path / "round-0" / "auth-secret").st_mode & 0o777 == 0o600


def test_a_file_made_once_is_read_back_and_never_made_again(tmp_path: Path) -> None:
    made: list[int] = []

    def make() -> bytes:
        made.append(1)
        return b"first"

    path = tmp_path / "deep" / "secret"
    assert create_once(path, make) == b"first"
    assert create_once(path, lambda: b"second") == b"first"
    assert made == [1] and list(path.parent.iterdir()) == [path]


def test_an_empty_file_is_an_error_that_names_it_not_a_key_of_zero_bits(tmp_path: Path) -> None:
    (tmp_path / "master.key").touch()
    with pytest.raises(ValueError, match=r"master\.key is empty"):
        KeyStore(tmp_path)
