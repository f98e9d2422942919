"""An index's checkpoint: the log position its contents reflect, written atomically beside it."""

from __future__ import annotations

import json
import os
from pathlib import Path

from engram.schemas.events import Position


class IndexCheckpoint:
    """``{"partition", "offset"}`` in a small JSON file, replaced by rename (never half-written)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> Position | None:
        try:
            data = json.loads(self.path.read_text())
            return Position(int(data["partition"]), int(data["offset"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def write(self, position: Position | None) -> None:
        if position is None:
            self.path.unlink(missing_ok=True)
            return
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"partition": position.partition, "offset": position.offset}))
        os.replace(tmp, self.path)
