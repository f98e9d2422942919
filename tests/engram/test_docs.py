"""The README stays true to the code: every setting documented with its default, every command shown."""

from __future__ import annotations

import re
from pathlib import Path

from engram.cli import build_parser
from engram.settings import Settings

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def test_every_setting_is_in_the_configuration_table() -> None:
    documented = set(re.findall(r"^\| `(ENGRAM_[A-Z0-9_]+)` \|", README, re.M))
    expected = {f"ENGRAM_{name.upper()}" for name in Settings.model_fields}
    assert documented == expected


def test_documented_defaults_match_the_code() -> None:
    rows = dict(re.findall(r"^\| `(ENGRAM_[A-Z0-9_]+)` \| `([^`]*)` \|", README, re.M))
    defaults = Settings.model_construct()
    for name, shown in rows.items():
        value = getattr(defaults, name.removeprefix("ENGRAM_").lower())
        if isinstance(value, Path):
            continue  # paths are described in words (relative to the source tree or home)
        assert str(value) == shown, name


def test_every_cli_command_is_in_the_readme() -> None:
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    for command in sub.choices:  # type: ignore[union-attr]
        assert f"engram {command}" in README, command
