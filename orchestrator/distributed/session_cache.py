"""Sessions an orchestrator read before, kept so that the next lease reads only what is new.

A session's events are only ever appended, and every event has its own id, so a copy of
the session as it was stored is a valid prefix of the session as stored now if the event at
the copy's last index still has the copy's last id. The queue checks exactly that when it
reads the rest (see ``SessionQueue.take``), and reads everything otherwise (the session was
deleted and made again). So nothing here needs invalidating: a stale copy costs a full read.

The cache is bounded by an approximate size in bytes. What a session costs is known without
serialising it again: a reader that builds a session from what it read notes the byte
length of that (:func:`note_stored_size`: its events' JSON and its state's fields and
values), and a read of what came after a copy adds the new events' length to the copy's.
A session whose size is not noted (a back-end that does not read serialised sessions, as
the in-memory one, whose re-read reads everything anyway) is not kept.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import NamedTuple

from config import Settings
from orchestrator.distributed.stores import SessionKey
from orchestrator.sessions.session import Session

DEFAULT_MAX_BYTES: int = Settings.model_fields["session_cache_max_bytes"].default
"""The default bound (one source for it: the settings)."""

DEFAULT_MAX_SESSIONS = 1024

EVENT_OVERHEAD_BYTES = 4096
"""What a parsed event is charged beyond its JSON: an Event and its content as Python objects
cost about 4.2 KB more than their text (measured for a one-part text event, CPython 3.11,
pydantic 2.14), so a session of many small events costs far more than its JSON says."""

_NOTE = "_adk_celery_stored_size"
"""Where a session carries its noted size: an attribute outside its fields (pydantic neither
validates, serialises nor compares it; ``model_copy`` carries it to the copy)."""


class StoredSize(NamedTuple):
    """The byte length of a session as read from storage.

    Approximate: the lengths of the strings read (a client that decodes replies counts
    characters, which are bytes for ASCII JSON and fewer than bytes for other text).
    """

    events: int
    """Its events' stored JSON, all of them (a later read of newer events adds theirs)."""
    state: int
    """Its state's fields and values as stored (replaced by each read: state is read whole)."""


def note_stored_size(session: Session, events: int, state: int) -> Session:
    """Note on ``session``, just built from a read, the byte length of what was read."""
    object.__setattr__(session, _NOTE, StoredSize(events, state))
    return session


def stored_size(session: Session) -> StoredSize | None:
    """The size noted on ``session`` by its reader; None if none was."""
    size = session.__dict__.get(_NOTE)
    return size if isinstance(size, StoredSize) else None


def charge(session: Session) -> int | None:
    """What keeping ``session`` counts against the bound; None if its size is not known."""
    size = stored_size(session)
    if size is None:
        return None
    return size.events + size.state + EVENT_OVERHEAD_BYTES * len(session.events)


class SessionCache:
    """A bounded LRU of sessions as last read from storage, by session key.

    Bounded by an approximate size in bytes (``max_bytes``; each session counts its
    :func:`charge`) and by entries (``max_sessions``). A session larger than ``max_bytes``,
    or whose size is not known, is not kept; ``max_bytes`` 0 keeps nothing.
    """

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES,
                 max_sessions: int = DEFAULT_MAX_SESSIONS) -> None:
        if max_bytes < 0 or max_sessions < 0:
            raise ValueError("SessionCache bounds must be >= 0")
        self._max_bytes = max_bytes
        self._max_sessions = max_sessions
        self._sessions: OrderedDict[SessionKey, tuple[Session, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def take(self, key: SessionKey) -> Session | None:
        """The copy kept for ``key`` (removed: the caller puts back what it read next)."""
        with self._lock:
            entry = self._sessions.pop(key, None)
            if entry is None:
                return None
            self._bytes -= entry[1]
            return entry[0]

    def put(self, key: SessionKey, session: Session) -> None:
        """Keep ``session`` (a copy nobody appends to) as ``key``'s latest read.

        It replaces what was kept for ``key``; if it cannot be kept (too large, size not
        known) nothing is kept for ``key``.
        """
        cost = charge(session)
        with self._lock:
            old = self._sessions.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            if cost is None or cost > self._max_bytes or not self._max_bytes or not self._max_sessions:
                return
            self._sessions[key] = (session, cost)
            self._bytes += cost
            while self._bytes > self._max_bytes or len(self._sessions) > self._max_sessions:
                _, (_, dropped) = self._sessions.popitem(last=False)
                self._bytes -= dropped

    @property
    def max_bytes(self) -> int:
        """The bound on :attr:`bytes` (0: nothing is kept)."""
        return self._max_bytes

    @property
    def bytes(self) -> int:
        """What the kept sessions count against ``max_bytes``, all together."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._sessions)
