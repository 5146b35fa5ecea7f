"""RedisSessionService: sessions stored in Redis, shared by any number of processes.

Semantics are those of :class:`InMemorySessionService` (adk-reference §4); what Redis adds is
that several orchestrator processes see the same sessions, and that an append is one atomic
Lua script whose cost depends on the size of the event, never on the length of the history.

Storage (key names in :mod:`orchestrator.backends.redis.keys`):

* session metadata: a hash (id, app/user, create and last-update time, creation sequence);
* session state: a hash with one field per state key, the value JSON-encoded, so an append
  writes only the keys of its delta; ``app:``/``user:`` state live in per-app / per-user
  hashes (prefix stripped), merged into every session read, exactly like the in-memory store;
* events: a list of Event wire-JSON strings, plus a set of event ids for idempotency;
* indexes: a sorted set per user (session id) and per app (``[user, session]``), scored by the
  last update time, which ``list_sessions`` reads oldest first.

The create and append scripts, with their operands, are in
:mod:`orchestrator.backends.redis.session_scripts`; the reads and their decoding in
:mod:`orchestrator.backends.redis.session_reads`. An orchestrator appends through a
:class:`LeasedSessionWriter` (:meth:`RedisSessionService.leased_writer`): its appends are
fenced by the session's lease and mirrored to the invocation's live stream (see
:mod:`orchestrator.backends.redis.session_writer`). A fenced append whose lease is no longer held with
its token writes nothing and raises :class:`~orchestrator.errors.StaleSessionError`.
"""

from __future__ import annotations

import uuid
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from orchestrator import platform
from orchestrator.backends.redis import keys
from orchestrator.backends.redis.codec import decode_hash, loads, pairs_to_dict, text
from orchestrator.backends.redis.connection import RedisClientOwner
from orchestrator.backends.redis.session_reads import (
    first_unread,
    list_sessions,
    queue_session_reads,
    session_after,
    session_from_replies,
    session_read_keys,
)
from orchestrator.backends.redis.session_scripts import (
    ANSWERED,
    APPEND,
    CANCELLED,
    CREATE,
    DELETE,
    EXISTS,
    NOT_FOUND,
    STALE,
    AppendEvent,
    DeleteSession,
    app_member,
    create_operands,
    encode_state,
    score,
    session_keys,
)
from orchestrator.backends.redis.session_writer import (
    LeasedSessionWriter,
    Mirror,
    jobs_sent_with,
)
from orchestrator.distributed.cancel_seals import is_seal
from orchestrator.distributed.models import WorkItem
from orchestrator.errors import (
    AlreadyAnsweredError,
    AlreadyExistsError,
    InvocationCancelledError,
    SessionNotFoundError,
    StaleSessionError,
)
from orchestrator.events.answers import final_answer_ids
from orchestrator.events.event import Event
from orchestrator.sessions.base_session_service import (
    BaseSessionService,
    merge_state,
    split_state_delta,
)
from orchestrator.sessions.session import GetSessionConfig, ListSessionsResponse, Session
from orchestrator.sessions.state import without_temp

FENCE_AFTER_DELETE_SECONDS = 24 * 3600
"""How long a deleted session's fencing counter is kept (see ``delete_session``)."""


class RedisSessionService(RedisClientOwner, BaseSessionService):
    """Sessions, user state and app state kept in Redis (distributed mode).

    Pass a ``redis_url`` (the service opens and owns a client; close it with :meth:`aclose`)
    or an existing ``redis.asyncio.Redis`` ``client`` (the caller keeps ownership). With
    neither, ``ADK_CELERY_REDIS_URL`` from the settings is used.

    State values must be JSON-serialisable (``temp:`` values excepted: they are never
    stored); a value that is not raises ``TypeError``/``ValueError`` naming its key before
    anything is written. Returned sessions are independent copies decoded from storage.
    """

    def __init__(
        self, redis_url: str | None = None, *, client: aioredis.Redis | None = None,
        wake_stream: str | None = None,
    ) -> None:
        RedisClientOwner.__init__(self, redis_url, client=client)
        self.wake_stream = wake_stream
        """The orchestrators' wake stream (``keys.wake_stream``), woken by a deleted session's
        items that end its unfinished invocations (None: nobody is woken)."""
        self._create_script = CREATE.register(self._client)
        self._delete_script = DELETE.register(self._client)
        self._append_script = APPEND.register(self._client)

    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> Session:
        """Create a session; ``app:``/``user:`` keys of ``state`` go to their shared hashes."""
        sid = session_id.strip() if session_id and session_id.strip() else platform.new_uuid()
        encoded = encode_state(state or {})
        session_state = split_state_delta(encoded)[2]
        now = score(platform.get_time(), what="the creation time")
        try:
            app_raw, user_raw = await self._create_script(
                create_operands(app_name, user_id, sid, now, encoded, create_id=uuid.uuid4().hex))
        except ResponseError as exc:
            if str(exc).startswith(EXISTS):
                raise AlreadyExistsError(f"Session with id {sid!r} already exists.") from exc
            raise
        merged = merge_state(
            {key: loads(value) for key, value in session_state.items()},
            decode_hash(pairs_to_dict(app_raw)),
            decode_hash(pairs_to_dict(user_raw)),
        )
        return Session.model_construct(
            id=sid, app_name=app_name, user_id=user_id, state=merged, events=[],
            last_update_time=float(now),
        )

    def queue_create_if_absent(self, pipe: Any, app_name: str, user_id: str, session_id: str,
                               *, unless_invocation: str | None = None) -> None:
        """Add the creation of an empty session (unless it exists) to a pipeline.

        ``unless_invocation``: nor if that invocation of the app exists (its enqueue sent
        again: the session was made the first time). The script is called by its sha (load
        :attr:`create_script_source` after a Redis restart). Check its reply with
        :func:`check_created_if_absent`.
        """
        now = score(platform.get_time(), what="the creation time")
        unless = keys.invocation(app_name, unless_invocation) if unless_invocation else None
        self._create_script.queue(
            pipe, create_operands(app_name, user_id, session_id, now, {}, unless=unless))

    @property
    def create_script_source(self) -> str:
        """The Lua source :meth:`queue_create_if_absent` calls by sha (to ``SCRIPT LOAD`` it)."""
        return CREATE.source

    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        config: GetSessionConfig | None = None,
    ) -> Session | None:
        """Return the session (state and events read in one round trip), or None."""
        session_id = _stripped(session_id)
        if not session_id:
            return None
        recent = config.num_recent_events if config is not None else None
        async with self._client.pipeline(transaction=True) as pipe:
            queue_session_reads(pipe, app_name, user_id, session_id, recent)
            replies = await pipe.execute()
        after = config.after_timestamp if config is not None else None
        return session_from_replies(app_name, user_id, session_id, replies, after)

    async def reread_session(self, earlier: Session) -> Session | None:
        """The session as stored now: ``earlier``'s events, and only the newer ones parsed.

        ``earlier`` must be a copy this service returned and nobody appended to (an
        orchestrator keeps one per drain). Events are only ever appended, so the stored list
        starts with ``earlier``'s: one round trip reads the state hashes, the events past
        ``earlier``'s and, to check that, the last of ``earlier``'s. If the list is not what
        ``earlier`` says (the session was deleted and made again), the whole session is read.
        """
        meta, state, app_state, user_state, events = session_read_keys(
            earlier.app_name, earlier.user_id, earlier.id)
        async with self._client.pipeline(transaction=True) as pipe:
            for hash_key in (meta, state, app_state, user_state):
                pipe.hgetall(hash_key)
            pipe.lrange(events, first_unread(earlier), -1)
            replies = await pipe.execute()
        same, fresh = session_after(earlier, replies[:4], replies[4])
        if not same:
            return await self.get_session(
                app_name=earlier.app_name, user_id=earlier.user_id, session_id=earlier.id)
        return fresh

    async def list_sessions(
        self, *, app_name: str, user_id: str | None = None
    ) -> ListSessionsResponse:
        """List sessions (no events, merged state), oldest update first; two round trips."""
        return await list_sessions(self._client, app_name, user_id)

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        """Delete the session's keys and index entries atomically (missing: no-op).

        Its unfinished invocations end ``failed`` (SessionNotFoundError) rather than wait for
        ever: the same script puts its held messages back on its queue and queues a
        ``session_deleted`` item for each invocation that ran, for an orchestrator to fail
        them (woken on :attr:`wake_stream`).
        """
        session_id = _stripped(session_id)
        if not session_id:
            return
        ids = [text(member) for member in
               await self._client.zrange(keys.session_invocations(app_name, user_id, session_id), 0, -1)]
        meta, state, events, event_ids = keys.session_storage_keys(app_name, user_id, session_id)
        await self._delete_script(DeleteSession(
            meta=meta, state=state, events=events, event_ids=event_ids,
            answered=keys.session_answered(app_name, user_id, session_id),
            invocations=keys.session_invocations(app_name, user_id, session_id),
            busy=keys.session_busy(app_name, user_id, session_id),
            held=keys.session_held(app_name, user_id, session_id),
            queue=keys.session_queue(app_name, user_id, session_id),
            user_sessions=keys.user_sessions(app_name, user_id),
            app_sessions=keys.app_sessions(app_name),
            # The fencing counter outlives the session by far more than any lease (a session
            # made again under the same id must not hand out a token a holder still has),
            # then goes: it was kept for ever.
            fence=keys.fence_counter(app_name, user_id, session_id),
            wake=self.wake_stream, announce="1" if self.wake_stream else "",
            app_name=app_name, user_id=user_id, session_id=session_id,
            app_member=app_member(user_id, session_id), fence_ttl=FENCE_AFTER_DELETE_SECONDS,
            records=[keys.invocation(app_name, i) for i in ids],
            items=[WorkItem(kind="session_deleted", invocation_id=i).model_dump_json() for i in ids]))

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        """Return the user's state with prefixes stripped."""
        return decode_hash(await self._client.hgetall(keys.user_state(app_name, user_id)))

    def leased_writer(
        self, lease_key: str, token: str, mirror: Mirror | None = None
    ) -> LeasedSessionWriter:
        """A writer whose appends require the lease ``lease_key`` held with ``token``.

        With ``mirror``, each append also adds its event to that live stream (see
        :mod:`orchestrator.backends.redis.session_writer`).
        """
        return LeasedSessionWriter(self, (lease_key, str(token)), mirror)

    async def append_event(self, session: Session, event: Event) -> Event:
        """Commit an event atomically in one Lua script; a repeated event id is ignored.

        Raises ``SessionNotFoundError`` if the session is gone; nothing is written then, and
        neither ``session`` nor ``event`` is modified. Not fenced: orchestrators append
        through :meth:`leased_writer`.
        """
        return await self._append(session, event, None, None)

    async def _append(
        self, session: Session, event: Event, fence: tuple[str, str] | None, mirror: Mirror | None
    ) -> Event:
        """Commit ``event`` in one script.

        With ``fence``, only while that lease is held, and never a second answer to a call
        (``AlreadyAnsweredError``); with ``mirror``, also adding it to that live stream.
        """
        if event.partial:
            return event
        delta = event.actions.state_delta
        persisted = without_temp(delta) or {}  # the stored event never carries temp: keys
        app_delta, user_delta, session_delta = split_state_delta(encode_state(persisted))
        if len(persisted) == len(delta):
            event_json = event.to_json()
        else:
            actions = event.actions.model_copy(update={"state_delta": persisted})
            event_json = event.model_copy(update={"actions": actions}).to_json()
        sent = jobs_sent_with(session, event) if fence is not None else None
        status = None
        if mirror is not None:
            # Taken now: a concurrent append (a parallel branch) must not write it twice.
            status, mirror.status = mirror.status, None
        record_key, statuses_key, record_json, status_value = status or (None, None, "", "")
        fenced = fence is not None and bool(event.invocation_id) and not is_seal(event)
        operands = AppendEvent(
            **session_keys(session.app_name, session.user_id, session.id),
            lease=fence[0] if fence is not None else None,
            # An orchestrator appends nothing more of an invocation once it is cancelled.
            cancel_flag=keys.cancel_flag(session.app_name, event.invocation_id) if fenced else None,
            unless_cancelled="1" if fenced else "",
            stream=mirror.stream_key if mirror is not None else None,
            record_key=record_key, statuses=statuses_key,
            answered=(keys.session_answered(session.app_name, session.user_id, session.id)
                      if fence is not None else None),
            event_id=event.id, event_json=event_json,
            timestamp=score(event.timestamp, what="the event timestamp"), session_id=session.id,
            app_member=app_member(session.user_id, session.id),
            token=fence[1] if fence is not None else "",
            maxlen=mirror.maxlen if mirror is not None else "",
            stream_ttl=mirror.ttl_seconds if mirror is not None else 0,
            record=record_json, status=status_value, state_pairs=session_delta,
            app_state_pairs=app_delta, user_state_pairs=user_delta,
            answers=final_answer_ids(event) if fence is not None else [],
            **(sent.operands if sent is not None else {}),
        )
        try:
            applied = await self._append_script(operands)
        except BaseException as exc:
            if mirror is not None and status is not None and mirror.status is None:
                mirror.status = status  # not written: the next append (or the caller) does it
            error = self._append_error(exc, session, event) if isinstance(exc, ResponseError) else exc
            if error is exc:
                raise
            raise error from exc
        # 0 or 2: its id was stored already. By an earlier try that this session object saw,
        # or by this very append run twice (its reply was lost and the client sent it again):
        # then the run must still see it, as storage does.
        if int(applied) == 1 or not _holds(session, event.id):
            self._apply_to_session(session, event)
        if int(applied) == 2:  # stored, and its invocation cancelled since: the run stops
            if mirror is not None and status is not None and mirror.status is None:
                mirror.status = status  # not written
            raise InvocationCancelledError(
                f"Invocation {event.invocation_id!r} was cancelled; event {event.id!r} was "
                "stored before.")
        if sent is not None:
            sent.done()
        return event

    @staticmethod
    def _append_error(exc: ResponseError, session: Session, event: Event) -> Exception:
        """What a failed append script means: SessionNotFound, StaleSession, or itself."""
        message = str(exc)
        if message.startswith(NOT_FOUND):
            return SessionNotFoundError(
                f"Session {session.id!r} of app {session.app_name!r}, user "
                f"{session.user_id!r} not found."
            )
        if message.startswith(ANSWERED):
            return AlreadyAnsweredError(
                f"Call {message[len(ANSWERED):].strip()!r} of session {session.id!r} already has "
                f"its answer; event {event.id!r} answering it again was not appended."
            )
        if message.startswith(CANCELLED):
            return InvocationCancelledError(
                f"Invocation {event.invocation_id!r} was cancelled; event {event.id!r} was not "
                "appended.")
        if message.startswith(STALE):
            return StaleSessionError(
                f"The session lease was lost: {message[len(STALE):].strip()}. Event "
                f"{event.id!r} was not appended to session {session.id!r}; another "
                "process may own the session now."
            )
        return exc


def _holds(session: Session, event_id: str) -> bool:
    """Whether ``session`` (the caller's object) holds the event ``event_id``."""
    return any(stored.id == event_id for stored in reversed(session.events))


def _stripped(session_id: str | None) -> str | None:
    """A session id as the session was created under it (as the in-memory service reads it)."""
    return session_id.strip() if isinstance(session_id, str) else session_id
