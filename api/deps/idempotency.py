"""The Idempotency-Key header: a retried write carries the same key, so it names the same event."""

from __future__ import annotations

import re
import uuid
from typing import Annotated

from engram.api.errors import problem
from fastapi import Header

IDEMPOTENCY_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "urn:engram:idempotency-key")
CANONICAL_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")

IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        min_length=1,
        max_length=255,
        pattern=r"^[ -~]+$",
        description="Makes a retried write harmless: the event id is this UUID, or a UUIDv5 of the "
        "tenant and this key. Printable ASCII, at most 255 characters.",
    ),
]


def event_id_for(tenant: str, key: str | None, given: uuid.UUID | None) -> uuid.UUID | None:
    """The event id of a write: the Idempotency-Key's, the body's ``event_id``, or None (minted)."""
    if key is None:
        return given
    derived = (
        uuid.UUID(key)
        if CANONICAL_UUID.fullmatch(key)
        else uuid.uuid5(IDEMPOTENCY_NAMESPACE, f"{tenant}\n{key}")
    )
    if given is not None and given != derived:
        raise problem(
            422,
            "the Idempotency-Key header and the body's event_id name different events",
            ["header", "Idempotency-Key"],
            "idempotency_key_mismatch",
        )
    return derived
