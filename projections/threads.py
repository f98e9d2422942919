"""A tenant's memories by the conversation they were extracted from, in valid-time order.

A hit's neighbours (what was said just before and after it) are often its evidence, so recall
passes them some of its score (``recall.with_context``); keeping the threads sorted in memory finds
them without a query. Built from the graph on first use (the cited memories' valid times), then
kept in step memory by memory as the indexes refresh. The latest valid time a memory holds (the
tenant's clock when it has no clock node) is read by one scan on first use, then kept the same way.
"""

from __future__ import annotations

import bisect

from engram.projections.tenant_graph import TenantGraph
from engram.projections.terms import ASSERTED, MEMORY_PREFIX, e, memory_iri, time_order

LOOKUPS = 2_000  # cited memories whose valid times are looked up one by one; past it, one scan


class Threads:
    def __init__(self, graph: TenantGraph) -> None:
        self.graph = graph  # its store may be reopened in place (an erasure): read it each time
        self._threads: dict[str, list[tuple[str, str]]] | None = None  # conversation -> (when, id)
        self._thread_of: dict[str, tuple[str, str]] = {}  # memory -> (conversation, valid from)
        self._latest_valid: str | None = None  # of every memory (ISO strings, all UTC); None: unread

    def build(self) -> None:
        """Every cited memory's place, on first use; a no-op once built. Its valid time is looked
        up one by one for a few (a scan of every memory's valid time was most of a cold tenant's
        first recall: 1.1 s at 100k memories, none of them citing a conversation), from one scan
        for many."""
        if self._threads is not None:
            return
        store = self.graph.store
        cited = list(store.quads_for_pattern(None, e("evidenceConversation"), None, ASSERTED))
        if len(cited) > LOOKUPS:
            valid = {
                q.subject: q.object.value
                for q in store.quads_for_pattern(None, e("validFrom"), None, ASSERTED)
            }  # type: ignore[misc]
        else:
            valid = {}
            for q in cited:
                found = next(store.quads_for_pattern(q.subject, e("validFrom"), None, ASSERTED), None)
                if found is not None:
                    valid[q.subject] = found.object.value
        self._threads, self._thread_of = {}, {}
        for q in cited:
            when = valid.get(q.subject)  # type: ignore[call-overload]
            if when is not None:
                self._place(q.subject.value.removeprefix(MEMORY_PREFIX), q.object.value, time_order(when))

    def forget_all(self) -> None:
        """Drop every place (a rebuild): built again on first use."""
        self._threads = None
        self._latest_valid = None

    def latest_valid(self) -> str:
        """The latest valid time of a memory (the clock of a tenant with no clock node), from one
        scan of them on first use, then kept as memories are placed again."""
        if self._latest_valid is None:
            store = self.graph.store
            times = (q.object.value for q in store.quads_for_pattern(None, e("validFrom"), None, ASSERTED))
            self._latest_valid = max(times, key=time_order, default="")  # type: ignore[arg-type]
        return self._latest_valid

    def rethread(self, memory_id: str) -> None:
        """Place a refreshed memory again (its conversation or valid time may have changed)."""
        if self._threads is None and self._latest_valid is None:
            return
        m = memory_iri(memory_id)
        store = self.graph.store
        when = next(store.quads_for_pattern(m, e("validFrom"), None, ASSERTED), None)
        if self._latest_valid is not None and when is not None:
            self._latest_valid = max(self._latest_valid, when.object.value, key=time_order)
        if self._threads is None:
            return
        self._displace(memory_id)
        if when is None:
            return
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
