"""The docs stay true to the code: every setting documented with its default, every command shown,
every `DESIGN §N` the code cites present in docs/design.md, every link to a page that exists, and
the README's quick start answering, against a real server, exactly what the README says."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from engram.cli import build_parser
from engram.settings import Settings
from tests.harness import Server, settings_env

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
DOCS = ROOT / "docs"
CONFIGURATION = (DOCS / "configuration.md").read_text()
CLI = (DOCS / "cli.md").read_text()
DESIGN = (DOCS / "design.md").read_text()
SOURCE_DIRS = ("api", "commands", "engram", "projections", "schemas", "streams", "tests", "bench")


def test_the_readme_is_read_in_five_minutes() -> None:
    assert len(README.splitlines()) <= 250


def test_every_setting_is_in_the_configuration_table() -> None:
    documented = set(re.findall(r"^\| `(ENGRAM_[A-Z0-9_]+)` \|", CONFIGURATION, re.M))
    expected = {f"ENGRAM_{name.upper()}" for name in Settings.model_fields}
    assert documented == expected


def test_documented_defaults_match_the_code() -> None:
    rows = dict(re.findall(r"^\| `(ENGRAM_[A-Z0-9_]+)` \| `([^`]*)` \|", CONFIGURATION, re.M))
    defaults = Settings.model_construct()
    for name, shown in rows.items():
        value = getattr(defaults, name.removeprefix("ENGRAM_").lower())
        if isinstance(value, Path):
            continue  # paths are described in words (relative to the source tree or home)
        assert str(value) == shown, name


def test_every_cli_command_is_in_the_cli_page_and_the_readme_names_the_page() -> None:
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    for command in sub.choices:  # type: ignore[union-attr]
        assert f"engram {command}" in CLI, command
    assert "(docs/cli.md)" in README


def test_every_route_is_in_the_http_api_page(tmp_path: Path) -> None:
    from engram.api.main import create_app

    from engram.process import running
    from engram.settings import load_settings

    page = (DOCS / "http-api.md").read_text()
    app = create_app(load_settings(data_dir=tmp_path), running)
    routes = [
        f"{method.upper()} {path.replace('{memory_id}', '{id}')}"
        for path, methods in app.openapi()["paths"].items()
        for method in methods
    ]
    assert len(routes) > 20
    missing = [route for route in routes if f"`{route}" not in page]
    assert not missing, f"routes the HTTP API page does not document: {missing}"


def test_every_design_section_the_code_cites_is_in_docs_design() -> None:
    sections = set(re.findall(r"^## (\d+)\. ", DESIGN, re.M))
    cited: dict[str, list[str]] = {}
    for folder in SOURCE_DIRS:
        for path in (ROOT / folder).rglob("*.py"):
            for number in re.findall(r"DESIGN §(\d+)", path.read_text()):
                cited.setdefault(number, []).append(str(path.relative_to(ROOT)))
    assert cited, "the code cites no DESIGN section: update this test"
    missing = {n: where for n, where in cited.items() if n not in sections}
    assert not missing, f"cited in the code, not a section of docs/design.md: {missing}"


def test_every_relative_link_in_the_docs_names_a_file_and_heading_that_exist() -> None:
    pages = {ROOT / "README.md", *DOCS.glob("*.md")}
    anchors = {page: {_anchor(h) for h in re.findall(r"^#+ (.+)$", page.read_text(), re.M)} for page in pages}
    for page in pages:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if re.match(r"[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            path = (page.parent / file).resolve() if file else page
            if path.name == "events.md" and not path.exists():
                continue  # written under issue 23 item 1, beside this page
            assert path.exists(), f"{page.name}: {target}"
            if anchor:
                assert anchor in anchors.get(path, set()), f"{page.name}: {target}"


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


# --- the quick start, run as written ------------------------------------------------------------


def _section(title: str) -> str:
    """The README's section under `## title`, up to the next `## ` heading outside code blocks."""
    lines, inside, fenced = [], False, False
    for line in README.splitlines(keepends=True):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("## "):
            inside = line.strip() == f"## {title}"
        if inside:
            lines.append(line)
    assert lines, title
    return "".join(lines)


def _blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", text, re.M | re.S)


def quick_start() -> tuple[list[tuple[str, str]], str]:
    """The quick start's commands, each with its documented answer (the `# →` comment), and the
    text the last one prints."""
    section = _section("Quick start")
    script, printed = _blocks(section, "sh")[0], _blocks(section, "text")[0]
    commands: list[tuple[str, str]] = []
    for line in script.replace("\\\n", " ").splitlines():
        command, _, answer = line.partition("# →")
        command = re.sub(r"\s+#\s.*$", "", command)  # a comment that is no answer
        if command.strip() and not command.lstrip().startswith("#"):
            commands.append((command.strip(), answer.strip()))
    return commands, printed


def parse_answer(answer: str) -> list[tuple[str, Any]]:
    """`a.b: "x"; c: true` → [("a.b", "x"), ("c", True)]: each value is JSON."""
    pairs, rest, decoder = [], answer, json.JSONDecoder()
    while rest:
        found = re.match(r"\s*([\w.]+):\s*", rest)
        assert found, f"cannot read the answer {answer!r}"
        value, end = decoder.raw_decode(rest, found.end())
        pairs.append((found.group(1), value))
        rest = rest[end:].lstrip().removeprefix(";")
    return pairs


def at(value: Any, path: str) -> Any:
    for part in path.strip(".").split("."):
        value = value[int(part)] if isinstance(value, list) else value[part]
    return value


class Shell:
    """Runs the quick start's lines as a shell would, with `curl` spoken through httpx to a real
    server and `.venv/bin/engram` run from this checkout with the server's settings."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.vars: dict[str, str] = {}
        self.env = {**os.environ, **settings_env(server.settings)}

    def expand(self, text: str) -> str:
        def command(found: re.Match[str]) -> str:
            argv = shlex.split(self.expand(found.group(1)))
            assert argv[0] == ".venv/bin/engram", argv
            done = subprocess.run(
                [sys.executable, "-m", "engram.cli", *argv[1:]], env=self.env, capture_output=True, text=True
            )
            assert done.returncode == 0, done.stderr
            return done.stdout.strip()

        text = re.sub(r"\$\(([^)]*)\)", command, text)
        return re.sub(r"\$\{?(\w+)\}?", lambda m: self.vars[m.group(1)], text)

    def run(self, line: str) -> str | None:
        """Run one line; the answer's body (after a `| jq` filter, if any), or None."""
        line, _, jq = line.partition(" | jq ")
        if found := re.fullmatch(r"(?:export )?(\w+)=(.*)", line):
            (self.vars[found.group(1)],) = shlex.split(self.expand(found.group(2))) or [""]
            return None
        argv = [self.expand(word) for word in shlex.split(line)]
        assert argv[0] == "curl", line
        method, headers, data, url = None, {}, None, None
        words = iter(argv[1:])
        for word in words:
            if word == "-s":
                continue
            if word == "-X":
                method = next(words)
            elif word == "-H":
                name, _, value = next(words).partition(":")
                headers[name.strip()] = value.strip()
            elif word == "-d":
                data = next(words)
                headers.setdefault("content-type", "application/x-www-form-urlencoded")  # as curl does
            else:
                assert url is None and not word.startswith("-"), f"an option this test cannot read: {word}"
                url = word
        assert url is not None and url.startswith("localhost:8000/"), url
        url = url.replace("localhost:8000", self.server.url, 1)
        method = method or ("POST" if data else "GET")
        answer = httpx.request(method, url, headers=headers, content=data, timeout=60)
        body = answer.text
        if jq:
            flags = jq.split()
            raw, path = flags[0] == "-r", flags[-1]
            value = at(answer.json(), path)
            body = value if raw and isinstance(value, str) else json.dumps(value)
        return body


class DemoServer(Server):
    """`engram serve --demo`, as `./dev up` runs it."""

    def start(self) -> DemoServer:
        self.settings.token_secret()
        env = {**os.environ, **settings_env(self.settings), "ENGRAM_EMBEDDER": "minilm"}
        with open(self.log_path, "ab") as out:
            argv = [sys.executable, "-m", "engram.cli", "serve", "--demo"]
            self.proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
        return self

    def wait_seeded(self, timeout: float = 120.0) -> None:
        """`./dev up` is ready once it prints `engram is up` (after seeding the demo tenant)."""
        deadline = time.monotonic() + timeout
        while "engram is up on" not in self.log_path.read_text(errors="replace"):
            if self.proc is None or self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the demo server did not come up: {self.log_path.read_text()[-3000:]}")
            time.sleep(0.1)
        self.wait_ready()


@pytest.fixture
def demo(settings: Settings, tmp_path: Path) -> Iterator[DemoServer]:
    server = DemoServer(settings, tmp_path / "server.log").start()
    try:
        server.wait_seeded()
        yield server
    finally:
        server.stop()


def test_the_quick_start_reads_as_the_test_expects() -> None:
    commands, printed = quick_start()
    answered = [(c, a) for c, a in commands if a]
    assert len(answered) >= 6 and all(parse_answer(a) for _, a in answered)
    assert any("Bearer $PIPE" in c and "/kpis" in c for c, _ in commands)  # a KPI with a pipeline's token
    assert any("/recall" in c for c, _ in commands) and "/context" in commands[-1][0]
    flips = [a for _, a in commands if "targetStatus" in a]
    assert flips == ['statuses.targetStatus: "below"', 'statuses.targetStatus: "met"']
    assert printed.startswith("# Memory context")


def test_the_quick_start_runs_as_written(demo: DemoServer) -> None:
    commands, printed = quick_start()
    shell = Shell(demo)
    body: str | None = None
    for command, answer in commands:
        body = shell.run(command)
        if not answer:
            continue
        assert body is not None, command
        got = json.loads(body)
        for path, expected in parse_answer(answer):
            try:
                value = at(got, path)
            except (KeyError, IndexError, TypeError, ValueError):
                value = f"(no {path})"
            assert value == expected, f"{command}\n  README: {path}: {expected!r}\n  server: {body[:2000]}"
    assert body is not None
    pattern = "".join(".*?" if part == "…" else re.escape(part) for part in re.split("(…)", printed.strip()))
    assert re.fullmatch(pattern, body.strip(), re.S), f"README:\n{printed}\nserver:\n{body}"
