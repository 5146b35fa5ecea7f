"""What the HTTP routes stand on: the apps' descriptions, Redis services, and the JSON forms.

The server never runs an agent: a run is enqueued exactly as ``Client.enqueue`` does and
followed on the invocation's live stream, through the process's one stream reader
(:mod:`workers.api.stream_hub`). The apps are imported only to describe them.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

from fastapi import HTTPException

from config import Settings
from orchestrator import platform
from orchestrator.distributed.intake import RequestError
from orchestrator.distributed.models import InvocationRecord, InvocationStatus
from orchestrator.distributed.registry import AppRegistry
from orchestrator.distributed.stores import AnswerRejectedError
from orchestrator.errors import SessionNotFoundError, UnknownInvocationError, no_invocation_text
from orchestrator.events.event import Event
from orchestrator.sessions.session import Session
from workers.api.batching import TurnBatcher
from workers.api.outages import EnqueueUnanswered, is_outage
from workers.api.security import Access
from workers.api.stream_hub import StreamHub
from workers.api.watches import LiveItem
from workers.enqueue import refusal
from workers.runtime import Runtime, Services

_CONNECTIONS = 10_000
"""Redis connections one server process may open (redis-py's asyncio pool allows 100, and
refuses a command past that instead of waiting): each request in flight holds one during a
command. Followers hold none: the stream reader has its own."""


class Rider(Protocol):
    """Commands that go in an enqueue's transaction, after its own (:meth:`Backend.enqueue`)."""

    def queue(self, pipe: Any) -> None:
        """Add the commands to ``pipe`` (a transaction)."""

    def took(self, replies: list[Any]) -> None:
        """Their replies (errors in place)."""


class Backend:
    """One per server process: settings, access rules, the apps, and Redis services."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.access = Access.from_settings(settings)
        self.registry = AppRegistry.from_specs(settings.app_specs())
        self.runtime = Runtime(settings, load_apps=False)
        self._hub: StreamHub | None = None
        self._stopping = False
        self._batcher: TurnBatcher | None = None
        self._transactions: TurnBatcher | None = None

    async def services(self) -> Services:
        """The Redis services of the server's event loop."""
        services = await self.runtime.services()
        pool = services.redis.connection_pool
        if pool.max_connections < _CONNECTIONS:
            pool.max_connections = _CONNECTIONS
        return services

    async def hub(self) -> StreamHub:
        """The stream reader of the server's event loop (started on first use)."""
        if self._hub is None or self._hub.loop is not asyncio.get_running_loop():
            services = await self.services()
            self._hub = StreamHub(self.settings.redis_url or "", services.redis)
            if self._stopping:
                self._hub.stop_followers()
        return self._hub

    def stop_followers(self) -> None:
        """The server is stopping: its follows end now (see :meth:`StreamHub.stop_followers`).

        On the server's loop; a request it takes after this ends its follow at once.
        """
        self._stopping = True
        if self._hub is not None:
            self._hub.stop_followers()

    async def batcher(self) -> TurnBatcher:
        """The server's loop's :class:`TurnBatcher` (commands of many requests, one pipeline)."""
        if self._batcher is None or self._batcher.loop is not asyncio.get_running_loop():
            services = await self.services()
            self._batcher = TurnBatcher(services.redis)
        return self._batcher

    async def transactions(self) -> TurnBatcher:
        """As :meth:`batcher`, for commands that must run together: one MULTI/EXEC per turn.

        The enqueues; a run's look at its pause (the record, and the entries up to its own).
        """
        if self._transactions is None or self._transactions.loop is not asyncio.get_running_loop():
            services = await self.services()
            self._transactions = TurnBatcher(services.redis, transaction=True)
        return self._transactions

    async def aclose(self) -> None:
        """Stop the stream reader (on the server's loop, as it shuts down)."""
        if self._hub is not None:
            hub, self._hub = self._hub, None
            await hub.aclose()
        for batcher in (self._batcher, self._transactions):
            if batcher is not None:
                await batcher.aclose()
        self._batcher = self._transactions = None

    def close(self) -> None:
        """Close the Redis connections."""
        self.runtime.close()

    async def enqueue(self, fields: dict[str, Any], *, session_must_exist: bool = False,
                      rider: Rider | None = None) -> InvocationRecord:
        """Record and queue an invocation (the checks of every door).

        A request refused at intake (a malformed message, state delta...) is not stored: 422
        saying why (nothing of it kept). A repeated invocation id returns the record stored
        first, as it stands, a failed one included (not refused: its run goes on to say why).

        ``session_must_exist``: 404 ``Session not found`` (nothing queued) for a session that
        does not exist, checked in the enqueue's own round trip. ``rider``: commands sent in
        the enqueue's transaction after its own (none if the request is refused at intake).

        The invocation id is made here if the request has none: an outage met by the
        enqueue raises :class:`~workers.api.outages.EnqueueUnanswered` naming it (Redis may
        have stored the invocation before its reply was lost; sent again with that id, the
        request gets the invocation stored under it, not a second one).
        """
        if fields.get("invocation_id") is None:  # "" is refused by the checks, not replaced
            fields = {**fields, "invocation_id": platform.new_invocation_id()}
        # The services with this server's connection cap; the transaction goes with those
        # of the other requests of this turn of the loop.
        batcher = await self.transactions()

        async def send(queue: Callable[[Any], object]) -> list[Any]:
            if rider is None:
                return await batcher.replies(queue)
            own = 0

            def queue_both(pipe: Any) -> None:
                nonlocal own
                start = len(pipe)
                queue(pipe)
                own = len(pipe) - start
                rider.queue(pipe)

            replies = await batcher.replies(queue_both)
            rider.took(replies[own:])
            return replies[:own]

        try:
            record, stored_under = await self.runtime.submit_invocation(
                fields, session_must_exist=session_must_exist, send=send, store_refused=False)
        except RequestError as error:
            raise HTTPException(422, str(error)) from None
        except SessionNotFoundError:  # ADK's detail names the session
            raise HTTPException(404, f"Session not found: {fields.get('session_id')}") from None
        except Exception as error:
            if not is_outage(error):
                raise
            raise EnqueueUnanswered(fields["invocation_id"]) from error
        if stored_under is None:  # refused at intake: its failed record was not stored
            raise HTTPException(422, refusal(record))
        return record

    async def answer(self, app_name: str, invocation_id: str, function_call_id: str,
                     response: Any) -> None:
        """Answer a pending call through the checked answer path.

        422 for malformed input, 404 for an unknown invocation, 409 for a call the invocation
        does not wait for (or one answered already).
        """
        await self.answer_all(app_name, invocation_id, [(function_call_id, response)])

    async def answer_all(self, app_name: str, invocation_id: str,
                         answers: list[tuple[str, Any]]) -> None:
        """Answer pending calls of one invocation, all or nothing (as :meth:`answer`)."""
        services = await self.services()
        try:
            await services.service.answer_all(app_name, invocation_id, answers)
        except RequestError as error:
            raise HTTPException(422, str(error)) from None
        except UnknownInvocationError as error:  # as the other routes of an invocation
            raise HTTPException(404, str(error)) from None
        except AnswerRejectedError as error:
            raise HTTPException(409, str(error)) from None

    async def record(self, app_name: str, invocation_id: str) -> InvocationRecord:
        """The invocation's record; 404 if there is none."""
        services = await self.services()
        record = await services.store.get(app_name, invocation_id)
        if record is None:
            raise HTTPException(404, no_invocation_text(app_name, invocation_id).removesuffix("."))
        return record

    async def session(self, app_name: str, user_id: str, session_id: str) -> Session:
        """The session; 404 ``Session not found`` (ADK's words) if there is none."""
        services = await self.services()
        session = await services.sessions.get_session(
            app_name=app_name, user_id=user_id, session_id=session_id)
        if session is None:
            raise HTTPException(404, "Session not found")
        return session

    async def follow(
        self, record: InvocationRecord, *, until: frozenset[InvocationStatus] = InvocationStatus.SETTLED,
        after: str | None = None, timeout: float | None = None, answered_pauses: bool = False,
    ) -> AsyncIterator[LiveItem]:
        """The invocation's live stream (replayed from its start, or after ``after``).

        A pause whose calls all have their answers stored does not end it (see
        :meth:`StreamHub.follow`, and ``answered_pauses``). TimeoutError if ``timeout``
        seconds pass before it ends.
        """
        hub = await self.hub()
        async for item in hub.follow(record.app_name, record.invocation_id, until=until,
                                     after=after, timeout=timeout, answered_pauses=answered_pauses):
            yield item


def event_json(event: Event) -> dict[str, Any]:
    """An event as ADK's API server writes it: camelCase, no nulls."""
    return event.to_wire()


def session_json(session: Session, *, with_events: bool = True) -> dict[str, Any]:
    """A session as ADK's API server writes it (events left out of lists)."""
    shown = session.model_dump(mode="json", by_alias=True, exclude_none=True, exclude={"events"})
    shown["events"] = [event_json(e) for e in session.events] if with_events else []
    return shown


def record_json(record: InvocationRecord) -> dict[str, Any]:
    """An invocation's record for clients (without the stored message)."""
    return {
        "invocationId": record.invocation_id, "appName": record.app_name,
        "userId": record.user_id, "sessionId": record.session_id,
        "status": record.status.value, "error": record.error,
        "pendingCalls": record.pending_calls, "createdAt": record.created_at,
        "updatedAt": record.updated_at,
    }


def sse(data: Any, *, event: str | None = None, entry_id: str | None = None) -> str:
    """One Server-Sent Events frame."""
    head = (f"id: {entry_id}\n" if entry_id else "") + (f"event: {event}\n" if event else "")
    return f"{head}data: {json.dumps(data, separators=(',', ':'))}\n\n"
