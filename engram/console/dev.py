"""Developers' commands: the schema history check and the benchmarks (from a checkout)."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from engram.settings import Settings


def schema_history(settings: Settings, args: argparse.Namespace) -> int:
    from engram.streams import schema_history

    return schema_history.main(["--check"] if args.check else [])


def bench(settings: Settings, args: argparse.Namespace) -> int:
    script = Path("bench") / f"{args.name}.py"
    if not script.exists():
        print(f"no benchmark {script} here: benchmarks run from a source checkout (cd into it); "
              "they are not part of the installed package", file=sys.stderr)  # fmt: skip
        return 2
    # as a module, so the checkout is on sys.path: a benchmark may import another (bench.recall)
    return subprocess.call([sys.executable, "-m", f"bench.{args.name}", *args.bench_args])
