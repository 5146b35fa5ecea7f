"""What a Runner run works on: the session it reads and the InvocationContext it runs in.

The session is read through the Runner's session service (``run_config.get_session_config``
says how much of it); a missing one raises SessionNotFoundError, unless the Runner was made
with ``auto_create_session``: then an empty one is created. The context carries the
Runner's services, root agent, transport and plugins.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator import platform
from orchestrator.agents.invocation_context import InvocationContext
from orchestrator.errors import SessionNotFoundError

if TYPE_CHECKING:
    import asyncio

    from google.genai import types

    from orchestrator.agents.run_config import RunConfig
    from orchestrator.runners import Runner
    from orchestrator.sessions.session import Session


async def load_session(
    runner: Runner, user_id: str, session_id: str, run_config: RunConfig
) -> Session:
    """The session ``session_id`` of ``user_id`` in ``runner``'s app (created if allowed)."""
    session = await runner.session_service.get_session(
        app_name=runner.app_name, user_id=user_id, session_id=session_id,
        config=run_config.get_session_config,
    )
    if session is not None:
        return session
    if not runner.auto_create_session:
        raise SessionNotFoundError(
            f"Session not found: app {runner.app_name!r}, user {user_id!r}, "
            f"session {session_id!r}."
        )
    return await runner.session_service.create_session(
        app_name=runner.app_name, user_id=user_id, session_id=session_id
    )


def new_context(
    runner: Runner,
    session: Session,
    invocation_id: str | None,
    new_message: types.Content | None,
    run_config: RunConfig,
    abort_signal: asyncio.Event | None,
) -> InvocationContext:
    """A context for a run of ``runner``'s root agent on ``session`` (a new invocation id if none)."""
    return InvocationContext(
        session_service=runner.session_service,
        artifact_service=runner.artifact_service,
        memory_service=runner.memory_service,
        credential_service=runner.credential_service,
        invocation_id=invocation_id or platform.new_invocation_id(),
        agent=runner.agent,
        session=session,
        user_content=new_message,
        run_config=run_config,
        resumability_config=runner.resumability_config,
        abort_signal=abort_signal,
        transport=runner.transport,
        plugin_manager=runner.plugin_manager,
    )
