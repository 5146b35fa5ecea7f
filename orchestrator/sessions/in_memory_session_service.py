"""InMemorySessionService: sessions kept in this process (embedded mode and tests)."""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass, field
from typing import Any

from orchestrator import platform
from orchestrator.errors import AlreadyAnsweredError, AlreadyExistsError, SessionNotFoundError
from orchestrator.events.answers import final_answer_ids
from orchestrator.events.event import Event
from orchestrator.sessions.base_session_service import (
    BaseSessionService,
    merge_state,
    split_state_delta,
)
from orchestrator.sessions.session import GetSessionConfig, ListSessionsResponse, Session

logger = logging.getLogger(__name__)


@dataclass
class _StoredSession:
    id: str
    app_name: str
    user_id: str
    state: dict[str, Any]
    events: list[Event] = field(default_factory=list)
    event_ids: set[str] = field(default_factory=set)
    answered: set[str] = field(default_factory=set)
    """Ids of the calls with a final answer among the events."""
    last_update_time: float = 0.0


class _AnswerOnceWriter:
    """Appends to an :class:`InMemorySessionService` that refuse a second answer to a call."""

    def __init__(self, service: InMemorySessionService) -> None:
        self._service = service

    async def append_event(self, session: Session, event: Event) -> Event:
        """Commit ``event``, unless a call it answers for good has its final answer already.

        Then ``AlreadyAnsweredError`` is raised, and nothing is written.
        """
        return self._service._append(session, event, answer_once=True)


class InMemorySessionService(BaseSessionService):
    """Keeps sessions, user state and app state in dictionaries of this process.

    Returned sessions are independent copies: their state is deep-copied and their event list
    is a new list. Committed events are shared and must not be mutated after commit.
    """

    def __init__(self) -> None:
        self._sessions: dict[str, dict[str, dict[str, _StoredSession]]] = {}
        self._user_state: dict[str, dict[str, dict[str, Any]]] = {}
        self._app_state: dict[str, dict[str, Any]] = {}

    # google-adk's service keeps these as public dictionaries, which tests written for it
    # read; here they are views in the same shape.

    @property
    def sessions(self) -> dict[str, dict[str, dict[str, Session]]]:
        """The stored sessions, app -> user -> id -> Session, as google-adk's service has them.

        Each with its own state (no ``app:``/``user:`` keys) and its events. A snapshot
        taken at each read: changing it changes nothing stored.
        """
        return {app: {user: {sid: _as_session(stored, stored.state, with_events=True)
                             for sid, stored in by_id.items()}
                      for user, by_id in by_user.items()}
                for app, by_user in self._sessions.items()}

    @property
    def user_state(self) -> dict[str, dict[str, dict[str, Any]]]:
        """The users' state, app -> user -> key (without ``user:``) -> value, stored (live)."""
        return self._user_state

    @property
    def app_state(self) -> dict[str, dict[str, Any]]:
        """The apps' state, app -> key (without ``app:``) -> value, stored (live)."""
        return self._app_state

    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> Session:
        """Create a session; ``app:``/``user:`` keys of ``state`` go to their shared stores."""
        return self._create(app_name, user_id, state, session_id)

    def create_session_sync(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> Session:
        """``create_session`` without awaiting (deprecated in ADK: prefer the async one)."""
        _warn_deprecated("create_session")
        return self._create(app_name, user_id, state, session_id)

    def _create(
        self, app_name: str, user_id: str, state: dict[str, Any] | None, session_id: str | None
    ) -> Session:
        sid = session_id.strip() if session_id and session_id.strip() else platform.new_uuid()
        user_sessions = self._sessions.setdefault(app_name, {}).setdefault(user_id, {})
        if sid in user_sessions:
            raise AlreadyExistsError(f"Session with id {sid!r} already exists.")
        app_delta, user_delta, session_state = split_state_delta(copy.deepcopy(state or {}))
        self._app_state.setdefault(app_name, {}).update(app_delta)
        self._user_state.setdefault(app_name, {}).setdefault(user_id, {}).update(user_delta)
        stored = _StoredSession(
            id=sid, app_name=app_name, user_id=user_id, state=session_state,
            last_update_time=platform.get_time(),
        )
        user_sessions[sid] = stored
        return self._export(stored, with_events=True)

    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        config: GetSessionConfig | None = None,
    ) -> Session | None:
        """Return a copy of the session, filtered by ``config``, or None."""
        return self._get(app_name, user_id, session_id, config)

    def get_session_sync(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        config: GetSessionConfig | None = None,
    ) -> Session | None:
        """``get_session`` without awaiting (deprecated in ADK: prefer the async one)."""
        _warn_deprecated("get_session")
        return self._get(app_name, user_id, session_id, config)

    def _get(
        self, app_name: str, user_id: str, session_id: str, config: GetSessionConfig | None
    ) -> Session | None:
        stored = self._find(app_name, user_id, session_id)
        if stored is None:
            return None
        session = self._export(stored, with_events=True)
        if config is not None:
            session.events = _filter_events(session.events, config)
        return session

    async def list_sessions(
        self, *, app_name: str, user_id: str | None = None
    ) -> ListSessionsResponse:
        """List sessions (no events), oldest update first."""
        return self._list(app_name, user_id)

    def list_sessions_sync(
        self, *, app_name: str, user_id: str | None = None
    ) -> ListSessionsResponse:
        """``list_sessions`` without awaiting (deprecated in ADK: prefer the async one)."""
        _warn_deprecated("list_sessions")
        return self._list(app_name, user_id)

    def _list(self, app_name: str, user_id: str | None) -> ListSessionsResponse:
        by_user = self._sessions.get(app_name, {})
        users = [user_id] if user_id is not None else list(by_user)
        stored = [s for u in users for s in by_user.get(u, {}).values()]
        stored.sort(key=lambda s: (s.last_update_time, s.user_id, s.id))
        return ListSessionsResponse(sessions=[self._export(s, with_events=False) for s in stored])

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        """Delete a session if it exists."""
        self._delete(app_name, user_id, session_id)

    def delete_session_sync(self, *, app_name: str, user_id: str, session_id: str) -> None:
        """``delete_session`` without awaiting (deprecated in ADK: prefer the async one)."""
        _warn_deprecated("delete_session")
        self._delete(app_name, user_id, session_id)

    def _delete(self, app_name: str, user_id: str, session_id: str) -> None:
        sid = session_id.strip() if session_id else session_id
        self._sessions.get(app_name, {}).get(user_id, {}).pop(sid, None)

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        """Return the user's state with prefixes stripped."""
        return copy.deepcopy(self._user_state.get(app_name, {}).get(user_id, {}))

    async def append_event(self, session: Session, event: Event) -> Event:
        """Commit an event; a repeated event id is ignored (idempotent)."""
        return self._append(session, event, answer_once=False)

    def answer_once_writer(self) -> _AnswerOnceWriter:
        """A writer whose appends never commit a second final answer to a call.

        What the embedded runtime commits through, as orchestrators commit through the Redis
        service's leased writer; plain appends (in-process use, as google-adk's services)
        are not guarded. A provisional answer (see :mod:`orchestrator.events.answers`) does
        not count: the confirmed call is answered again, once.
        """
        return _AnswerOnceWriter(self)

    def _append(self, session: Session, event: Event, *, answer_once: bool) -> Event:
        if event.partial:
            return event
        stored = self._find(session.app_name, session.user_id, session.id)
        if stored is None:
            raise SessionNotFoundError(
                f"Session {session.id!r} of app {session.app_name!r}, user "
                f"{session.user_id!r} not found."
            )
        if event.id in stored.event_ids:
            return event
        answers = final_answer_ids(event)
        if answer_once and (again := stored.answered.intersection(answers)):
            raise AlreadyAnsweredError(
                f"Call {sorted(again)[0]!r} of session {session.id!r} already has its answer; "
                f"event {event.id!r} answering it again was not appended.")
        self._apply_to_session(session, event)
        app_delta, user_delta, session_delta = split_state_delta(event.actions.state_delta)
        if app_delta:
            self._app_state.setdefault(stored.app_name, {}).update(copy.deepcopy(app_delta))
        if user_delta:
            self._user_state.setdefault(stored.app_name, {}).setdefault(
                stored.user_id, {}
            ).update(copy.deepcopy(user_delta))
        if session_delta:
            stored.state.update(copy.deepcopy(session_delta))
        stored.events.append(event)
        stored.event_ids.add(event.id)
        stored.answered.update(answers)
        stored.last_update_time = event.timestamp
        return event

    def _find(self, app_name: str, user_id: str, session_id: str) -> _StoredSession | None:
        sid = session_id.strip() if session_id else session_id
        return self._sessions.get(app_name, {}).get(user_id, {}).get(sid)

    def _export(self, stored: _StoredSession, *, with_events: bool) -> Session:
        state = merge_state(
            stored.state,
            self._app_state.get(stored.app_name, {}),
            self._user_state.get(stored.app_name, {}).get(stored.user_id, {}),
        )
        return _as_session(stored, state, with_events=with_events)


def _as_session(stored: _StoredSession, state: dict[str, Any], *, with_events: bool) -> Session:
    """A Session of ``stored`` with a copy of ``state`` (and a new list of its events)."""
    return Session.model_construct(
        id=stored.id,
        app_name=stored.app_name,
        user_id=stored.user_id,
        state=copy.deepcopy(state),
        events=list(stored.events) if with_events else [],
        last_update_time=stored.last_update_time,
    )


def _warn_deprecated(method: str) -> None:
    logger.warning(
        "InMemorySessionService.%s_sync is deprecated (as in google-adk); use the async %s.",
        method, method,
    )


def _filter_events(events: list[Event], config: GetSessionConfig) -> list[Event]:
    if config.num_recent_events is not None:
        events = events[-config.num_recent_events:] if config.num_recent_events else []
    if config.after_timestamp is not None:
        start = len(events)
        while start > 0 and events[start - 1].timestamp >= config.after_timestamp:
            start -= 1
        events = events[start:]
    return events
