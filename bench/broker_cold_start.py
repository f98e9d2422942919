"""Seconds from `engram kafka start` to a broker that answers, on fresh storage (jars cached).

Runs a second broker on free ports in a temporary directory, so a running one is not disturbed.
Prints one JSON object.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

from engram.streams import kafka_local

from engram.settings import load_settings
from tests.harness import free_port


def main(runs: int = 3) -> None:
    base = load_settings()
    t0 = time.monotonic()
    kafka_local.ensure_jars(base)
    fetch = time.monotonic() - t0
    cold, warm = [], []
    for _ in range(runs):
        with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
            s = load_settings(
                data_dir=Path(tmp),
                cache_dir=base.cache_dir,
                kafka_bootstrap=f"127.0.0.1:{free_port()}",
                kafka_controller_port=free_port(),
            )
            cold.append(kafka_local.start(s))
            kafka_local.stop(s)
            warm.append(kafka_local.start(s))  # existing storage: no format step
            kafka_local.stop(s)
    print(
        json.dumps(
            {
                "benchmark": "broker_cold_start",
                "jar_fetch_or_cache_check_seconds": round(fetch, 2),
                "fresh_storage_seconds": [round(x, 2) for x in cold],
                "restart_existing_storage_seconds": [round(x, 2) for x in warm],
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
