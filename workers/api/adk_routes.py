"""google-adk's ``adk api_server`` routes, with its request and response JSON.

An ADK client ports by changing its base URL. Behind ``/run`` and ``/run_sse`` the run is
distributed: it is enqueued for the orchestrators and followed on its live stream until it
ends or pauses (a long-running call is the last event of a paused run, as in ADK).
"""

from __future__ import annotations

import platform as python_platform
from collections.abc import AsyncIterator
from importlib import metadata
from typing import Any

from fastapi import APIRouter, Body, HTTPException, Request
from fastapi.responses import Response, StreamingResponse
from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from orchestrator.distributed.intake import RequestError, check_identifier, check_state_delta
from orchestrator.distributed.models import InvocationRecord
from orchestrator.events.event import Event
from orchestrator.events.event_actions import EventActions
from workers.api import answer_messages, app_info, run_frames
from workers.api.backend import Backend, session_json, sse
from workers.api.disconnects import unless_gone
from workers.api.outages import ServerStopping, is_outage, log_outage
from workers.api.runs import RunFailedError, enqueued, run_body, run_events

router = APIRouter()
PUBLIC_PATHS = frozenset({"/health"})
"""The routes here any caller may request, tokens set or not."""

_NO_BODY = Body(default=None)
"""An optional JSON body."""


class _Camel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")


class RunAgentRequest(_Camel):
    """ADK's ``RunAgentRequest`` (camelCase or snake_case)."""

    app_name: str
    user_id: str
    session_id: str
    new_message: dict[str, Any] | None = None
    streaming: bool = False
    state_delta: dict[str, Any] | None = None
    invocation_id: str | None = None
    function_call_event_id: str | None = None
    """Set by ADK's clients when they answer a call; here it only keeps SSE frames whole."""


class CreateSessionRequest(_Camel):
    """Body of ``POST .../sessions``: an optional id and initial state."""

    session_id: str | None = None
    state: dict[str, Any] | None = None
    events: list[dict[str, Any]] | None = None


class PatchSessionRequest(_Camel):
    """Body of ``PATCH .../sessions/{id}``."""

    state_delta: dict[str, Any]


def backend_of(request: Request) -> Backend:
    """The server's :class:`Backend`."""
    backend: Backend = request.app.state.backend
    return backend


def checked(request: Request, app_name: str, *ids: tuple[str, str]) -> Backend:
    """The backend, once the token opens ``app_name`` and the ids are well formed (422)."""
    backend = backend_of(request)
    backend.access.check_app(request, app_name)
    try:
        check_identifier("app_name", app_name, backend.runtime.limits)
        for field, value in ids:
            check_identifier(field, value, backend.runtime.limits)
    except RequestError as error:
        raise HTTPException(422, str(error)) from None
    if app_name not in backend.registry.names:
        raise HTTPException(404, f"Agent not found: {app_name!r}. No app of that name is "
                                 "served here (ADK_CELERY_APPS).")
    return backend


# The run routes come first: a request is matched against the routes in order, and these
# are the ones under load (about 20 us less per request than behind the session routes).


async def _start_run(request: Request, body: RunAgentRequest) -> tuple[Backend, Any, str | None]:
    """The run's invocation and where to follow it from (None: its start); ``/run_sse``.

    A message of function responses answers paused calls (:mod:`answer_messages`).
    """
    backend = checked(request, body.app_name, ("user_id", body.user_id),
                      ("session_id", body.session_id))
    # A session that does not exist is a 404, as in ADK: the answer path reads the session,
    # the enqueue checks it in its own round trip.
    if (answered := await _answered(backend, body)) is not None:
        return backend, *answered
    if body.invocation_id is not None:  # as /run: "" is refused, not taken for "a new id"
        checked(request, body.app_name, ("invocation_id", body.invocation_id))
    return backend, await backend.enqueue(_enqueue_fields(body), session_must_exist=True), None


async def _answered(backend: Backend, body: RunAgentRequest) -> tuple[Any, str | None] | None:
    """For a message of function responses: the invocation they answered and its place."""
    responses = answer_messages.function_responses(body.new_message)
    if responses is None or body.state_delta:
        return None
    return await answer_messages.answer(
        backend, body.app_name, body.user_id, body.session_id, responses, body.invocation_id)


def _enqueue_fields(body: RunAgentRequest) -> dict[str, Any]:
    return {"app_name": body.app_name, "user_id": body.user_id, "session_id": body.session_id,
            "new_message": body.new_message, "state_delta": body.state_delta,
            "streaming": body.streaming, "invocation_id": body.invocation_id}


_CLIENT_GONE = 499
"""The status of a ``/run`` whose client went away (nginx's; nobody receives it)."""


@router.post("/run", response_model=list[dict[str, Any]])
async def run(request: Request, body: RunAgentRequest) -> Response:
    """Run to the end (or the pause) and return the events, as ADK's ``/run``."""
    # As DirectRun's /run (which answers most runs): the follow ends when the client goes.
    response = await unless_gone(run_response(request, body), request.receive)
    return response if response is not None else Response(status_code=_CLIENT_GONE)


async def run_response(request: Request, body: RunAgentRequest) -> Response:
    """What ``/run`` answers (an HTTPException for a refusal); :mod:`direct_run` calls it too."""
    backend = checked(request, body.app_name, ("user_id", body.user_id),
                      ("session_id", body.session_id))
    record = None
    try:
        # The events' JSON as the stream holds it: no model to validate and encode again.
        if (answered := await _answered(backend, body)) is not None:
            record, after = answered
            content = await run_body(backend, record, after=after)
        else:
            if body.invocation_id is not None:  # it names the stream watched before the enqueue
                checked(request, body.app_name, ("invocation_id", body.invocation_id))
            async with enqueued(backend, _enqueue_fields(body)) as (record, watch):
                content = await run_body(backend, record, watch=watch)
    except RunFailedError as error:
        raise HTTPException(500, str(error)) from None
    except ServerStopping:  # a 503 naming the run, to be followed elsewhere by its id
        raise ServerStopping(record.invocation_id if record is not None else None) from None
    return Response(content, media_type="application/json")


@router.post("/run_sse")
async def run_sse(request: Request, body: RunAgentRequest) -> StreamingResponse:
    """The run's events as Server-Sent Events (partial chunks with ``streaming``)."""
    backend, record, after = await _start_run(request, body)

    async def frames() -> AsyncIterator[str]:
        try:
            async for item in run_events(backend, record, partial=body.streaming, after=after):
                if isinstance(item, Exception):
                    yield sse(run_frames.error_frame(str(item)))
                else:
                    for shown in run_frames.frames_of(item, split=not body.function_call_event_id):
                        yield sse(shown)
        except ServerStopping:
            yield _accepted_run_goes_on(record, "the server is stopping")
        except Exception as error:
            # A run's follow rides out Redis outages (runs.py): this guards the rest. The 200
            # is out and the run accepted: an error frame that says so, not "retry" (sent
            # again, the turn would run twice), rather than a cut chunked body.
            if not is_outage(error):
                raise
            log_outage("POST /run_sse", error)
            yield _accepted_run_goes_on(record, "Redis unavailable")

    return StreamingResponse(frames(), media_type="text/event-stream")


def _accepted_run_goes_on(record: InvocationRecord, why: str) -> str:
    """The error frame that ends a ``/run_sse`` whose follow stops here, and ``why``.

    The run was accepted and goes on: it is followed by its id, never sent again.
    """
    return sse(run_frames.error_frame(
        f"ServiceUnavailable: {why}; invocation {record.invocation_id} was accepted and goes "
        f"on: follow it at /apps/{record.app_name}/invocations/{record.invocation_id}/stream "
        "(do not send the run again)"))


@router.get("/health")
async def health() -> dict[str, str]:
    """Liveness (no authentication, as ADK's)."""
    return {"status": "ok"}


@router.get("/version")
async def version(request: Request) -> dict[str, str]:
    """The version of adk-celery serving (to a caller with a token, where tokens are set)."""
    backend_of(request).access.apps_of(request)  # 401 without a valid token
    return {"version": metadata.version("adk-celery"), "language": "python",
            "language_version": python_platform.python_version()}


@router.get("/list-apps")
async def list_apps(request: Request, detailed: bool = False) -> Any:
    """The apps this deployment serves (those the caller's token opens)."""
    backend = backend_of(request)
    names = backend.access.visible(request, sorted(backend.registry.names))
    if not detailed:
        return names
    return {"apps": [app_info.summary(name, backend.registry.get(name)) for name in names]}


@router.get("/apps/{app_name}/app-info")
async def get_app_info(request: Request, app_name: str) -> dict[str, Any]:
    """What the app is: its root agent and every LlmAgent of its tree with their tools."""
    backend = checked(request, app_name)
    try:
        return await app_info.app_info(app_name, backend.registry.get(app_name))
    except app_info.NotAnLlmAgentError as error:
        raise HTTPException(400, str(error)) from None


@router.post("/apps/{app_name}/users/{user_id}/sessions")
async def create_session(request: Request, app_name: str, user_id: str,
                         body: CreateSessionRequest | None = _NO_BODY) -> dict[str, Any]:
    """Create a session, with or without an id and initial state."""
    backend = checked(request, app_name, ("user_id", user_id))
    body = body or CreateSessionRequest()
    if body.events:
        raise HTTPException(422, "events: restoring a session's events is not supported here")
    return await _create(backend, app_name, user_id, body.session_id, body.state)


@router.post("/apps/{app_name}/users/{user_id}/sessions/{session_id}")
async def create_session_with_id(request: Request, app_name: str, user_id: str, session_id: str,
                                 state: dict[str, Any] | None = _NO_BODY) -> dict[str, Any]:
    """Create a session with this id (ADK's older route: the body is the initial state)."""
    backend = checked(request, app_name, ("user_id", user_id), ("session_id", session_id))
    return await _create(backend, app_name, user_id, session_id, state)


async def _create(backend: Backend, app_name: str, user_id: str, session_id: str | None,
                  state: dict[str, Any] | None) -> dict[str, Any]:
    from orchestrator.errors import AlreadyExistsError

    try:
        if session_id is not None:
            check_identifier("session_id", session_id, backend.runtime.limits)
        check_state_delta(state, backend.runtime.limits)
    except RequestError as error:
        raise HTTPException(422, str(error)) from None
    services = await backend.services()
    try:
        session = await services.sessions.create_session(
            app_name=app_name, user_id=user_id, state=state, session_id=session_id)
    except AlreadyExistsError:
        raise HTTPException(409, f"Session already exists: {session_id}") from None
    return session_json(session)


@router.get("/apps/{app_name}/users/{user_id}/sessions")
async def list_sessions(request: Request, app_name: str, user_id: str) -> list[dict[str, Any]]:
    """The user's sessions, without their events."""
    backend = checked(request, app_name, ("user_id", user_id))
    services = await backend.services()
    found = await services.sessions.list_sessions(app_name=app_name, user_id=user_id)
    return [session_json(s, with_events=False) for s in found.sessions]


@router.get("/apps/{app_name}/users/{user_id}/sessions/{session_id}")
async def get_session(request: Request, app_name: str, user_id: str,
                      session_id: str) -> dict[str, Any]:
    """The session with its events; 404 ``Session not found``."""
    backend = checked(request, app_name, ("user_id", user_id), ("session_id", session_id))
    return session_json(await backend.session(app_name, user_id, session_id))


@router.patch("/apps/{app_name}/users/{user_id}/sessions/{session_id}")
async def patch_session(request: Request, app_name: str, user_id: str, session_id: str,
                        body: PatchSessionRequest) -> dict[str, Any]:
    """Apply a state delta as an event of its own (``p-`` invocation), as ADK does."""
    from orchestrator import platform

    backend = checked(request, app_name, ("user_id", user_id), ("session_id", session_id))
    try:
        delta = check_state_delta(body.state_delta, backend.runtime.limits) or {}
    except RequestError as error:
        raise HTTPException(422, str(error)) from None
    session = await backend.session(app_name, user_id, session_id)
    services = await backend.services()
    await services.sessions.append_event(session, Event(
        invocation_id=f"p-{platform.new_uuid()}", author="user",
        actions=EventActions(state_delta=delta)))
    return session_json(await backend.session(app_name, user_id, session_id))


@router.delete("/apps/{app_name}/users/{user_id}/sessions/{session_id}")
async def delete_session(request: Request, app_name: str, user_id: str, session_id: str) -> None:
    """Delete the session (nothing if it does not exist)."""
    backend = checked(request, app_name, ("user_id", user_id), ("session_id", session_id))
    services = await backend.services()
    await services.sessions.delete_session(app_name=app_name, user_id=user_id,
                                           session_id=session_id)
