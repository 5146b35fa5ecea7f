"""BaseSessionService: the session-store contract and the commit rules every store shares."""

from __future__ import annotations

import abc
from typing import Any, Protocol

from orchestrator.events.event import Event
from orchestrator.sessions.session import GetSessionConfig, ListSessionsResponse, Session
from orchestrator.sessions.state import State


def split_state_delta(delta: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Split a delta into (app, user, session) parts; prefixes stripped, ``temp:`` dropped."""
    app: dict[str, Any] = {}
    user: dict[str, Any] = {}
    session: dict[str, Any] = {}
    for key, value in delta.items():
        if key.startswith(State.APP_PREFIX):
            app[key[len(State.APP_PREFIX):]] = value
        elif key.startswith(State.USER_PREFIX):
            user[key[len(State.USER_PREFIX):]] = value
        elif not key.startswith(State.TEMP_PREFIX):
            session[key] = value
    return app, user, session


def merge_state(
    session_state: dict[str, Any], app_state: dict[str, Any], user_state: dict[str, Any]
) -> dict[str, Any]:
    """Return session state with app and user state merged in under their prefixes."""
    merged = dict(session_state)
    for key, value in app_state.items():
        merged[State.APP_PREFIX + key] = value
    for key, value in user_state.items():
        merged[State.USER_PREFIX + key] = value
    return merged


class SessionWriter(Protocol):
    """Whatever commits a Runner's events: a session service, or a writer bound to a lease.

    adk-celery's orchestrators hand the Runner a writer built for the session lease they
    hold (``RedisSessionService.leased_writer``), so what each append checks and writes is
    decided where the lease is taken.
    """

    async def append_event(self, session: Session, event: Event) -> Event:
        """Commit ``event`` to ``session`` (store and in-memory copy)."""
        ...


class BaseSessionService(abc.ABC):
    """Creates, reads, lists and deletes sessions, and commits events to them."""

    @abc.abstractmethod
    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> Session:
        """Create a session; raise ``AlreadyExistsError`` if ``session_id`` is taken."""

    @abc.abstractmethod
    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        config: GetSessionConfig | None = None,
    ) -> Session | None:
        """Return the session with merged state, or None if it does not exist."""

    @abc.abstractmethod
    async def list_sessions(
        self, *, app_name: str, user_id: str | None = None
    ) -> ListSessionsResponse:
        """List sessions without events, oldest update first; all users if user_id is None."""

    @abc.abstractmethod
    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        """Delete a session; deleting a missing session does nothing."""

    async def reread_session(self, earlier: Session) -> Session | None:
        """The session as stored now, given ``earlier``, a copy this service returned before.

        Services that can read only what was appended since (Redis) do; this default reads
        the whole session again. None if the session is gone.
        """
        return await self.get_session(
            app_name=earlier.app_name, user_id=earlier.user_id, session_id=earlier.id)

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        """Return the user's state with prefixes stripped (optional)."""
        raise NotImplementedError

    async def flush(self) -> None:
        """Write out anything buffered (no-op by default)."""

    async def append_event(self, session: Session, event: Event) -> Event:
        """Commit ``event`` to ``session``: apply its state delta and append it.

        Partial events are returned untouched. ``temp:`` keys are applied to the in-memory
        session only and removed from the event's delta so they are never persisted.
        """
        if event.partial:
            return event
        self._apply_to_session(session, event)
        return event

    @staticmethod
    def _trim_temp_delta(event: Event) -> dict[str, Any]:
        """Remove ``temp:`` keys from the event's delta; return them."""
        delta = event.actions.state_delta
        if not delta:
            return {}
        temp = {k: v for k, v in delta.items() if k.startswith(State.TEMP_PREFIX)}
        for key in temp:
            del delta[key]
        return temp

    def _apply_to_session(self, session: Session, event: Event) -> None:
        """Apply the event to the caller's session object (state, events, update time)."""
        temp = self._trim_temp_delta(event)
        if temp:
            session.state.update(temp)
        if event.actions.state_delta:
            session.state.update(event.actions.state_delta)
        session.events.append(event)
        session.last_update_time = event.timestamp
