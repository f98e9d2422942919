"""A tenant's memories by the conversation they were extracted from, in valid-time order.

A hit's neighbours (what was said just before and after it) are often its evidence, so recall
passes them some of its score (``recall.with_context``); keeping the threads sorted in memory finds
them without a query. Built from the graph in one scan of the valid times when the indexes open
(or on first use after a rebuild), then kept in step memory by memory as the indexes refresh. The
same scan gives the latest valid time a memory holds: the tenant's clock when it has no clock node.
"""

from __future__ import annotations

import bisect

from engram.projections.tenant_graph import TenantGraph
from engram.projections.terms import ASSERTED, MEMORY_PREFIX, e, memory_iri, time_order


class Threads:
    def __init__(self, graph: TenantGraph) -> None:
        self.graph = graph  # its store may be reopened in place (an erasure): read it each time
        self._threads: dict[str, list[tuple[str, str]]] | None = None  # conversation -> (when, id)
        self._thread_of: dict[str, tuple[str, str]] = {}  # memory -> (conversation, valid from)
        self._latest_valid = ""  # the latest valid time of a memory seen (ISO strings, all UTC)

    def build(self) -> None:
        """Every memory's place, from one scan of the valid times; a no-op once built."""
        if self._threads is not None:
            return
        store = self.graph.store
        valid = {
            q.subject: q.object.value for q in store.quads_for_pattern(None, e("validFrom"), None, ASSERTED)
        }
        self._latest_valid = max(valid.values(), key=time_order, default="")
        self._threads, self._thread_of = {}, {}
        for q in store.quads_for_pattern(None, e("evidenceConversation"), None, ASSERTED):
            when = valid.get(q.subject)  # type: ignore[call-overload]
            if when is not None:
                self._place(q.subject.value.removeprefix(MEMORY_PREFIX), q.object.value, time_order(when))

    def forget_all(self) -> None:
        """Drop every place (a rebuild): built again on first use."""
        self._threads = None

    def latest_valid(self) -> str:
        self.build()
        return self._latest_valid

    def rethread(self, memory_id: str) -> None:
        """Place a refreshed memory again (its conversation or valid time may have changed)."""
        if self._threads is None:
            return
        self._displace(memory_id)
        m = memory_iri(memory_id)
        store = self.graph.store
        when = next(store.quads_for_pattern(m, e("validFrom"), None, ASSERTED), None)
        if when is None:
            return
        self._latest_valid = max(self._latest_valid, when.object.value, key=time_order)
        conversation = next(store.quads_for_pattern(m, e("evidenceConversation"), None, ASSERTED), None)
        if conversation is not None:
            self._place(memory_id, conversation.object.value, time_order(when.object.value))

    def neighbours(self, memory_id: str, window: int) -> list[str]:
        """The memories of the same conversation next to this one in valid time, ``window`` on each
        side, nearest first (none for a memory that cites no conversation)."""
        self.build()
        assert self._threads is not None
        found = self._thread_of.get(memory_id)
        if found is None or window <= 0:
            return []
        thread = self._threads[found[0]]
        i = bisect.bisect_left(thread, (found[1], memory_id))
        out = []
        for d in range(1, window + 1):
            out += [thread[j][1] for j in (i - d, i + d) if 0 <= j < len(thread)]
        return out

    def _place(self, memory_id: str, conversation: str, when: str) -> None:
        assert self._threads is not None
        self._thread_of[memory_id] = (conversation, when)
        bisect.insort(self._threads.setdefault(conversation, []), (when, memory_id))

    def _displace(self, memory_id: str) -> None:
        assert self._threads is not None
        found = self._thread_of.pop(memory_id, None)
        if found is not None:
            thread = self._threads[found[0]]
            i = bisect.bisect_left(thread, (found[1], memory_id))
            if i < len(thread) and thread[i] == (found[1], memory_id):
                del thread[i]
