"""Client: enqueue invocations, follow them, answer their pending calls, cancel them.

Usable from any Python service (synchronous API). Services that do not import this project
can ``send_task`` the documented task names instead (see the README).
"""

from __future__ import annotations

from typing import Any

from google.genai import types

from config import Settings, get_settings
from orchestrator import platform
from orchestrator.distributed.models import InvocationRecord, InvocationStatus
from orchestrator.events.event import Event
from orchestrator.sessions.session import Session
from workers.celery_app import TASK_CANCEL, TASK_DRAIN, TASK_INVOKE, create_celery_app
from workers.runtime import Runtime

SETTLED = frozenset({InvocationStatus.PAUSED, InvocationStatus.COMPLETED,
                     InvocationStatus.FAILED, InvocationStatus.CANCELLED})
FINISHED = frozenset({InvocationStatus.COMPLETED, InvocationStatus.FAILED,
                      InvocationStatus.CANCELLED})


class Client:
    """Talks to orchestrators through Celery and reads invocation state from Redis."""

    def __init__(self, settings: Settings | None = None) -> None:
        self._settings = settings or get_settings()
        self._celery = create_celery_app(self._settings)
        self._runtime = Runtime(self._settings, load_apps=False, celery_app=self._celery)

    def _services(self) -> Any:
        return self._runtime.run(self._runtime.services())

    def create_session(
        self, app_name: str, user_id: str, *, state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> Session:
        """Create a session (optionally with initial state)."""
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
    ) -> str:
        """Queue a message for a session (a new session when ``session_id`` is None).

        Returns the invocation id at once; the invocation runs on an orchestrator.
        """
        invocation_id = invocation_id or platform.new_invocation_id()
        if isinstance(message, types.Content):
            payload: Any = message.model_dump(mode="json", exclude_none=True)
        else:
            payload = message
        self._celery.send_task(TASK_INVOKE, kwargs={
            "app_name": app_name, "user_id": user_id,
            "session_id": session_id or platform.new_uuid(),
            "create_session": session_id is None,
            "new_message": payload, "state_delta": state_delta,
            "invocation_id": invocation_id,
        }, queue=self._settings.invocations_queue)
        return invocation_id

    def status(self, app_name: str, invocation_id: str) -> InvocationRecord | None:
        """The invocation's record (status, pending calls, error), or None if unknown."""
        store = self._services().store
        return self._runtime.run(store.get(app_name, invocation_id))

    def wait(
        self,
        app_name: str,
        invocation_id: str,
        *,
        timeout: float | None = 60.0,
        until: frozenset[InvocationStatus] = SETTLED,
    ) -> InvocationRecord:
        """Block until the invocation is paused or finished; TimeoutError after ``timeout``."""
        store = self._services().store
        record = self._runtime.run(
            store.wait_for(app_name, invocation_id, set(until), timeout=timeout)
        )
        if record is None:
            raise TimeoutError(
                f"Invocation {invocation_id!r} did not reach {sorted(s.value for s in until)} "
                f"within {timeout} s."
            )
        return record

    def events(self, app_name: str, invocation_id: str) -> list[Event]:
        """The committed events of the invocation, oldest first."""
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
        """Answer a pending call; raises AnswerRejectedError (nothing stored) if it is not one."""
        service = self._services().service
        key = self._runtime.run(
            service.answer(app_name, invocation_id, function_call_id, response)
        )
        self._drain(key)

    def cancel(self, app_name: str, invocation_id: str) -> None:
        """Cancel the invocation."""
        self._celery.send_task(TASK_CANCEL, kwargs={
            "app_name": app_name, "invocation_id": invocation_id,
        }, queue=self._settings.invocations_queue)

    def _drain(self, key: tuple[str, str, str]) -> None:
        self._celery.send_task(TASK_DRAIN, kwargs={
            "app_name": key[0], "user_id": key[1], "session_id": key[2],
        }, queue=self._settings.invocations_queue)

    def close(self) -> None:
        """Stop the client's background loop."""
        self._runtime._loop.stop()
