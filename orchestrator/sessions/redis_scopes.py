"""What a lease-bound append of :class:`RedisSessionService` also does: the live-stream mirror.

An orchestrator working on a session appends through a
:class:`~orchestrator.sessions.redis_session_service.LeasedSessionWriter` (see
``RedisSessionService.leased_writer``), which it builds with its lease and hands to the
Runner: every append it makes

* succeeds only while the session's lease is still held with the orchestrator's fencing
  token, so a process that lost its lease cannot write behind its successor's back;
* also adds its event to the invocation's live stream (the :class:`Mirror`), in the
  append's own script, so a follower sees it exactly when it is stored; a record handed to
  :meth:`Mirror.with_next_append` is written by the next append too (the record, then its
  status entry, then the event), so "running" and the first event of an invocation are one
  commit.

Plain ``append_event`` calls on the service do none of this.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Mirror:
    """The live stream that a writer's appends also write to."""

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
