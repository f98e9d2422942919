"""examples/agent_loop.py, run as a user runs it (its own process, an agent's token acting for
dana) against a real, freshly seeded `engram serve --demo`: it prints what docs/agents.md says,
line by line, and what it wrote is in the graph (the decision relied on the Meta cap)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from engram.settings import Settings
from tests.engram.test_agents_guide import agent_token, example_output, matches, up_demo
from tests.engram.test_docs import DemoServer

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def demo(broker: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoServer]:
    server = up_demo(broker, tmp_path_factory.mktemp("loop"))
    yield server
    server.stop()


def test_the_agent_loop_prints_what_the_guide_says(demo: DemoServer) -> None:
    token = agent_token(demo.settings)
    env = {**os.environ, "ENGRAM_URL": demo.url, "ENGRAM_TOKEN": token}
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "agent_loop.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    printed, expected = done.stdout.strip().splitlines(), example_output().strip().splitlines()
    assert len(printed) == len(expected), done.stdout
    for got, want in zip(printed, expected, strict=True):
        assert matches(want, got), f"guide: {want}\nprinted: {got}"
    assert "breach: breaches meta-cap" in printed[2] and "105%" in printed[2]

    # what it wrote is there: the decision, relying on the cap, as the operator sees it
    relied = demo.http.get(f"{demo.url}/v1/tenants/acme/decisions", params={"relied_on": "meta-cap"}).json()
    (decision,) = relied["data"]
    assert decision["actor"] == {"id": "assistant", "role": "agent"} and decision["acting_for"] == "dana"
    assert decision["spend"]["amount"] == 6000 and decision["live_data"] == ["spend:meta:USD:2026-11"]
