"""Live event streams: every event of an invocation, as it happens, replayable from its start.

An invocation's stream holds, in order, three kinds of entries:

- ``{"kind": "event", "event": <Event wire JSON>, "partial": "1"|"0"}``: every event of the
  invocation (its user message first), streaming chunks (``partial``) included. Committed
  events are added by the session append that stores them, chunks by ``publish`` (in Redis
  with a ``pub`` field too, the publish call's id: readers ignore it);
- ``{"kind": "status", "status": <InvocationStatus value>}``: each status change,
  published by the invocation store when it saves the record (in Redis the record itself
  rides only in the status-only stream's entries, for waiters; a follower that needs it
  reads it);
- ``{"kind": "progress", "call": ..., "tool": ..., "attempt": ..., "at": ..., "progress": ...}``:
  a remote call's ``report_progress``, added by the worker running it; it never ends a
  follow.

In Redis a fourth kind, ``{"kind": "waiting", "call": ..., "tool": ...}``, says that a call
now waits for an answer from outside (its tool ran on a worker and returned nothing: a
pending placeholder, stored in the same script); the status-only stream gets it too. It is
not an item: ``follow`` reads past it (a pause followed only by such entries is still the
latest status), and the API's runs end at a pause for an outside answer as soon as they
read it (``workers/api/runs.py``).

Events and statuses are written by the process running the invocation, one after the
other, so a follower sees a run's events before the status that ends it. ``follow`` reads
from the first entry (replay) or from now on, and stops at a finished status, or at the
current status if it is in ``until`` (``paused`` by default). A follower may start before
the invocation does (it waits for the stream to appear) or after it finished (it replays
everything, then the final status).

This module holds what every back-end shares (the items, :class:`EventStream`, when a
follow ends); the streams themselves are
:class:`~orchestrator.backends.redis.streams.RedisEventStream` and
:class:`~orchestrator.backends.memory.streams.InMemoryEventStream`. A stream is capped at
about :data:`STREAM_MAXLEN` entries; a very long streamed run keeps its latest entries.
"""

from __future__ import annotations

import math
import time
from collections.abc import AsyncIterator, Collection
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from orchestrator.distributed.models import InvocationRecord, InvocationStatus
from orchestrator.errors import RequestError
from orchestrator.events.event import Event

STREAM_MAXLEN = 5000
"""Approximate cap on the entries of one invocation's stream (``XADD MAXLEN ~``)."""


@dataclass(frozen=True)
class Progress:
    """One progress report of a remote call (``tool_context.report_progress`` on a worker)."""

    function_call_id: str
    tool: str
    attempt: int
    at: float
    """When the worker reported it (epoch seconds, the worker's clock)."""
    payload: dict[str, Any]
    """What the tool reported."""

    def to_json(self) -> dict[str, Any]:
        """The report as clients see it (camelCase, like events)."""
        return {"functionCallId": self.function_call_id, "tool": self.tool,
                "attempt": self.attempt, "at": self.at, "progress": self.payload}


@dataclass(frozen=True)
class StreamItem:
    """One entry of an invocation's live stream: an event, a status change, or progress."""

    kind: Literal["event", "status", "progress"]
    event: Event | None = None
    """The event (``kind == "event"``): committed, or a streaming chunk when ``partial``."""
    status: InvocationStatus | None = None
    """The invocation's new status (``kind == "status"``)."""
    progress: Progress | None = None
    """A remote call's progress report (``kind == "progress"``)."""
    entry_id: str | None = None
    """Its position in the stream (Redis), to resume a follow after it (``after``)."""

    @property
    def partial(self) -> bool:
        """True for a streaming chunk (never stored in the session)."""
        return self.event is not None and bool(self.event.partial)

    @classmethod
    def of_event(cls, event: Event) -> StreamItem:
        """An event entry."""
        return cls(kind="event", event=event)

    @classmethod
    def of_status(cls, status: InvocationStatus) -> StreamItem:
        """A status entry."""
        return cls(kind="status", status=status)


class AbandonedAnswers:
    """Read back from a stream's end: the answers whose chunks a cut-off run left uncommitted.

    Feed the entries newest first to :meth:`read_back` until it returns False (the latest
    status entry: the run's start, or the pause it resumed from). :attr:`found` maps
    (author, branch) to the id of that agent's newest chunk that no committed event has
    (``logged``: the ids of the session's events).
    """

    def __init__(self, logged: set[str]) -> None:
        self._logged = logged
        self.found: dict[tuple[str, str | None], str] = {}

    def read_back(self, kind: str, chunk: dict[str, Any] | None) -> bool:
        """Take one entry: its kind and, for a partial chunk, its event's wire JSON."""
        if kind == "status":
            return False
        if chunk is not None:
            event_id, author, branch = chunk.get("id"), chunk.get("author"), chunk.get("branch")
            if (isinstance(event_id, str) and isinstance(author, str)
                    and isinstance(branch, str | None) and event_id not in self._logged):
                self.found.setdefault((author, branch), event_id)
        return True


class EventStream(Protocol):
    """What the Redis and in-memory live streams share."""

    async def publish(self, record: InvocationRecord, event: Event) -> None:
        """Append ``event`` to the stream of ``record``'s invocation (an event sink)."""
        ...

    async def abandoned_chunks(
        self, record: InvocationRecord, logged: set[str]
    ) -> dict[tuple[str, str | None], str]:
        """The answers the latest run of ``record``'s invocation streamed and never committed.

        ``{(author, branch): event id}`` (see :class:`AbandonedAnswers`): what a run cut off
        mid-answer left; the run that recovers the invocation answers under those ids.
        """
        ...

    def follow(
        self,
        app_name: str,
        invocation_id: str,
        *,
        from_start: bool = True,
        until: Collection[InvocationStatus] = InvocationStatus.SETTLED,
        timeout: float | None = None,
    ) -> AsyncIterator[StreamItem]:
        """The invocation's entries as they come, up to a status in ``until``."""
        ...


def ends_follow(status: InvocationStatus | None, until: Collection[InvocationStatus]) -> bool | None:
    """Whether a follow stops after an entry with ``status`` (None: not a status entry).

    True: stop after it. None: stop only if nothing follows it yet. False: go on. A finished
    status always ends a follow (nothing comes after it). An unfinished one in ``until``
    (``paused``) ends it only while it is the latest entry: a replay goes past the pauses the
    invocation has since resumed from.
    """
    if status is None:
        return False
    if status.is_finished:
        return True
    return None if status in until else False


def time_limit(timeout: float | None) -> float | None:
    """A wait's or follow's ``timeout`` in seconds, None for no limit (None or infinity).

    RequestError (a ValueError) for NaN, which is no number of seconds.
    """
    if timeout is None or timeout == math.inf:
        return None
    if math.isnan(timeout):
        raise RequestError("timeout", "NaN is not a number of seconds (None or inf: no limit).")
    return timeout


class FollowDeadline:
    """When a follow with a ``timeout`` gives up (shared by the back-ends' ``follow``)."""

    def __init__(self, timeout: float | None, what: str) -> None:
        timeout = time_limit(timeout)
        self._at = None if timeout is None else time.monotonic() + timeout
        self._timeout = timeout
        self._what = what

    def remaining(self) -> float | None:
        """Seconds left (None = no limit); raises TimeoutError once none are."""
        if self._at is None:
            return None
        left = self._at - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"{self._what} did not reach the end of its follow within "
                               f"{self._timeout} s.")
        return left
