"""Client: enqueue invocations, follow them, answer their pending calls, cancel them.

Usable from any Python service (synchronous API). Services that do not import this project
can ``send_task`` the documented task names instead (see the README).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection, Iterator
from functools import cached_property
from typing import TYPE_CHECKING, Any

import redis
from google.genai import types

from config import Settings, get_settings
from orchestrator.backends.redis import keys
from orchestrator.backends.redis.connection import connect_sync
from orchestrator.backends.redis.streams import RedisEventStream
from orchestrator.distributed.intake import (
    check_identifier,
    check_json,
    check_optional_identifier,
    check_size,
)
from orchestrator.distributed.invocation_lists import DEFAULT_LIMIT, InvocationPage, invocation_query
from orchestrator.distributed.models import InvocationRecord, InvocationStatus, PendingCall
from orchestrator.distributed.streams import StreamItem
from orchestrator.errors import PayloadError, RequestError, SessionNotFoundError
from orchestrator.events.event import Event
from orchestrator.sessions.session import Session
from workers.client_follow import (
    check_statuses,
    check_timeout,
    follow_stream,
    iterate,
    no_invocation,
    wait_for_status,
)
from workers.enqueue import (
    AppCheck,
    check_same_invocation,
    invoke_kwargs,
    no_session,
    prepare_invocation,
    record_and_queue,
    send_invoke,
)
from workers.runtime import Runtime

if TYPE_CHECKING:  # Celery is imported only by a client that sends through it (see _celery)
    from celery import Celery

SETTLED = InvocationStatus.SETTLED
"""``InvocationStatus.SETTLED`` under a short name (the default ``until``)."""
FINISHED = InvocationStatus.FINISHED
"""``InvocationStatus.FINISHED`` under a short name (``until=FINISHED`` follows through pauses)."""

SENT_REMEMBERED = 10_000
"""How many invocations sent with ``enqueue_via_celery`` a Client remembers (see ``wait``)."""


class InvocationFinishedError(RequestError):
    """The invocation has finished (completed, failed or cancelled): it cannot be cancelled.

    A RequestError (the API answers 409), about ``invocation_id``; ``status`` is its status.
    """

    def __init__(self, invocation_id: str, status: InvocationStatus) -> None:
        super().__init__("invocation_id", f"{invocation_id!r} is {status.value}; it cannot be "
                                          "cancelled.")
        self.args = (f"invocation {invocation_id!r} is {status.value}; it cannot be cancelled.",)
        self.status = status


class Client:
    """Enqueues invocations for orchestrators and reads their state, through Redis.

    By default :meth:`enqueue` records the invocation and queues its start directly in Redis,
    where orchestrators take their work from (the same path a worker's result takes to
    resume an invocation): one Redis round trip instead of a Celery hop, sent from the
    caller's own thread (:meth:`wait` follows the invocation's status entries there too).
    With ``enqueue_via_celery`` it sends the documented ``adk_celery.invoke`` task instead,
    so each invocation's start also shows in Flower, at the cost of that hop.
    """

    def __init__(self, settings: Settings | None = None, *, enqueue_via_celery: bool = False) -> None:
        self._settings = settings or get_settings()
        self._via_celery = enqueue_via_celery
        self._runtime = Runtime(self._settings, load_apps=False, celery_factory=lambda: self._celery)
        self._built: Any = None
        self._redis: redis.Redis | None = None
        self._check_app = AppCheck(self._settings)
        """RequestError for an app the client's ``Settings.apps`` does not name, if any."""
        self._seen: dict[tuple[str, str], str] = {}
        """Per invocation answered here: its newest status entry when it was answered (the
        next ``wait`` returns a status that came after it, not the pause it answered)."""
        self._sent: dict[tuple[str, str], None] = {}
        """Invocations sent as ``adk_celery.invoke`` tasks, oldest first: an orchestrator
        records them when it takes the task, and until then ``wait`` and ``follow`` wait
        for them rather than saying they do not exist."""

    @cached_property
    def _celery(self) -> Celery:
        """The client's Celery app, built on first use (``enqueue_via_celery``)."""
        from workers.celery_app import create_celery_app  # Celery and kombu: only to send a task

        return create_celery_app(self._settings)

    def _services(self) -> Any:
        """The runtime's services (built on its loop once; later calls cost no thread hop)."""
        if self._built is None:
            self._built = self._runtime.run(self._runtime.services())
        return self._built

    def create_session(
        self, app_name: str, user_id: str, *, state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> Session:
        """Create a session (optionally with initial state); RequestError for bad input.

        The initial state is the caller's own choice, as with google-adk's session services,
        so the ``state_delta`` rules of an enqueue do not apply to it.
        """
        limits = self._runtime.limits
        check_identifier("app_name", app_name, limits)
        check_identifier("user_id", user_id, limits)
        check_optional_identifier("session_id", session_id, limits)
        self._check_app(app_name)
        if state is not None:
            if not isinstance(state, dict):
                raise PayloadError("state", f"must be a JSON object, not {type(state).__name__}.")
            check_json("state", state, limits)
            check_size(state, limits.max_payload_bytes, "state")
        sessions = self._services().sessions
        return self._runtime.run(sessions.create_session(
            app_name=app_name, user_id=user_id, state=state, session_id=session_id))

    def enqueue(
        self,
        app_name: str,
        user_id: str,
        message: str | types.Content | None,
        *,
        session_id: str | None = None,
        state_delta: dict[str, Any] | None = None,
        invocation_id: str | None = None,
        streaming: bool = False,
        custom_metadata: dict[str, Any] | None = None,
    ) -> str:
        """Queue a message for a session (a new session when ``session_id`` is None).

        Returns the invocation id once the invocation is recorded and queued; it runs on an
        orchestrator. ``streaming`` runs the model with SSE streaming, so :meth:`follow` also
        sees the partial chunks of each answer. ``custom_metadata`` (a JSON object) is merged
        into every event of the invocation, as ``RunConfig.custom_metadata`` does in process.
        A malformed message, state delta or metadata makes a
        failed invocation whose error says what was wrong; a malformed app name, user,
        session or invocation id (an empty one too: leave it out) raises RequestError (a
        ValueError), and so does an app the client's ``Settings.apps`` does not name, when
        it names any; a ``session_id`` of no session of that user raises
        SessionNotFoundError. Nothing is stored then. Enqueueing again with the same
        ``invocation_id`` is a no-op (RequestError if another user or session has that id, or
        if it comes with another message or state delta).
        """
        kwargs = invoke_kwargs(app_name, user_id, message, session_id=session_id,
                               state_delta=state_delta, invocation_id=invocation_id,
                               streaming=streaming, custom_metadata=custom_metadata)
        invocation_id = kwargs["invocation_id"]
        # The checks of every door, before anything is stored or sent.
        record, new_session = prepare_invocation(kwargs, self._runtime.limits)
        self._check_app(app_name)
        if record.status is InvocationStatus.FAILED or self._via_celery:
            if session_id is not None and not self._sync_redis().exists(
                    keys.session(app_name, user_id, session_id)):
                raise no_session(record)
        if record.status is InvocationStatus.FAILED:  # refused payload: recorded, never sent
            self._runtime.run(self._services().store.create(record))
        elif self._via_celery:
            send_invoke(self._celery, self._settings.invocations_queue, kwargs)
            self._sent[(app_name, invocation_id)] = None
            while len(self._sent) > SENT_REMEMBERED:
                del self._sent[next(iter(self._sent))]
        else:
            services = self._services()
            try:
                queued = record_and_queue(self._sync_redis(), services, record, new_session,
                                          session_must_exist=session_id is not None)
            except SessionNotFoundError:
                raise no_session(record) from None
            if not queued:
                existing = self._runtime.run(services.store.get(app_name, invocation_id))
                if existing is not None:
                    check_same_invocation(existing, record, session_id is not None)
        return invocation_id

    def _sync_redis(self) -> redis.Redis:
        """A synchronous connection for calls made in the caller's thread (no loop hop)."""
        if self._redis is None:
            # Reconnects and resends with backoff, as the services' clients: a Redis restart
            # is ridden out rather than failing enqueue, wait or status at once.
            self._redis = connect_sync(self._settings.redis_url or "")
        return self._redis

    def status(self, app_name: str, invocation_id: str) -> InvocationRecord | None:
        """The invocation's record (status, pending calls, error), or None if unknown."""
        self._check_ids(app_name, invocation_id)
        store = self._services().store
        return self._runtime.run(store.get(app_name, invocation_id))

    def calls(self, app_name: str, invocation_id: str) -> list[PendingCall]:
        """Where each call the invocation waits for stands; [] if none (or unknown).

        Each has its tool and is queued, running (on which worker, last seen when), retrying
        (a lost job was dispatched again), waiting for an answer from outside, or answered
        (the invocation waits for its other calls).
        """
        self._check_ids(app_name, invocation_id)
        store = self._services().store
        record = self._runtime.run(store.get(app_name, invocation_id))
        return self._runtime.run(store.pending_details(record)) if record is not None else []

    def wait(
        self,
        app_name: str,
        invocation_id: str,
        *,
        timeout: float | None = 60.0,
        until: Collection[InvocationStatus | str] = InvocationStatus.SETTLED,
    ) -> InvocationRecord:
        """Block until the invocation is paused or finished; TimeoutError after ``timeout``.

        ``until``: the statuses to wait for (``InvocationStatus`` members or their values);
        a finished status always ends the wait, as nothing comes after it. After
        :meth:`answer` on this client, it waits for a status that came after that answer,
        not the pause the answer ends (``wait``, ``answer``, ``wait`` reads as the flow it
        is; an answer that leaves the invocation paused on its other calls gets a status of
        its own, still paused: ``calls`` shows it answered). Whoever answered (another
        client, the CLI, the HTTP API), a pause whose calls all have their answers stored is
        over, its resume queued: it is never returned, the wait goes on to the status that
        comes next. A pause still waiting for a call is returned at once, every time.
        InvocationNotFoundError at once for an unknown invocation; RequestError for a
        malformed ``until`` or ``timeout`` (seconds, 0 or more; None or ``math.inf``: no
        limit).
        """
        self._check_ids(app_name, invocation_id)
        limit = check_timeout(timeout)
        statuses = set(check_statuses(until) | InvocationStatus.FINISHED)
        record = wait_for_status(self._sync_redis(), app_name, invocation_id, statuses, limit,
                                 after=self._seen.pop((app_name, invocation_id), None),
                                 sent=self._sent)
        if record is None:
            raise TimeoutError(
                f"Invocation {invocation_id!r} did not reach {sorted(s.value for s in statuses)} "
                f"within {timeout} s."
            )
        return record

    def afollow(
        self,
        app_name: str,
        invocation_id: str,
        *,
        timeout: float | None = None,
        until: Collection[InvocationStatus | str] = InvocationStatus.SETTLED,
        from_start: bool = True,
    ) -> AsyncIterator[StreamItem]:
        """``follow`` as an async iterator, on the caller's own event loop (see ``follow``).

        Malformed arguments raise at the call; an unknown invocation at the first item.
        """
        self._check_ids(app_name, invocation_id)
        return follow_stream(self._settings, app_name, invocation_id, check_timeout(timeout),
                             check_statuses(until), from_start, self._sent)

    def follow(
        self,
        app_name: str,
        invocation_id: str,
        *,
        timeout: float | None = None,
        until: Collection[InvocationStatus | str] = InvocationStatus.SETTLED,
        from_start: bool = True,
    ) -> Iterator[StreamItem]:
        """Iterate over the invocation's live stream: its events and status changes.

        Replays from the invocation's start (``from_start``), then blocks for what comes
        next, wherever the invocation runs; partial chunks are included when it was enqueued
        with ``streaming``. Ends after a finished status, or after a status in ``until``
        that is still current (default: paused; a replay goes past pauses the invocation has
        resumed from; pass ``FINISHED`` to follow through pauses), or raises TimeoutError
        after ``timeout`` seconds. Breaking out of the loop (or closing
        the iterator) stops the follow cleanly. Raises at once InvocationNotFoundError for
        an unknown invocation, RequestError for a malformed id, ``until`` or ``timeout``.
        """
        self._check_ids(app_name, invocation_id)
        limit, statuses = check_timeout(timeout), check_statuses(until)
        if (not self._sync_redis().exists(keys.invocation(app_name, invocation_id))
                and (app_name, invocation_id) not in self._sent):
            raise no_invocation(app_name, invocation_id)
        services = self._services()
        stream = services.events or RedisEventStream(
            services.redis, ttl_seconds=self._settings.record_ttl_seconds)
        return iterate(self._runtime, stream.follow(
            app_name, invocation_id, from_start=from_start, until=statuses, timeout=limit))

    def invocations(
        self, app_name: str, *, status: InvocationStatus | str | None = None,
        user_id: str | None = None, session_id: str | None = None, limit: int = DEFAULT_LIMIT,
        cursor: str | None = None,
    ) -> InvocationPage:
        """A page of invocations, of a session or of the app.

        With ``user_id`` and ``session_id``: that session's, newest first; without: the app's,
        latest updated first. ``status`` keeps one status only. Pass the page's
        ``next_cursor`` as ``cursor`` for the next page (None: the last).
        RequestError (naming the field) for a malformed id, status, limit or cursor.
        """
        query = invocation_query(
            app_name, status=status.value if isinstance(status, InvocationStatus) else status,
            user_id=user_id, session_id=session_id, limit=limit, cursor=cursor,
            limits=self._runtime.limits)
        return self._runtime.run(self._services().store.list_invocations(query))

    def list_sessions(self, app_name: str, user_id: str | None = None) -> list[Session]:
        """The sessions of a user (every user's when None), without events.

        RequestError for a malformed app name or user id (an empty one too: leave it out).
        """
        check_identifier("app_name", app_name, self._runtime.limits)
        if user_id is not None:
            check_identifier("user_id", user_id, self._runtime.limits)
        sessions = self._services().sessions
        return list(self._runtime.run(
            sessions.list_sessions(app_name=app_name, user_id=user_id)).sessions)

    def events(self, app_name: str, invocation_id: str) -> list[Event]:
        """The committed events of the invocation, oldest first."""
        self._check_ids(app_name, invocation_id)
        services = self._services()
        record = self._runtime.run(services.store.get(app_name, invocation_id))
        if record is None:
            return []
        session = self._runtime.run(services.sessions.get_session(
            app_name=app_name, user_id=record.user_id, session_id=record.session_id))
        if session is None:
            return []
        return [e for e in session.events if e.invocation_id == invocation_id]

    def answer(
        self, app_name: str, invocation_id: str, function_call_id: str, response: dict[str, Any]
    ) -> None:
        """Answer a pending call.

        Raises RequestError for malformed input and AnswerRejectedError if the invocation
        does not wait for that call; nothing is stored either way.
        """
        # The ledger and flows' call names only, not the runner (no InvocationService built).
        from orchestrator.distributed.outside_answers import take_answers

        self._check_ids(app_name, invocation_id)
        services = self._services()
        seen = self._sync_redis().xrevrange(keys.invocation_statuses(app_name, invocation_id), count=1)
        # Stored already: this very answer sent again (a retry, a second operator), taken
        # once and changing nothing, so no status comes after it for ``wait`` to wait for.
        repeat = function_call_id in self._runtime.run(
            services.store.results(app_name, invocation_id))
        # What ``services.service.answer`` does, on the same store, queue, sessions and limits.
        self._runtime.run(take_answers(services.store, services.queue, services.sessions,
                                       self._runtime.limits, app_name, invocation_id,
                                       [(function_call_id, response)]))
        if seen and not repeat:
            self._seen[(app_name, invocation_id)] = seen[0][0]

    def cancel(self, app_name: str, invocation_id: str) -> InvocationStatus:
        """Ask for the invocation to be cancelled; returns the status it had when asked.

        The cancel is queued for the invocation's session and its flag set, as the HTTP
        API's cancel does; an orchestrator records it (``wait`` or ``follow`` shows it end
        ``cancelled``, or ``completed`` if it was done by then). An invocation still queued
        runs nothing. The next ``wait`` on this client returns a status that came after the
        cancel. RequestError for malformed identifiers, InvocationNotFoundError for an
        unknown invocation and InvocationFinishedError for one that already finished
        (completed, failed or cancelled), as the CLI's exit 2 and the API's 404 and 409;
        nothing is written then. Redis out of reach raises redis' ConnectionError (after the
        reconnect attempts).
        """
        self._check_ids(app_name, invocation_id)
        redis = self._sync_redis()
        # Before the record: an end saved after this read comes after it for ``wait``.
        seen = redis.xrevrange(keys.invocation_statuses(app_name, invocation_id), count=1)
        raw = redis.hget(keys.invocation(app_name, invocation_id), "record")
        if not raw:
            raise no_invocation(app_name, invocation_id)
        record = InvocationRecord.model_validate_json(raw)
        if record.status.is_finished:
            raise InvocationFinishedError(invocation_id, record.status)
        from orchestrator.distributed.outside_answers import queue_cancel  # the call names: flows'

        services = self._services()
        self._runtime.run(queue_cancel(services.store, services.queue, record))
        if seen:
            self._seen[(app_name, invocation_id)] = seen[0][0]
        return record.status

    def _check_ids(self, app_name: Any, invocation_id: Any) -> None:
        """RequestError unless both are well-formed identifiers."""
        check_identifier("app_name", app_name, self._runtime.limits)
        check_identifier("invocation_id", invocation_id, self._runtime.limits)

    def close(self) -> None:
        """Close the client's Redis and broker connections and stop its background loop."""
        self._built = None
        if self._redis is not None:
            self._redis.close()
            self._redis = None
        self._runtime.close()
        if "_celery" in self.__dict__:  # built (an app never built has nothing to close)
            self._celery.close()

