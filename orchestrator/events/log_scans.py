"""Scans of a session's event log that remember how far they got.

A session's log only grows: a committed event is never changed or removed. A question asked
of the whole log on every model call ("was this session ever rewound?", "how many model
calls has each invocation made?") can therefore keep its answer for the first ``count``
events and, next time, read only the events appended since. A scan is found by the
session's first event id (a uuid4, so a session deleted and made again under the same id is
a new scan) and a view: a worker running a branch sees only the events of that branch, so
two branches' views of one session are two scans. It is checked against the id of the last
event it read before it is used.

Bounded LRU, shared by the threads of a process; a cache only: losing an entry costs a
full read, never a wrong answer.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from orchestrator.events.event import Event

T = TypeVar("T")


def covers(events: list[Event], count: int, last_id: str) -> bool:
    """True if ``events`` start with the ``count`` events of which the last had ``last_id``."""
    return len(events) >= count and events[count - 1].id == last_id


class LogScan(Generic[T]):
    """A fold over sessions' logs: ``step(state, event)`` for each event, remembered per session.

    ``start()`` makes the state of an empty log; ``step`` updates a state in place with one
    event. The state returned by :meth:`of` belongs to the scan: read it, never change it.
    """

    def __init__(
        self, start: Callable[[], T], step: Callable[[T, Event], None], max_sessions: int = 4096
    ) -> None:
        self._start, self._step = start, step
        self._max_sessions = max_sessions
        self._seen: OrderedDict[Hashable, tuple[int, str, T]] = OrderedDict()
        self._lock = threading.Lock()

    def of(self, events: list[Event], view: Hashable = None) -> T:
        """The state after every one of ``events``; reads only those not read before.

        ``view``: what selected ``events`` from the session's log when it is not the whole log
        (the branch a worker's snapshot was cut for).
        """
        if not events:
            return self._start()
        key = (events[0].id, view)
        with self._lock:  # taken, not shared: two threads never step one state at once
            seen = self._seen.pop(key, None)
        if seen is not None and covers(events, seen[0], seen[1]):
            count, state = seen[0], seen[2]
        else:
            count, state = 0, self._start()
        for event in events[count:]:
            self._step(state, event)
        with self._lock:
            self._seen[key] = (len(events), events[-1].id, state)
            while len(self._seen) > self._max_sessions:
                self._seen.popitem(last=False)
        return state

    def clear(self) -> None:
        """Forget every session."""
        with self._lock:
            self._seen.clear()
