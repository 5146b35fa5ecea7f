"""Routes beyond ADK's: enqueue without waiting, status, events, follow, answer, cancel.

An invocation is addressed by its app and id (``/apps/{app}/invocations/{id}``).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Header, HTTPException, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import ConfigDict
from pydantic.alias_generators import to_camel

from orchestrator import failpoints
from orchestrator.backends.redis import keys
from orchestrator.distributed.intake import RequestError
from orchestrator.distributed.models import InvocationRecord, InvocationStatus
from workers.api.adk_routes import _Camel, checked
from workers.api.backend import Backend, event_json, record_json, sse
from workers.api.outages import UNAVAILABLE, ServerStopping, is_outage, log_outage
from workers.api.watches import position_of
from workers.enqueue import prepare_invocation, refusal

router = APIRouter(tags=["invocations"])


class EnqueueRequest(_Camel):
    """A message for a session: ``newMessage`` (text or Content JSON) and/or ``stateDelta``.

    Also ``streaming`` (partial chunks on the live stream), ``invocationId`` (the id to give
    the invocation, to send the request again safely) and ``customMetadata`` (merged into
    every event of the invocation). Any other field is refused (422 naming it).
    """

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    new_message: Any = None
    state_delta: dict[str, Any] | None = None
    streaming: bool = False
    invocation_id: str | None = None
    custom_metadata: dict[str, Any] | None = None

    def fields(self) -> dict[str, Any]:
        """The enqueue fields of the body (identifiers come from the path)."""
        return {"new_message": self.new_message, "state_delta": self.state_delta,
                "streaming": self.streaming, "invocation_id": self.invocation_id,
                "custom_metadata": self.custom_metadata}


class AnswerRequest(_Camel):
    """The answer to a pending call."""

    function_call_id: str
    response: dict[str, Any]


async def _enqueue(backend: Backend, fields: dict[str, Any], *,
                   session_must_exist: bool = False) -> JSONResponse:
    _check_intake(backend, fields)
    record = await backend.enqueue(fields, session_must_exist=session_must_exist)
    return JSONResponse(record_json(record), status_code=202)


def _check_intake(backend: Backend, fields: dict[str, Any]) -> None:
    """422 naming the field for a body ``/run`` refuses (a malformed message, state delta...).

    Checked before anything is written: the enqueue itself would store a failed record (and
    answer 202 with it), and for a new session report a session id that was never made.
    """
    try:
        record, _ = prepare_invocation(fields, backend.runtime.limits)
    except RequestError as error:
        raise HTTPException(422, str(error)) from None
    if record.status is InvocationStatus.FAILED:
        raise HTTPException(422, refusal(record))


@router.post("/apps/{app_name}/users/{user_id}/sessions/{session_id}/invocations",
             status_code=202)
async def enqueue(request: Request, app_name: str, user_id: str, session_id: str,
                  body: EnqueueRequest) -> JSONResponse:
    """Queue a message for an existing session; 202 with the invocation at once."""
    backend = checked(request, app_name, ("user_id", user_id), ("session_id", session_id))
    return await _enqueue(backend, {
        "app_name": app_name, "user_id": user_id, "session_id": session_id, **body.fields()},
        session_must_exist=True)


@router.post("/apps/{app_name}/users/{user_id}/invocations", status_code=202)
async def enqueue_new_session(request: Request, app_name: str, user_id: str,
                              body: EnqueueRequest) -> JSONResponse:
    """Queue a message for a new session; 202 with the invocation (and its session id)."""
    backend = checked(request, app_name, ("user_id", user_id))
    return await _enqueue(backend, {"app_name": app_name, "user_id": user_id, **body.fields()})


@router.get("/apps/{app_name}/invocations/{invocation_id}")
async def status(request: Request, app_name: str, invocation_id: str) -> dict[str, Any]:
    """The invocation's status, error and pending calls, with where each call stands."""
    backend = checked(request, app_name, ("invocation_id", invocation_id))
    record = await backend.record(app_name, invocation_id)
    services = await backend.services()
    calls = await services.store.pending_details(record)
    # Each call's fields in camelCase, as the record's around it (``functionCallId``).
    return {**record_json(record), "calls": [
        {to_camel(key): value for key, value in c.model_dump(mode="json", exclude_none=True).items()}
        for c in calls]}


@router.get("/apps/{app_name}/invocations/{invocation_id}/events")
async def events(request: Request, app_name: str, invocation_id: str) -> list[dict[str, Any]]:
    """The invocation's committed events, oldest first."""
    backend = checked(request, app_name, ("invocation_id", invocation_id))
    record = await backend.record(app_name, invocation_id)
    session = await backend.session(app_name, record.user_id, record.session_id)
    return [event_json(e) for e in session.events if e.invocation_id == invocation_id]


@router.get("/apps/{app_name}/invocations/{invocation_id}/stream")
async def stream(request: Request, app_name: str, invocation_id: str, until: str = "finished",
                 last_event_id: str | None = Header(default=None)) -> StreamingResponse:
    """Follow the invocation live (Server-Sent Events), replayed from its start.

    Each frame has an ``id``: reconnecting with ``Last-Event-ID`` resumes after it. Frames
    are ``event: event`` (an event, partial chunks included), ``event: status`` and
    ``event: progress`` (a remote call's ``report_progress``: ``functionCallId``, ``tool``,
    ``attempt``, ``at``, ``progress``). Ends at a terminal status, or also at a pause with
    ``?until=paused``; or with an ``event: error`` frame if Redis cannot be read (follow
    again with the last id seen).
    """
    backend = checked(request, app_name, ("invocation_id", invocation_id))
    if until not in ("finished", "paused"):
        raise HTTPException(422, "until: must be 'finished' or 'paused'")
    if last_event_id is not None and not _is_entry_id(last_event_id):
        raise HTTPException(422, "Last-Event-ID: not an id this stream sent")
    record = await backend.record(app_name, invocation_id)
    if last_event_id is not None and await _past_the_end(backend, record, last_event_id):
        # A client back after the last frame (EventSource reconnects once a stream ends):
        # nothing more will come, so the follow ends at once rather than waiting for ever.
        return StreamingResponse(iter(()), media_type="text/event-stream")

    stop_at = InvocationStatus.FINISHED if until == "finished" else InvocationStatus.SETTLED

    async def frames() -> AsyncIterator[str]:
        try:
            async for item in backend.follow(record, after=last_event_id, until=stop_at):
                if item.event is not None:
                    yield sse(event_json(item.event), event="event", entry_id=item.entry_id)
                elif item.status is not None:
                    yield sse({"status": item.status.value}, event="status", entry_id=item.entry_id)
                elif item.progress is not None:
                    yield sse(item.progress.to_json(), event="progress", entry_id=item.entry_id)
        except ServerStopping:
            # The 200 is out: an error frame (no id: reconnect with the last id seen) ends it.
            yield sse({"error": "The server is stopping; follow again with the last id seen"},
                      event="error")
        except Exception as error:
            if not is_outage(error):
                raise
            # The 200 is out: an error frame (no id: reconnect with the last id seen) ends it.
            log_outage(f"GET {request.url.path}", error)
            yield sse({"error": UNAVAILABLE}, event="error")

    return StreamingResponse(frames(), media_type="text/event-stream")


async def _past_the_end(backend: Backend, record: InvocationRecord, last_event_id: str) -> bool:
    """True if the follow after ``last_event_id`` has nothing to show (over, and read to its end).

    That is: the invocation is over and the id is at or past its stream's last entry. 422
    for an id past the last entry of an invocation still going: the follow would drop every
    entry up to that id, its end too, and never end.
    """
    services = await backend.services()
    last = await services.redis.xrevrange(
        keys.invocation_stream(record.app_name, record.invocation_id), count=1)
    position = position_of(last_event_id)
    if record.status.is_finished:
        return not last or position_of(last[0][0]) <= position
    if not last or position_of(last[0][0]) < position:
        raise HTTPException(422, f"Last-Event-ID: {last_event_id} is past the end of this "
                                 f"stream (its last entry: {last[0][0] if last else 'none'}); "
                                 "follow without it to start from the beginning")
    return False


_ENTRY_ID = re.compile(r"[0-9]{1,20}-[0-9]{1,20}")
_ENTRY_PART_MAX = 2**64 - 1
"""Each part of a Redis stream entry id is an unsigned 64-bit number."""


def _is_entry_id(value: str) -> bool:
    """True for a stream entry id Redis accepts.

    An id out of its range would fail the read that every follow of this process shares.
    """
    return bool(_ENTRY_ID.fullmatch(value)) and max(position_of(value)) <= _ENTRY_PART_MAX


@router.post("/apps/{app_name}/invocations/{invocation_id}/answer", status_code=202)
async def answer(request: Request, app_name: str, invocation_id: str,
                 body: AnswerRequest) -> dict[str, Any]:
    """Answer a call the invocation waits for; 409 if it does not wait for that call."""
    backend = checked(request, app_name, ("invocation_id", invocation_id))
    await backend.answer(app_name, invocation_id, body.function_call_id, body.response)
    failpoints.hit("api.answer.stored")  # stored with its resume; no reply sent yet
    return {"invocationId": invocation_id, "answered": body.function_call_id}


@router.post("/apps/{app_name}/invocations/{invocation_id}/cancel", status_code=202)
async def cancel(request: Request, app_name: str, invocation_id: str) -> dict[str, Any]:
    """Ask for the invocation to be cancelled (queued, running or paused)."""
    backend = checked(request, app_name, ("invocation_id", invocation_id))
    record = await backend.record(app_name, invocation_id)
    if record.status.is_finished:
        raise HTTPException(409, f"invocation {invocation_id!r} is {record.status.value}")
    services = await backend.services()
    await services.service.cancel(app_name, invocation_id)
    # Requested, not done: the invocation ends cancelled once its orchestrator takes the
    # request (or completes if it was done by then); follow or poll it to see which.
    return {"invocationId": invocation_id, "status": record.status.value,
            "cancelRequested": True}
