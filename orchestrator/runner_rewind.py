"""``Runner.rewind_async``: take a session back to before one of its invocations.

Nothing is deleted. One event is appended, authored by ``user``, whose
``rewind_before_invocation_id`` hides the rewound invocation and everything after it from
the model (:func:`orchestrator.flows.contents.apply_rewinds`), and whose deltas put the
session's own state and artifacts back as they were at that point:

- state: each key the session has now is set back to its value then, or to None if it
  did not exist then; ``app:``, ``user:`` and ``temp:`` keys are not the session's and stay;
- artifacts: each session artifact changed since is saved again with its version of then
  as a new version, or with a tombstone (:mod:`orchestrator.artifacts.artifact_util`) if it
  did not exist then; ``user:`` artifacts stay.

As google-adk 2.13 does; in process (a distributed session's log is written under its lease
by orchestrators, not by a script).
"""

from __future__ import annotations

import logging
from typing import Any

from orchestrator import platform
from orchestrator.artifacts.artifact_util import new_rewind_tombstone
from orchestrator.artifacts.base_artifact_service import BaseArtifactService
from orchestrator.errors import InvocationNotFoundError
from orchestrator.events.event import Event
from orchestrator.events.event_actions import EventActions
from orchestrator.sessions.base_session_service import BaseSessionService
from orchestrator.sessions.session import Session
from orchestrator.sessions.state import State

logger = logging.getLogger(__name__)

_NOT_THE_SESSIONS = (State.APP_PREFIX, State.USER_PREFIX, State.TEMP_PREFIX)
_MISSING = object()


async def rewind_session(
    session_service: BaseSessionService,
    artifact_service: BaseArtifactService | None,
    session: Session,
    rewind_before_invocation_id: str,
) -> Event:
    """Append the rewind event of ``session`` to before its invocation; return it.

    InvocationNotFoundError if no event of the session belongs to that invocation.
    """
    point = next((i for i, e in enumerate(session.events)
                  if e.invocation_id == rewind_before_invocation_id), None)
    if point is None:
        raise InvocationNotFoundError(
            f"Invocation ID not found: {rewind_before_invocation_id}")
    event = Event(
        invocation_id=platform.new_invocation_id(),
        author="user",
        actions=EventActions(
            rewind_before_invocation_id=rewind_before_invocation_id,
            state_delta=state_delta_back_to(session, point),
            artifact_delta=await _artifacts_back_to(artifact_service, session, point),
        ),
    )
    return await session_service.append_event(session, event)


def state_delta_back_to(session: Session, point: int) -> dict[str, Any]:
    """The state delta that puts the session's own keys back as before event ``point``."""
    then: dict[str, Any] = {}
    for event in session.events[:point]:
        for key, value in (event.actions.state_delta or {}).items():
            if key.startswith(_NOT_THE_SESSIONS):
                continue
            if value is None:
                then.pop(key, None)
            else:
                then[key] = value
    delta = {key: value for key, value in then.items()
             if session.state.get(key, _MISSING) != value}
    delta.update({key: None for key in session.state
                  if not key.startswith(_NOT_THE_SESSIONS) and key not in then})
    return delta


async def _artifacts_back_to(
    artifact_service: BaseArtifactService | None, session: Session, point: int
) -> dict[str, int]:
    """Save each session artifact changed since event ``point`` as it was then."""
    if artifact_service is None:
        return {}
    then: dict[str, int] = {}
    now: dict[str, int] = {}
    for index, event in enumerate(session.events):
        if event.actions.artifact_delta:
            now.update(event.actions.artifact_delta)
            if index < point:
                then.update(event.actions.artifact_delta)
    delta = {}
    where = {"app_name": session.app_name, "user_id": session.user_id, "session_id": session.id}
    for filename, version in now.items():
        if filename.startswith(State.USER_PREFIX) or then.get(filename) == version:
            continue
        before = then.get(filename)
        part = None
        if before is not None:
            part = await artifact_service.load_artifact(filename=filename, version=before, **where)
            if part is None:
                logger.warning("Rewinding session %r: version %d of artifact %r is gone; "
                               "it is left empty.", session.id, before, filename)
        delta[filename] = await artifact_service.save_artifact(
            filename=filename, artifact=part if part is not None else new_rewind_tombstone(),
            **where)
    return delta
