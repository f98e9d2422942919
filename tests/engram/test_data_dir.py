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

from engram.settings import REPO, load_settings

TOKEN = ["token", "acme", "--role", "operator", "--user", "dana"]


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user whose home and XDG data and cache directories are in ``tmp_path``, with no
    ENGRAM_DATA_DIR, ENGRAM_AUTH_SECRET or ENGRAM_KEYS_DIR set."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "home" / "data"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home" / "cache"))
    for name in ("ENGRAM_DATA_DIR", "ENGRAM_AUTH_SECRET", "ENGRAM_KEYS_DIR", "ENGRAM_CACHE_DIR"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path / "home"


def engram_in(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``engram ARGS`` run as a user would, from ``cwd``, with this checkout's code."""
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path}
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


def test_engram_token_from_two_directories_signs_with_one_secret(home: Path, tmp_path: Path) -> None:
    """The failure the issue names: tokens minted from /tmp were signed with a secret made there."""
    first, second = tmp_path / "here", tmp_path / "elsewhere"
    first.mkdir(), second.mkdir()
    tokens = [engram_in(cwd, *TOKEN).stdout.strip() for cwd in (first, second)]
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
    """The first line ``engram serve`` writes says where its secret and stores are (the app is
    stopped from being built: what is checked is what comes before it)."""
    import engram.api.main

    from engram.cli import main

    def refuse(*args: object) -> None:
        raise RuntimeError("not built in this test")

    monkeypatch.setattr(engram.api.main, "create_app", refuse)
    assert main(["serve"]) == 1
    first, *rest = capsys.readouterr().err.splitlines()
    data_dir = home / "data" / "engram"
    assert first == f"engram data directory: {data_dir} (the default; ENGRAM_DATA_DIR moves it)"
    assert rest[-1] == "engram serve: RuntimeError: not built in this test"
