"""Celery tasks: thin wrappers that parse JSON kwargs and run the shared async code."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import Any

from celery import Task
from pydantic import ValidationError

from orchestrator.distributed.executor import (
    execute_agent_job,
    execute_tool_job,
    is_plain_sync_tool,
)
from orchestrator.distributed.models import AgentJob, ToolJob, ToolResult
from orchestrator.distributed.stores import AnswerRejectedError, SessionKey
from workers.celery_app import (
    TASK_ANSWER,
    TASK_CANCEL,
    TASK_DRAIN,
    TASK_INVOKE,
    TASK_RUN_AGENT,
    TASK_RUN_TOOL,
)
from workers.celery_app import app as celery_app
from workers.enqueue import PayloadError, check_size
from workers.runtime import Services, get_runtime

logger = logging.getLogger(__name__)


@celery_app.task(name=TASK_INVOKE, bind=True, max_retries=None)
def invoke(self: Task, **kwargs: Any) -> dict[str, Any]:
    """Start an invocation: ``app_name``, ``user_id``, ``new_message`` (text or Content JSON).

    Optional: ``session_id`` (a new session when omitted), ``state_delta``, ``invocation_id``
    (idempotency: the same id is one invocation), ``create_session``, ``streaming``. Returns
    the invocation id and its session id once the invocation is recorded and queued; an
    orchestrator (this one or another) runs it when the wake-up it posted comes round.
    """
    return get_runtime().run(_invoke(kwargs))


async def _invoke(kwargs: dict[str, Any]) -> dict[str, Any]:
    record, _ = await get_runtime().submit_invocation(kwargs)
    if record is None:
        return {"error": "app_name and user_id are required, as non-empty strings."}
    return {"invocation_id": record.invocation_id, "session_id": record.session_id}


@celery_app.task(name=TASK_DRAIN, bind=True, ignore_result=True)
def drain(self: Task, app_name: str, user_id: str, session_id: str) -> None:
    """Ask the orchestrators to process the work queued for one session (a wake-up)."""
    get_runtime().run(_post_wakeup((app_name, user_id, session_id)))


async def _post_wakeup(key: SessionKey) -> None:
    services = await get_runtime().services()
    assert services.wakeups is not None
    await services.wakeups.post(key)


@celery_app.task(name=TASK_ANSWER, bind=True)
def answer(
    self: Task, app_name: str, invocation_id: str, function_call_id: str, response: dict[str, Any]
) -> dict[str, Any]:
    """Answer a pending function call from outside; the invocation resumes."""
    runtime = get_runtime()
    services = runtime.run(runtime.services())
    if not isinstance(response, dict):
        return {"error": "response must be a JSON object."}
    try:
        runtime.run(services.service.answer(app_name, invocation_id, function_call_id, response))
    except AnswerRejectedError as error:
        return {"error": str(error)}
    return {"invocation_id": invocation_id, "answered": function_call_id}


@celery_app.task(name=TASK_CANCEL, bind=True)
def cancel(self: Task, app_name: str, invocation_id: str) -> dict[str, Any]:
    """Cancel an invocation (queued, running or paused)."""
    runtime = get_runtime()
    services = runtime.run(runtime.services())
    key = runtime.run(services.service.cancel(app_name, invocation_id))
    if key is None:
        return {"error": f"Unknown invocation {invocation_id!r} of app {app_name!r}."}
    return {"invocation_id": invocation_id, "cancel_requested": True}


@celery_app.task(name=TASK_RUN_TOOL, bind=True, acks_late=True, ignore_result=True)
def run_tool(self: Task, **kwargs: Any) -> dict[str, Any]:
    """Run one tool call for an invocation and hand its result back (workers).

    The result is stored before this task returns (and so before its message is acked); a
    redelivered copy finds the result stored and does not run the tool again.
    """
    try:
        job = ToolJob.model_validate(kwargs)
    except ValidationError as error:
        logger.error("Malformed tool job rejected: %s", error)
        return {"error": f"malformed tool job: {error.error_count()} invalid field(s)"}
    runtime = get_runtime()
    # Celery's request context is thread-local: read it here, not on the loop thread.
    reporter = _progress_reporter(self, self.request.id, self.request.hostname, job)
    if is_plain_sync_tool(job, runtime.apps()):
        return runtime.run_here(_run_tool(reporter, job))
    return runtime.run(_run_tool(reporter, job))


_dispatcher_lock = threading.Lock()
_dispatchers: dict[tuple[int, str | None], Any] = {}


def _event_dispatcher(task: Task, hostname: str | None) -> Any:
    """One event dispatcher per process and hostname (opening one per report is slow)."""
    key = (os.getpid(), hostname)
    dispatcher = _dispatchers.get(key)
    if dispatcher is None:
        dispatcher = task.app.events.Dispatcher(
            task.app.connection_for_write(), hostname=hostname, enabled=True
        )
        _dispatchers[key] = dispatcher
    return dispatcher


def _progress_reporter(
    task: Task, task_id: str | None, hostname: str | None, job: ToolJob
) -> Callable[[dict[str, Any]], None]:
    """Progress goes to the result backend (state PROGRESS) and out as a task event.

    Flower shows an event of type ``task-progress`` as the custom state ``PROGRESS``.
    """
    ids = {"invocation_id": job.invocation_id, "function_call_id": job.function_call_id,
           "tool": job.tool_name}

    def report(payload: dict[str, Any]) -> None:
        if not task_id:
            return
        task.update_state(task_id=task_id, state="PROGRESS", meta={**ids, "progress": payload})
        with _dispatcher_lock:
            _event_dispatcher(task, hostname).send(
                "task-progress", uuid=task_id, progress=payload, **ids
            )

    return report


async def _skip_reason(
    services: Services, job: ToolJob | AgentJob, answered: Callable[[ToolResult], bool]
) -> str | None:
    """Why a (possibly redelivered) job must not run: cancelled, or already answered."""
    cancelled, done = await services.store.job_state(
        job.app_name, job.invocation_id, job.function_call_id)
    if cancelled:
        return "skipped: invocation cancelled"
    if done is not None and answered(done):
        return "already answered"
    return None


def _branch_answered(done: ToolResult) -> bool:
    """A branch result counts once it finished or came back paused with its events."""
    return done.response is not None or bool(done.events)


async def _hand_back(services: Services, job: ToolJob | AgentJob, result: ToolResult) -> None:
    """Store the result (first writer wins); its resume item posts the orchestrators' wake-up."""
    await services.service.deliver(
        job.app_name, job.invocation_id, result, key=(job.app_name, job.user_id, job.session_id)
    )


async def _run_tool(progress: Callable[[dict[str, Any]], None], job: ToolJob) -> dict[str, Any]:
    runtime = get_runtime()
    services = await runtime.services()
    summary = {"invocation_id": job.invocation_id, "function_call_id": job.function_call_id,
               "tool": job.tool_name}
    if skip := await _skip_reason(services, job, lambda done: done.response is not None):
        return {**summary, "status": skip}
    result = await execute_tool_job(
        job, services.registry, artifact_service=services.artifacts, progress=progress
    )
    try:
        check_size(result.response, runtime.settings.max_payload_bytes, "the tool result")
    except PayloadError as error:
        result = ToolResult(function_call_id=job.function_call_id, tool_name=job.tool_name,
                            response={"error": str(error)}, error=str(error), worker=result.worker)
    await _hand_back(services, job, result)
    status = "error" if result.error else ("pending" if result.response is None else "answered")
    return {**summary, "status": status, "worker": result.worker}


@celery_app.task(name=TASK_RUN_AGENT, bind=True, acks_late=True, ignore_result=True)
def run_agent(self: Task, **kwargs: Any) -> dict[str, Any]:
    """Run one ParallelAgent branch for an invocation and hand its events back (workers)."""
    try:
        job = AgentJob.model_validate(kwargs)
    except ValidationError as error:
        logger.error("Malformed branch job rejected: %s", error)
        return {"error": f"malformed branch job: {error.error_count()} invalid field(s)"}
    return get_runtime().run(_run_agent(job))


async def _run_agent(job: AgentJob) -> dict[str, Any]:
    runtime = get_runtime()
    services = await runtime.services()
    summary = {"invocation_id": job.invocation_id, "function_call_id": job.function_call_id,
               "agent": job.agent_name, "branch": job.branch}
    if skip := await _skip_reason(services, job, _branch_answered):
        return {**summary, "status": skip}
    result = await execute_agent_job(job, services.registry, artifact_service=services.artifacts)
    await _hand_back(services, job, result)
    status = "error" if result.error else ("paused" if result.response is None else "completed")
    return {**summary, "status": status, "events": len(result.events), "worker": result.worker}
