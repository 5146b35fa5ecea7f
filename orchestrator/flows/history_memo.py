"""Model histories kept per session, so a long session's next call reads only new events.

Sessions only grow: a committed event is never changed or removed (a rewind is a new event).
So the history built for the first ``count`` events of a session stays right for as long as
the events appended after them cannot change it; :mod:`orchestrator.flows.contents` decides
when that holds and falls back to building the whole history when it does not. An entry is
found by the session's first event id (a uuid4: one session, even across a delete and a
re-create under the same id) and the agent's view (name, branch, options), and is checked
against the id of the last event it covers before it is used.

The memo is a bounded LRU shared by the threads of a process (orchestrators run many
sessions on one loop; workers run branches on several threads): a cache only, never the
truth, so losing it costs time, not correctness.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass, field

from google.genai import types

from orchestrator.events.event import Event
from orchestrator.events.log_scans import covers


@dataclass
class HistoryEntry:
    """The history of one agent's view of a session's first ``count`` events.

    ``contents`` is what the model sees of them when the last of them is not a function
    response that still has to be moved after its call (that step is left to the caller).
    """

    count: int
    last_id: str
    contents: list[types.Content]
    call_authors: dict[str, str]
    """Author of every function call among the events, by call id."""
    response_ids: set[str] = field(default_factory=set)
    """Ids of every function response among the events (any branch)."""
    loose_responses: bool = False
    """Whether responses to no call are shown in place, as they are while no response in the
    view answers a call (one that does makes them go: see ``contents``)."""

    def covers(self, events: list[Event]) -> bool:
        """True if this entry describes the first ``count`` of ``events``."""
        return covers(events, self.count, self.last_id)


class HistoryMemo:
    """A bounded, thread-safe LRU of :class:`HistoryEntry` by session and view."""

    def __init__(self, max_contents: int = 50_000, max_entries: int = 1024) -> None:
        self._max_contents = max_contents
        self._max_entries = max_entries
        self._entries: OrderedDict[Hashable, HistoryEntry] = OrderedDict()
        self._held = 0
        self._lock = threading.Lock()

    def take(self, key: Hashable, events: list[Event]) -> HistoryEntry | None:
        """Remove and return the entry for ``key`` if it covers a prefix of ``events``.

        Taken, not read: the caller extends it and puts it back, so two threads working on
        the same session never extend one entry at once.
        """
        with self._lock:
            entry = self._entries.pop(key, None)
            if entry is not None:
                self._held -= len(entry.contents)
        if entry is None or not entry.covers(events):
            return None
        return entry

    def put(self, key: Hashable, entry: HistoryEntry) -> None:
        """Keep ``entry`` (the newest), evicting the least recently used past the bounds."""
        size = len(entry.contents)
        if size > self._max_contents:
            return
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._held -= len(old.contents)
            self._entries[key] = entry
            self._held += size
            while self._held > self._max_contents or len(self._entries) > self._max_entries:
                _, evicted = self._entries.popitem(last=False)
                self._held -= len(evicted.contents)

    def clear(self) -> None:
        """Forget every entry."""
        with self._lock:
            self._entries.clear()
            self._held = 0

    def __len__(self) -> int:
        return len(self._entries)

