"""In-process news of what the projector has handled, for ``?wait=true`` and readiness."""

from __future__ import annotations

import asyncio
from collections import Counter, OrderedDict, deque
from collections.abc import Iterable
from dataclasses import dataclass

from engram.projections.tenant_graph import Outcome


@dataclass(frozen=True)
class Handled:
    tenant: str | None
    outcome: Outcome


class Progress:
    """Remembers the outcome of recently handled records and wakes whoever waits for one.

    ``last_offset`` is a watermark per partition (readiness, read-your-writes): every record at or
    below it is handled. Records announced with ``taken`` may be handled in any order (a batch's
    runs commit tenant by tenant): the watermark passes one only once every record taken before
    it is handled too."""

    def __init__(self, *, keep: int = 50_000) -> None:
        self.keep = keep
        self.last_offset: dict[int, int] = {}
        self.counts: Counter[str] = Counter()  # outcomes since this process started
        self._batches: Counter[int] = Counter()  # the projector's batches by size, in powers of two
        self._recent: OrderedDict[tuple[int, int], Handled] = OrderedDict()
        self._waiters: dict[tuple[int, int], list[asyncio.Future[Handled]]] = {}
        self._taken: dict[int, deque[int]] = {}  # per partition, in log order
        self._open: dict[int, set[int]] = {}  # taken and not yet handled
        self.held: str | None = None  # why the projector waits and projects nothing, if it does

    def hold(self, reason: str | None) -> None:
        """The projector waits for ``reason`` (readiness says it), or goes on (None)."""
        self.held = reason

    def taken(self, positions: Iterable[tuple[int, int]]) -> None:
        """These (partition, offset), in log order per partition, are being handled."""
        for partition, offset in positions:
            self._taken.setdefault(partition, deque()).append(offset)
            self._open.setdefault(partition, set()).add(offset)

    def _advance(self, partition: int, offset: int) -> None:
        taken, open_ = self._taken.get(partition), self._open.get(partition)
        if not taken or open_ is None:
            self.last_offset[partition] = max(offset, self.last_offset.get(partition, -1))
            return
        open_.discard(offset)
        while taken and taken[0] not in open_:
            self.last_offset[partition] = max(taken.popleft(), self.last_offset.get(partition, -1))

    def record(self, tenant: str | None, partition: int, offset: int, outcome: Outcome) -> None:
        key = (partition, offset)
        handled = Handled(tenant, outcome)
        self._advance(partition, offset)
        self.counts[outcome.status.value] += 1
        self._recent[key] = handled
        while len(self._recent) > self.keep:
            self._recent.popitem(last=False)
        for fut in self._waiters.pop(key, []):
            if not fut.done():
                fut.set_result(handled)

    def batch(self, size: int) -> None:
        """The projector took ``size`` records at once."""
        self._batches[max(size, 1).bit_length() - 1] += 1

    def batch_sizes(self) -> dict[str, int]:
        """How many batches of each size range, e.g. ``{"1": 40, "2-3": 7, "256-511": 19}``."""
        return {
            (str(1 << k) if k == 0 else f"{1 << k}-{(2 << k) - 1}"): n
            for k, n in sorted(self._batches.items())
        }

    async def wait_for(self, partition: int, offset: int, timeout: float) -> Handled | None:
        """The outcome of the record at (partition, offset), or None if not handled in time."""
        key = (partition, offset)
        if key in self._recent:
            return self._recent[key]
        fut: asyncio.Future[Handled] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(key, []).append(fut)
        try:
            async with asyncio.timeout(timeout):  # not wait_for: the waiter wakes one loop turn sooner
                return await fut
        except TimeoutError:
            return None
        finally:
            waiters = self._waiters.get(key)
            if waiters and fut in waiters:
                waiters.remove(fut)
                if not waiters:
                    del self._waiters[key]
