"""Sessions an orchestrator read before, kept so that the next lease reads only what is new.

A session's events are only ever appended, and every event has its own id, so a copy of
the session as it was stored is a valid prefix of the session as stored now if the event at
the copy's last index still has the copy's last id. The queue checks exactly that when it
reads the rest (see ``SessionQueue.take``), and reads everything otherwise (the session was
deleted and made again). So nothing here needs invalidating: a stale copy costs a full read.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from orchestrator.distributed.stores import SessionKey
from orchestrator.sessions.session import Session


class SessionCache:
    """A bounded LRU of sessions as last read from storage, by session key.

    Bounded by the events held in all (``max_events``) and by entries (``max_sessions``);
    a session with more events than ``max_events`` is not kept.
    """

    def __init__(self, max_events: int = 50_000, max_sessions: int = 1024) -> None:
        self._max_events = max_events
        self._max_sessions = max_sessions
        self._sessions: OrderedDict[SessionKey, Session] = OrderedDict()
        self._events = 0
        self._lock = threading.Lock()

    def take(self, key: SessionKey) -> Session | None:
        """The copy kept for ``key`` (removed: the caller puts back what it read next)."""
        with self._lock:
            session = self._sessions.pop(key, None)
            if session is not None:
                self._events -= len(session.events)
            return session

    def put(self, key: SessionKey, session: Session) -> None:
        """Keep ``session`` (a copy nobody appends to) as ``key``'s latest read."""
        if len(session.events) > self._max_events:
            return
        with self._lock:
            old = self._sessions.pop(key, None)
            if old is not None:
                self._events -= len(old.events)
            self._sessions[key] = session
            self._events += len(session.events)
            while self._sessions and (self._events > self._max_events
                                      or len(self._sessions) > self._max_sessions):
                _, dropped = self._sessions.popitem(last=False)
                self._events -= len(dropped.events)

    def __len__(self) -> int:
        return len(self._sessions)
