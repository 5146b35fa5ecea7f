"""Where invocation records, results and per-session work queues live: the interfaces.

Implemented in memory (:mod:`orchestrator.backends.memory.stores`, the embedded mode) and
in Redis (:mod:`orchestrator.backends.redis.invocation_store` and
:mod:`orchestrator.backends.redis.session_queue`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, Protocol

from orchestrator.distributed.invocation_lists import InvocationPage, InvocationQuery
from orchestrator.distributed.models import InvocationRecord, InvocationStatus, ToolResult, WorkItem
from orchestrator.errors import AnswerRejectedError as AnswerRejectedError  # its former home
from orchestrator.sessions.session import Session

SessionKey = tuple[str, str, str]
"""(app_name, user_id, session_id)"""


def session_key(record: InvocationRecord) -> SessionKey:
    """The (app, user, session) a record belongs to."""
    return (record.app_name, record.user_id, record.session_id)


class InvocationStore(Protocol):
    """Invocation records and the results of their remote calls."""

    async def create(self, record: InvocationRecord) -> bool:
        """Store a new record; False if one with that id exists (it is left untouched)."""
        ...

    async def get(self, app_name: str, invocation_id: str) -> InvocationRecord | None:
        """The record, or None."""
        ...

    async def load(self, app_name: str, invocation_id: str) -> Loaded:
        """The record, whether cancellation was requested, and the stored results: one read."""
        ...

    async def save(self, record: InvocationRecord) -> None:
        """Overwrite the record and publish its status to watchers."""
        ...

    async def put_result(self, app_name: str, invocation_id: str, result: ToolResult) -> bool:
        """Store a call's result unless a final one or a paused branch's turn is there.

        First final writer wins; a branch's paused turn (its events, no response) is final
        for its call, whose answer the orchestrator makes itself. False: nothing stored.
        """
        ...

    async def results(self, app_name: str, invocation_id: str) -> dict[str, ToolResult]:
        """Every stored result of the invocation, by call id."""
        ...

    async def request_cancel(self, app_name: str, invocation_id: str) -> None:
        """Flag the invocation for cancellation (seen by orchestrators and workers)."""
        ...

    async def is_cancelled(self, app_name: str, invocation_id: str) -> bool:
        """True once cancellation was requested."""
        ...

    async def list_invocations(self, query: InvocationQuery) -> InvocationPage:
        """A page of a session's invocations or of an app's (see ``invocation_lists``)."""
        ...


class Loaded(NamedTuple):
    """What an orchestrator reads before working on an invocation."""

    record: InvocationRecord | None
    cancelled: bool
    results: dict[str, ToolResult]
    session: Session | None = None
    """The invocation's session, when it was read in the same step (under the lease)."""


class Taken(NamedTuple):
    """A session taken by :meth:`SessionQueue.take`."""

    token: str
    item: WorkItem | None
    """The first item; None: nothing was queued and the lease is already released."""
    loaded: Loaded | None
    """The item's invocation, when the queue could read it in the same step."""


def in_flight(record: InvocationRecord) -> bool:
    """True if ``record`` is paused on calls only its workers answer (none from outside).

    Such an invocation is still answering its message, as it would be in process: a new
    message to its session waits until it is done (:meth:`SessionQueue.claim_or_release`).
    """
    return (record.status is InvocationStatus.PAUSED and bool(record.pending_calls)
            and set(record.pending_calls) <= set(record.inside_calls))


class SessionQueue(Protocol):
    """Per-session FIFO of work items plus the lease that makes one orchestrator its writer."""

    async def push(self, key: SessionKey, item: WorkItem, result: ToolResult | None = None) -> bool:
        """Append a work item; True if appended.

        With ``result``: first store it as the item's invocation's store would (first final
        result wins), in the same step, and append the item only if it was stored.
        """
        ...

    async def create_and_push(self, key: SessionKey, record: InvocationRecord, item: WorkItem) -> bool:
        """Store a new record and append its first item in one step; False if it existed.

        Never one without the other: a record that exists has its item queued, so a caller
        that crashed, or whose reply was lost, sends it again and finds it done.
        """
        ...

    async def push_answers(
        self, key: SessionKey, item: WorkItem, results: Sequence[ToolResult]
    ) -> str | None:
        """Store every result and append the item in one step, all or nothing.

        None when done; else the id of a call whose result could not be stored (it has
        another final one, as :meth:`push` with ``result`` would refuse), nothing written. A
        result stored already exactly as given counts as done, and if all are, no item is
        appended: the same answers sent again (a lost reply) are taken once.
        """
        ...

    async def take(
        self, key: SessionKey, hint: str | None = None, known: Session | None = None
    ) -> Taken | None:
        """Take the session's lease and claim its first item; None if another holds the lease.

        Taking the lease returns a fencing token and first puts back at the head of the queue
        whatever a previous holder left in progress (it died before finishing it); an empty
        queue releases the lease again at once (``item`` None). ``hint`` names the invocation
        the caller expects first; a queue that can read it in the same step returns it as
        ``loaded``. ``known``: a copy of the session as stored earlier (see
        :mod:`~orchestrator.distributed.session_cache`); such a queue then reads only the
        events stored after it, and the whole session if it no longer starts so.
        """
        ...

    async def claim_or_release(
        self,
        key: SessionKey,
        token: str,
        finished: WorkItem | None = None,
        save: InvocationRecord | None = None,
    ) -> WorkItem | None:
        """Save ``save``, drop ``finished``, return the next item or release the lease.

        ``save`` is saved as the store saves records; saving in the same step means the
        record is stored before the lease can pass on. While an invocation of the session is
        :func:`in_flight` (``save`` makes it so, or no longer so), new messages (``start``
        items of other invocations) are held, not returned; they come back, in order, once
        it is not. ``take`` holds them the same way.
        Releasing in the same step as finding the queue empty means an item pushed later
        always finds the lease free, so its sender can drain it. StaleSessionError, with
        nothing written, if the lease is no longer held with ``token``.
        """
        ...

    async def renew(self, key: SessionKey, token: str) -> bool:
        """Extend the lease; False if it was lost."""
        ...

    async def release(self, key: SessionKey, token: str) -> None:
        """Give the lease up (only if still held with ``token``)."""
        ...
