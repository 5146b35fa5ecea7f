"""The lease-bound session writer of an orchestrator, and the live-stream mirror it writes.

An orchestrator working on a session appends through a :class:`LeasedSessionWriter` (see
``RedisSessionService.leased_writer``), which it builds with its lease and hands to the
Runner: every append it makes

* succeeds only while the session's lease is still held with the orchestrator's fencing
  token, so a process that lost its lease cannot write behind its successor's back;
* never commits a second answer to a call (the session keeps the ids of answered calls);
* sends the jobs of the event's remote calls that the flow attached to it
  (:func:`jobs_sent_with`), in the append's own script: a call is never stored without its
  job, nor its job sent without the call stored;
* also adds its event to the invocation's live stream (the :class:`Mirror`), in the
  append's own script, so a follower sees it exactly when it is stored; a record handed to
  :meth:`Mirror.with_next_append` is written by the next append too (the record, then its
  status entry, then the event), so "running" and the first event of an invocation are one
  commit.

Plain ``append_event`` calls on the service do none of this.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from orchestrator.backends.redis.jobs import PublishOnce
from orchestrator.distributed.transport import CommitDispatch, commit_dispatch
from orchestrator.events.event import Event

logger = logging.getLogger(__name__)

if TYPE_CHECKING:
    from orchestrator.backends.redis.session_service import RedisSessionService
    from orchestrator.sessions.session import Session


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


@dataclass
class JobsSent:
    """The jobs one append sends (:func:`jobs_sent_with`), and the calls they answer for."""

    dispatch: CommitDispatch
    call_ids: list[str]
    operands: dict[str, Any]
    """The append script's ``jobs``, ``watch`` and ``publishes`` operands."""

    def done(self) -> None:
        """The append ran: its jobs are out (sent now, or by an earlier try of the same)."""
        self.dispatch.published.update(self.call_ids)


def jobs_sent_with(session: Session, event: Event) -> JobsSent | None:
    """The jobs the flow attached to ``event`` (see ``CommitDispatch``), for its append.

    Built from the state the event leaves, as a submit right after the commit would. If
    they cannot be built here, none is sent: the flow submits them after the commit as
    usual, and meets the same error there.
    """
    dispatch = commit_dispatch(event)
    if dispatch is None:
        return None
    try:
        publishes = dispatch.publishes({**session.state, **event.actions.state_delta})
    except Exception:  # the plain path after the commit reports it where it belongs
        logger.debug("Jobs of event %r left to their submit", event.id, exc_info=True)
        return None
    found = [(call_id, ops) for call_id, ops in publishes if isinstance(ops, PublishOnce)]
    if not found or len({(ops.jobs, ops.watch) for _, ops in found}) != 1:
        return None
    first = found[0][1]
    return JobsSent(dispatch, [call_id for call_id, _ in found], {
        "jobs": first.jobs, "watch": first.watch,
        "publishes": [item for _, ops in found for item in ops.job]})


class LeasedSessionWriter:
    """Appends of one lease holder: fenced by its token, mirrored to a live stream.

    The orchestrator builds one per session it takes and hands it to the Runner, so what an
    append checks and writes is decided where the lease is, not by ambient state.
    """

    def __init__(
        self, service: RedisSessionService, fence: tuple[str, str], mirror: Mirror | None
    ) -> None:
        self._service = service
        self.fence = fence
        """``(lease key, fencing token)`` every append requires."""
        self.mirror = mirror
        """The live stream every append also writes, if any."""

    async def append_event(self, session: Session, event: Event) -> Event:
        """Commit ``event`` while the lease is held; mirrored to the live stream, if any.

        A lost lease raises ``StaleSessionError``, an answer to a call that has one raises
        ``AlreadyAnsweredError``; nothing is written then.
        """
        return await self._service._append(session, event, self.fence, self.mirror)
