"""The contracts: Avro event schemas (``avro/``), the shared vocabulary and the typed events.

Where the schema files are is said here once; importing this package reads nothing else.
"""

from importlib import resources
from pathlib import Path

ENVELOPE_FILE = "engram.events.Envelope.avsc"


def avro_dir() -> Path:
    """``schemas/avro`` where the code runs from (a source checkout or an installed wheel)."""
    return Path(str(resources.files(__name__) / "avro"))


def history_dir() -> Path:
    """Every Envelope version ever released, one file per fingerprint (``engram schema-history``)."""
    return avro_dir() / "history"
