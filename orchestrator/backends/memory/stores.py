"""Invocation records, results and per-session work queues in this process (embedded mode).

The in-memory implementations of :class:`~orchestrator.distributed.stores.InvocationStore`
and :class:`~orchestrator.distributed.stores.SessionQueue`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections import deque
from collections.abc import Sequence

from orchestrator import platform
from orchestrator.distributed.invocation_lists import InvocationPage, InvocationQuery, Position, page_of
from orchestrator.distributed.models import InvocationRecord, InvocationStatus, ToolResult, WorkItem
from orchestrator.distributed.stores import InvocationStore, Loaded, SessionKey, Taken, in_flight
from orchestrator.errors import StaleSessionError
from orchestrator.sessions.session import Session


class InMemoryInvocationStore:
    """Invocation records in this process (embedded mode)."""

    def __init__(self) -> None:
        self._records: dict[tuple[str, str], InvocationRecord] = {}
        self._results: dict[tuple[str, str], dict[str, ToolResult]] = {}
        self._cancelled: set[tuple[str, str]] = set()
        self._changed: dict[tuple[str, str], asyncio.Condition] = {}
        self._saved_at: dict[tuple[str, str], float] = {}
        """When each record was last saved (the order of the app's lists)."""
        self._unlisted: set[tuple[str, str]] = set()
        """Invocations of deleted sessions: in no session's list (a new session of that id
        starts with an empty one, as on Redis, where the list goes with the session)."""

    async def create(self, record: InvocationRecord) -> bool:
        """Store a new record unless one exists."""
        key = (record.app_name, record.invocation_id)
        if key in self._records:
            return False
        self._records[key] = record.model_copy(deep=True)
        self._saved_at[key] = platform.get_time()
        return True

    async def get(self, app_name: str, invocation_id: str) -> InvocationRecord | None:
        """A copy of the record."""
        record = self._records.get((app_name, invocation_id))
        return record.model_copy(deep=True) if record else None

    async def load(self, app_name: str, invocation_id: str) -> Loaded:
        """The record, the cancel flag and the results."""
        return Loaded(await self.get(app_name, invocation_id),
                      await self.is_cancelled(app_name, invocation_id),
                      await self.results(app_name, invocation_id))

    async def save(self, record: InvocationRecord) -> None:
        """Overwrite and wake watchers."""
        key = (record.app_name, record.invocation_id)
        self._records[key] = record.model_copy(deep=True)
        self._saved_at[key] = platform.get_time()
        condition = self._changed.get(key)
        if condition is not None:
            async with condition:
                condition.notify_all()

    async def put_result(self, app_name: str, invocation_id: str, result: ToolResult) -> bool:
        """First final result wins, and so does a paused branch's turn (as on Redis).

        A paused branch is continued by the orchestrator, which answers its call with an
        event: any other result for that call is another run of its job, never committed.
        """
        results = self._results.setdefault((app_name, invocation_id), {})
        existing = results.get(result.function_call_id)
        if existing is not None and (existing.response is not None or existing.events):
            return False
        results[result.function_call_id] = result
        return True

    async def results(self, app_name: str, invocation_id: str) -> dict[str, ToolResult]:
        """Results by call id."""
        return dict(self._results.get((app_name, invocation_id), {}))

    async def request_cancel(self, app_name: str, invocation_id: str) -> None:
        """Flag for cancellation."""
        self._cancelled.add((app_name, invocation_id))

    async def is_cancelled(self, app_name: str, invocation_id: str) -> bool:
        """True once flagged."""
        return (app_name, invocation_id) in self._cancelled

    async def list_invocations(self, query: InvocationQuery) -> InvocationPage:
        """A page of a session's invocations (newest first) or of an app's (latest saved first)."""
        entries = []
        for key, record in self._records.items():
            if key[0] != query.app_name:
                continue
            if query.of_session:
                if (record.user_id, record.session_id) != (query.user_id, query.session_id) \
                        or key in self._unlisted:
                    continue
                position = Position(record.created_at, record.invocation_id)
            else:
                position = Position(self._saved_at[key], record.invocation_id)
            entries.append((position, record))
        page = page_of(query, entries)
        return InvocationPage([record.model_copy(deep=True) for record in page.records],
                              page.next_cursor)

    def forget_session(self, key: SessionKey) -> None:
        """Leave the invocations of ``key``, a deleted session, out of its list from now on."""
        self._unlisted.update(
            (app, invocation_id) for (app, invocation_id), record in self._records.items()
            if (app, record.user_id, record.session_id) == key)

    def ran_in_session(self, key: SessionKey) -> list[str]:
        """The ids of ``key``'s invocations that ran and did not finish (paused, running)."""
        return [record.invocation_id for (app, _), record in self._records.items()
                if (app, record.user_id, record.session_id) == key
                and record.status in (InvocationStatus.PAUSED, InvocationStatus.RUNNING)]

    async def wait_for(
        self, app_name: str, invocation_id: str, statuses: set[InvocationStatus]
    ) -> InvocationRecord:
        """Wait until the record reaches one of ``statuses``."""
        key = (app_name, invocation_id)
        condition = self._changed.setdefault(key, asyncio.Condition())
        async with condition:
            while True:
                record = self._records.get(key)
                if record is not None and record.status in statuses:
                    return record.model_copy(deep=True)
                await condition.wait()


class InMemorySessionQueue:
    """Work queues and leases in this process (embedded mode); no expiry is needed."""

    def __init__(self, store: InvocationStore | None = None) -> None:
        self._store = store
        self._queues: dict[SessionKey, deque[WorkItem]] = {}
        self._in_progress: dict[SessionKey, list[WorkItem]] = {}
        self._leases: dict[SessionKey, str] = {}
        self._tokens = itertools.count(1)
        self._busy: dict[SessionKey, set[str]] = {}
        """The session's invocations that are :func:`in_flight` (see ``claim_or_release``)."""
        self._held: dict[SessionKey, list[WorkItem]] = {}
        """New messages held while it is, in order."""

    async def push(self, key: SessionKey, item: WorkItem, result: ToolResult | None = None) -> bool:
        """Append an item (after storing ``result``, if it is the first final one)."""
        if result is not None:
            if self._store is None:
                raise ValueError("This queue has no invocation store to put results in.")
            if not await self._store.put_result(key[0], item.invocation_id, result):
                return False
        self._queues.setdefault(key, deque()).append(item)
        return True

    async def create_and_push(self, key: SessionKey, record: InvocationRecord, item: WorkItem) -> bool:
        """Store a new record and append its item (no await in between); False if it existed."""
        if self._store is None:
            raise ValueError("This queue has no invocation store to put records in.")
        if not await self._store.create(record):
            return False
        self._queues.setdefault(key, deque()).append(item)
        return True

    async def push_answers(
        self, key: SessionKey, item: WorkItem, results: Sequence[ToolResult]
    ) -> str | None:
        """Store every result and append the item, all or nothing (no await in between)."""
        if self._store is None:
            raise ValueError("This queue has no invocation store to put results in.")
        stored = await self._store.results(key[0], item.invocation_id)
        fresh = [r for r in results if stored.get(r.function_call_id) != r]
        for result in fresh:
            existing = stored.get(result.function_call_id)
            if existing is not None and existing.response is not None:
                return result.function_call_id
        if not fresh:
            return None  # every answer is in exactly so already (as on Redis)
        for result in fresh:
            await self._store.put_result(key[0], item.invocation_id, result)
        self._queues.setdefault(key, deque()).append(item)
        return None

    def session_deleted(self, key: SessionKey) -> bool:
        """Queue what ends a deleted session's unfinished invocations (as on Redis).

        Its held messages go back to the queue's head (each start then fails: no session),
        and each invocation that ran (paused, running) gets a ``session_deleted`` item. True
        if anything is queued (the caller drains).
        """
        self._busy.pop(key, None)
        queue = self._queues.setdefault(key, deque())
        queue.extendleft(reversed(self._held.pop(key, [])))
        if isinstance(self._store, InMemoryInvocationStore):
            self._store.forget_session(key)
            queue.extend(WorkItem(kind="session_deleted", invocation_id=invocation_id)
                         for invocation_id in self._store.ran_in_session(key))
        return bool(queue)

    async def take(
        self, key: SessionKey, hint: str | None = None, known: Session | None = None
    ) -> Taken | None:
        """Take the lease if free, then claim the first item (or release at once if none).

        A previous holder's leftovers go back to the head of the queue first.
        """
        if key in self._leases:
            return None
        token = str(next(self._tokens))
        self._leases[key] = token
        leftovers = self._in_progress.pop(key, [])
        if leftovers:
            self._queues.setdefault(key, deque()).extendleft(reversed(leftovers))
        return Taken(token, await self.claim_or_release(key, token), None)

    async def renew(self, key: SessionKey, token: str) -> bool:
        """Leases here never expire."""
        return self._leases.get(key) == token

    async def release(self, key: SessionKey, token: str) -> None:
        """Free the lease."""
        if self._leases.get(key) == token:
            del self._leases[key]

    async def claim_or_release(
        self,
        key: SessionKey,
        token: str,
        finished: WorkItem | None = None,
        save: InvocationRecord | None = None,
    ) -> WorkItem | None:
        """Save ``save`` in the store, then the next item, or release the lease when empty."""
        if self._leases.get(key) != token:
            raise StaleSessionError(f"Lost the lease of session {key!r}: its record is not saved.")
        if save is not None:
            if self._store is None:
                raise RuntimeError("This queue was built without a store to save records in.")
            await self._store.save(save)
            self._mark_busy(key, save)
        item = self._claim(key, finished)
        if item is None:
            await self.release(key, token)
        return item

    def _mark_busy(self, key: SessionKey, saved: InvocationRecord) -> None:
        """Count ``saved`` busy if it is in flight, else not (any more)."""
        if in_flight(saved):
            self._busy.setdefault(key, set()).add(saved.invocation_id)
        else:
            self._busy.get(key, set()).discard(saved.invocation_id)

    def _claim(self, key: SessionKey, finished: WorkItem | None) -> WorkItem | None:
        """Forget ``finished``; pop the oldest item into the in-progress list.

        New messages met while the session is busy are held instead (as on Redis).
        """
        if finished is not None:
            with contextlib.suppress(ValueError):
                self._in_progress.get(key, []).remove(finished)
        busy = self._busy.get(key)
        if not busy and self._held.get(key):  # nobody busy: held messages back first, in order
            self._queues.setdefault(key, deque()).extendleft(reversed(self._held.pop(key)))
        queue = self._queues.get(key)
        while queue:
            item = queue.popleft()
            if busy and item.kind == "start" and item.invocation_id not in busy:
                self._held.setdefault(key, []).append(item)
                continue
            self._in_progress.setdefault(key, []).append(item)
            return item
        return None
