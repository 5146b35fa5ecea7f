"""Context scopes that change what :class:`RedisSessionService` calls do in a block.

An orchestrator working on a session sets them around its Runner loop:

* :func:`fenced`: appends succeed only while the session's lease is still held with the
  orchestrator's fencing token; a process that lost its lease cannot write behind its
  successor's back.
* :func:`mirrored`: each committed event is also added to the invocation's live stream, in
  the append's own script, so a follower sees it exactly when it is stored. A status
  handed to :meth:`Mirror.with_next_append` is written by the next append too (the record,
  then the status entry, then the event), so "running" and the first event of an
  invocation are one commit.
* :func:`prefetched`: a session read together with taking the lease is returned by the
  next plain ``get_session`` of that session instead of being read again.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass

from orchestrator.sessions.session import Session

current_fence: ContextVar[tuple[str, str] | None] = ContextVar(
    "adk_celery_current_fence", default=None
)
"""``(lease key, fencing token)`` that appends in this context must still hold, or None."""


@dataclass
class Mirror:
    """The live stream that appends in a :func:`mirrored` block also write to."""

    stream_key: str
    maxlen: int
    ttl_seconds: int
    status: tuple[str, str, str, str] | None = None
    """``(record key, status stream, record JSON, status)`` the next append writes first."""

    def with_next_append(
        self, record_key: str, statuses_key: str, record_json: str, status: str
    ) -> None:
        """Have the next append also store this record and add its status to the streams."""
        self.status = (record_key, statuses_key, record_json, status)


current_mirror: ContextVar[Mirror | None] = ContextVar("adk_celery_current_mirror", default=None)
"""Where appends in this context also add their event (in the same script), or None."""

current_prefetch: ContextVar[list[Session] | None] = ContextVar(
    "adk_celery_current_prefetch", default=None
)
"""A session read a moment ago by the caller (at most one); the next plain ``get_session``
of that very session in this context takes it instead of reading it again."""


@contextlib.contextmanager
def fenced(lease_key: str, token: str) -> Iterator[None]:
    """Set :data:`current_fence` to ``(lease_key, token)`` for the duration of the block."""
    reset = current_fence.set((lease_key, str(token)))
    try:
        yield
    finally:
        current_fence.reset(reset)


@contextlib.contextmanager
def mirrored(stream_key: str, maxlen: int, ttl_seconds: int) -> Iterator[Mirror]:
    """Appends in this block also XADD the committed event to ``stream_key``, atomically."""
    mirror = Mirror(stream_key, maxlen, ttl_seconds)
    reset = current_mirror.set(mirror)
    try:
        yield mirror
    finally:
        current_mirror.reset(reset)


@contextlib.contextmanager
def prefetched(session: Session | None) -> Iterator[None]:
    """The first ``get_session`` (no config) of ``session`` in this block returns it as is.

    For a caller that read the session in the same round trip as taking its lease: the
    Runner's own read would return the same data one round trip later.
    """
    if session is None:
        yield
        return
    reset = current_prefetch.set([session])
    try:
        yield
    finally:
        current_prefetch.reset(reset)


def take_prefetched(app_name: str, user_id: str, session_id: str) -> Session | None:
    """The prefetched session if it is this one (it is handed out once), else None."""
    slot = current_prefetch.get()
    if not slot:
        return None
    session = slot[0]
    if (session.app_name, session.user_id, session.id) != (app_name, user_id, session_id):
        return None
    slot.clear()  # once: later reads must see what this context appended since
    return session
