"""Developers' commands: the schema history check and the benchmarks (from a checkout)."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from engram.settings import Settings


def schema_history(settings: Settings, args: argparse.Namespace) -> int:
    from streams import schema_history

    return schema_history.main(["--check"] if args.check else [])


def bench(settings: Settings, args: argparse.Namespace) -> int:
    script = Path("bench") / f"{args.name}.py"
    if not script.exists():
        print(f"no benchmark {script} (run from the repository root)", file=sys.stderr)
        return 2
    return subprocess.call([sys.executable, str(script), *args.bench_args])
