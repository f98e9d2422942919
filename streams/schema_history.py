"""The Envelope's schema history: every version ever written, so old records on the log stay readable.

A record names its writer schema only by fingerprint (CRC-64-AVRO of the Parsing Canonical Form),
so the codec can decode it only while that schema is at hand. ``schemas/avro/history/`` holds one
file per Envelope version, ``<fingerprint hex>.avsc``, each the whole Envelope with every named type
it references inlined, so a file stands alone whatever happens to the sibling ``.avsc`` files later.

The files keep what Parsing Canonical Form drops (``logicalType``, defaults, docs): fastavro applies
logical types from the *writer* schema, so a canonical-form-only writer would decode ``occurred_at``
as a bare long. The file name is still the fingerprint of the content's canonical form.

After editing ``engram.events.Envelope.avsc`` or any schema it references, run
``engram schema-history`` (``python -m streams.schema_history``) and commit the new file; the unit
tests (and ``--check``) fail until then.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import engram.schemas as schemas
from fastavro.schema import fingerprint, load_schema, to_parsing_canonical_form

FIX = "run `engram schema-history` and commit schemas/avro/history/"


def _plain(node: Any) -> Any:
    """The schema without fastavro's bookkeeping keys (``__fastavro_parsed``, ``__named_schemas``)."""
    if isinstance(node, dict):
        return {k: _plain(v) for k, v in node.items() if not k.startswith("__")}
    if isinstance(node, list):
        return [_plain(v) for v in node]
    return node


def entry_for(schema: Any) -> tuple[str, str]:
    """(fingerprint hex, file text) for a loaded or parsed schema."""
    canonical = to_parsing_canonical_form(schema)
    return fingerprint(canonical, "CRC-64-AVRO"), json.dumps(_plain(schema), indent=2) + "\n"


def current_entry(schema_dir: Path | None = None) -> tuple[str, str]:
    """The current Envelope (from ``schema_dir``, default the package's): fingerprint and file text."""
    return entry_for(load_schema(str((schema_dir or schemas.avro_dir()) / schemas.ENVELOPE_FILE)))


def recorded(history_dir: Path | None = None) -> set[str]:
    """The fingerprints the history holds (by file name)."""
    directory = history_dir or schemas.history_dir()
    return {p.stem for p in directory.glob("*.avsc")} if directory.is_dir() else set()


def missing(history_dir: Path | None = None, schema_dir: Path | None = None) -> list[str]:
    """Fingerprints of current schemas the history lacks: ``[]`` when it is up to date."""
    fp, _ = current_entry(schema_dir)
    return [] if fp in recorded(history_dir) else [fp]


def record(history_dir: Path | None = None, schema_dir: Path | None = None) -> Path | None:
    """Add the current Envelope to the history; the new file, or ``None`` if it was there already."""
    directory = history_dir or schemas.history_dir()
    fp, text = current_entry(schema_dir)
    target = directory / f"{fp}.avsc"
    if target.exists():
        return None
    directory.mkdir(parents=True, exist_ok=True)
    partial = directory / f".{fp}.avsc.partial"  # not *.avsc: a reader never sees half a file
    partial.write_text(text)
    os.replace(partial, target)
    return target


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="engram schema-history",
        description="Record the current Envelope schema in schemas/avro/history/ (idempotent).",
    )
    p.add_argument("--check", action="store_true", help="only check; exit 1 if the history lacks it")
    p.add_argument("--schema-dir", type=Path, default=None, help=argparse.SUPPRESS)
    p.add_argument("--history-dir", type=Path, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    history = args.history_dir or schemas.history_dir()
    if args.check:
        lacking = missing(history, args.schema_dir)
        if lacking:
            print(
                f"schema history {history} lacks the current Envelope (fingerprint {lacking[0]}), "
                f"so records written with it become unreadable once the schema changes again: "
                f"{FIX}",
                file=sys.stderr,
            )
            return 1
        print(f"schema history up to date ({len(recorded(history))} version(s) in {history})")
        return 0
    written = record(history, args.schema_dir)
    if written is None:
        print(f"current Envelope already recorded in {history}")
    else:
        print(f"recorded {written}; commit it with the schema change")
    return 0


if __name__ == "__main__":
    sys.exit(main())
