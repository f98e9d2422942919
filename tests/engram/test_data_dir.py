"""The data directory is one fixed place, whatever directory a command runs from.

It was ``.engram/data`` relative to the working directory, so ``cd /tmp && engram token …`` made a
second ``auth-secret`` there and its tokens were refused by the server.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import platformdirs
import pytest
from engram.api.auth import Verifier

import engram.settings
from engram.settings import REPO, load_settings
from tests.layout import installed_layout

TOKEN = ["token", "acme", "--role", "operator", "--user", "dana"]


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user of an installed engram (not a checkout's) whose home and XDG data and cache
    directories are in ``tmp_path``, with no ENGRAM_DATA_DIR, ENGRAM_AUTH_SECRET or ENGRAM_KEYS_DIR
    set."""
    monkeypatch.setattr(engram.settings, "REPO", tmp_path / "site-packages")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "home" / "data"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home" / "cache"))
    for name in ("ENGRAM_DATA_DIR", "ENGRAM_AUTH_SECRET", "ENGRAM_KEYS_DIR", "ENGRAM_CACHE_DIR"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path / "home"


def installed_engram_in(cwd: Path, scratch: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``engram ARGS`` of an installed engram (this checkout's code laid out as the wheel holds
    it, so not a checkout's), run as a user would, from ``cwd``."""
    root = scratch / "site-packages"
    if not root.exists():
        installed_layout(root)
    env = {**os.environ, "PYTHONPATH": str(root)}
    done = subprocess.run(
        [sys.executable, "-m", "engram.cli", *args], cwd=cwd, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return done


def test_an_unset_data_dir_is_the_platforms_user_data_directory(home: Path) -> None:
    settings = load_settings()
    assert settings.data_dir == platformdirs.user_data_path("engram", appauthor=False)
    assert settings.data_dir == home / "data" / "engram"  # XDG_DATA_HOME on Linux
    assert settings.cache_dir == home / "cache" / "engram"
    assert (settings.key_store_dir, settings.archive_root) == (
        home / "data/engram/keys",
        home / "data/engram/archive",
    )
    assert (
        "the default" in settings.data_dir_notice()
        and str(home / "data" / "engram") in settings.data_dir_notice()
    )


def test_a_relative_data_dir_is_made_absolute_once(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A relative ENGRAM_DATA_DIR (or keys or archive dir) names one directory for the whole process,
    and for the broker and s3proxy it hands the path to, which run elsewhere."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ENGRAM_DATA_DIR", "rel")
    monkeypatch.setenv("ENGRAM_KEYS_DIR", "~/keys")
    settings = load_settings()
    assert (settings.data_dir, settings.key_store_dir) == (tmp_path / "rel", home / "keys")
    assert settings.data_dir_notice() == f"engram data directory: {tmp_path / 'rel'} (ENGRAM_DATA_DIR)"


def test_the_checkouts_engram_in_a_second_shell_signs_with_the_secret_dev_up_serves_with(
    tmp_path: Path,
) -> None:
    """The quick start from a second shell (issue 34): ``./dev up`` serves with ENGRAM_DATA_DIR set
    to the checkout's ``.engram/data``; ``.venv/bin/engram token …`` in another terminal, from any
    directory and with nothing of engram's set, signed with the user data directory's secret, and
    every request answered "Signature verification failed"."""
    engram_bin = Path(sys.executable).with_name("engram")
    clean = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path / "home"), "LANG": "C.UTF-8"}
    tokens = []
    for cwd in (tmp_path / "here", tmp_path / "elsewhere"):
        cwd.mkdir()
        done = subprocess.run([engram_bin, *TOKEN], cwd=cwd, env=clean, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        tokens.append(done.stdout.strip())
        assert not (cwd / ".engram").exists()
    assert not (tmp_path / "home" / ".local").exists()  # no user data directory was made
    dev_up = Verifier(load_settings(data_dir=REPO / ".engram" / "data", auth_secret=None))  # ./dev's
    for token in tokens:
        assert dev_up.verify(token).principal.user == "dana"


def test_an_installed_engram_from_two_directories_signs_with_one_secret(home: Path, tmp_path: Path) -> None:
    """The failure of issue 23: tokens minted from /tmp were signed with a secret made there."""
    first, second = tmp_path / "here", tmp_path / "elsewhere"
    first.mkdir(), second.mkdir()
    tokens = [installed_engram_in(cwd, tmp_path, *TOKEN).stdout.strip() for cwd in (first, second)]
    data_dir = home / "data" / "engram"
    assert (data_dir / "auth-secret").is_file()
    assert not (first / ".engram").exists() and not (second / ".engram").exists()
    # both verify against the secret a server started with the same environment reads
    server = Verifier(load_settings())
    assert load_settings().data_dir == data_dir
    for token in tokens:
        assert server.verify(token).principal.user == "dana"


def test_engram_serve_prints_its_data_directory_first(
    home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The first line ``engram serve`` writes says where its secret and stores are (it is stopped
    at its first step, before the broker: what is checked is what comes before it, and the
    broker's default topics are never touched, nor bound to this test's key store)."""
    import engram.streams.topics

    from engram.cli import main

    async def refuse(*args: object) -> None:
        raise RuntimeError("stopped in this test")

    monkeypatch.setattr(engram.streams.topics, "ensure_topics", refuse)
    assert main(["serve"]) == 1
    first, *rest = capsys.readouterr().err.splitlines()
    data_dir = home / "data" / "engram"
    assert first == f"engram data directory: {data_dir} (the default; ENGRAM_DATA_DIR moves it)"
    assert rest[-1] == "engram serve: RuntimeError: stopped in this test"
