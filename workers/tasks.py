"""Celery tasks: thin wrappers that parse JSON kwargs and run the shared async code."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from typing import Any, TypeVar

from celery import Task
from celery.exceptions import Reject
from pydantic import ValidationError

from orchestrator import failpoints
from orchestrator.backends.redis.jobs import job_digest
from orchestrator.distributed.executor import (
    deliver_result,
    execute_agent_job,
    execute_tool_job,
    worker_id,
)
from orchestrator.distributed.intake import check_identifier
from orchestrator.distributed.models import AgentJob, ToolJob, ToolResult
from orchestrator.distributed.stores import SessionKey
from orchestrator.errors import (
    AnswerRejectedError,
    PayloadError,
    RequestError,
    error_text,
    is_infrastructure_error,
    no_invocation_text,
)
from workers.celery_app import (
    TASK_ANSWER,
    TASK_CANCEL,
    TASK_DRAIN,
    TASK_INVOKE,
    TASK_RUN_AGENT,
    TASK_RUN_TOOL,
)
from workers.celery_app import app as celery_app
from workers.enqueue import check_size, with_message_ids
from workers.lifecycle import refused_here, refused_off_orchestrators
from workers.loop import LoopThreadDeadError
from workers.progress import progress_reporter
from workers.runtime import Services, get_runtime

logger = logging.getLogger(__name__)
T = TypeVar("T")


@celery_app.task(name=TASK_INVOKE, bind=True, max_retries=None)
def invoke(self: Task, **kwargs: Any) -> dict[str, Any]:
    """Start an invocation: ``app_name``, ``user_id``, ``new_message`` (text or Content JSON).

    Optional: ``session_id`` (a new session when omitted), ``state_delta``, ``invocation_id``
    (idempotency: the same id is one invocation), ``create_session``, ``streaming``. Returns
    the invocation id and its session id once the invocation is recorded and queued; an
    orchestrator (this one or another) runs it when the wake-up it posted comes round.
    Without ``invocation_id``, its ids are derived from the message's: a message delivered
    again is the same invocation.
    """
    if (refusal := refused_off_orchestrators(TASK_INVOKE, self.request.delivery_info)) is not None:
        return refusal
    return get_runtime().run(_invoke(with_message_ids(kwargs, self.request.id)))


async def _invoke(kwargs: dict[str, Any]) -> dict[str, Any]:
    # Redis away: retried here, never acknowledged as done (a failed task's message is).
    try:
        record, _ = await _retrying("Enqueuing an invocation",
                                    lambda: get_runtime().submit_invocation(kwargs))
    except RequestError as error:
        return {"error": str(error)}
    failpoints.hit("invoke.queued")
    return {"invocation_id": record.invocation_id, "session_id": record.session_id}


@celery_app.task(name=TASK_DRAIN, bind=True, ignore_result=True)
def drain(self: Task, app_name: str, user_id: str, session_id: str) -> None:
    """Ask the orchestrators to process the work queued for one session (a wake-up)."""
    if refused_off_orchestrators(TASK_DRAIN, self.request.delivery_info) is not None:
        return
    limits = get_runtime().limits
    try:
        key = tuple(check_identifier(field, value, limits) for field, value in (
            ("app_name", app_name), ("user_id", user_id), ("session_id", session_id)))
    except RequestError as error:
        logger.warning("Wake-up refused: %s", error)
        return
    get_runtime().run(_post_wakeup((key[0], key[1], key[2])))


async def _post_wakeup(key: SessionKey) -> None:
    services = await get_runtime().services()
    assert services.wakeups is not None
    await services.wakeups.post(key)


@celery_app.task(name=TASK_ANSWER, bind=True)
def answer(
    self: Task, app_name: str, invocation_id: str, function_call_id: str, response: dict[str, Any]
) -> dict[str, Any]:
    """Answer a pending function call from outside; the invocation resumes.

    Returns ``{"error": ...}`` (and stores nothing) for malformed input or a call the
    invocation does not wait for.
    """
    if (refusal := refused_off_orchestrators(TASK_ANSWER, self.request.delivery_info)) is not None:
        return refusal
    runtime = get_runtime()
    services = runtime.run(runtime.services())
    try:
        runtime.run(_retrying("Answering a call", lambda: services.service.answer(
            app_name, invocation_id, function_call_id, response)))
    except (AnswerRejectedError, RequestError) as error:
        return {"error": str(error)}
    failpoints.hit("answer.stored")
    return {"invocation_id": invocation_id, "answered": function_call_id}


@celery_app.task(name=TASK_CANCEL, bind=True)
def cancel(self: Task, app_name: str, invocation_id: str) -> dict[str, Any]:
    """Cancel an invocation (queued, running or paused)."""
    if (refusal := refused_off_orchestrators(TASK_CANCEL, self.request.delivery_info)) is not None:
        return refusal
    runtime = get_runtime()
    services = runtime.run(runtime.services())
    try:
        key = runtime.run(_retrying("Cancelling an invocation",
                                    lambda: services.service.cancel(app_name, invocation_id)))
    except RequestError as error:
        return {"error": str(error)}
    if key is None:
        return {"error": no_invocation_text(app_name, invocation_id)}
    return {"invocation_id": invocation_id, "cancel_requested": True}


@celery_app.task(name=TASK_RUN_TOOL, bind=True, acks_late=True, ignore_result=True)
def run_tool(self: Task, **kwargs: Any) -> dict[str, Any]:
    """Run one tool call for an invocation and hand its result back (workers).

    The result is stored before this task returns (and so before its message is acked); a
    redelivered copy finds the result stored and does not run the tool again. A job that
    matches no call an orchestrator dispatched is refused (see :func:`_claim`), and so is any
    job delivered to an orchestrator.
    """
    if (refusal := refused_here(TASK_RUN_TOOL, self.request.delivery_info, kwargs)) is not None:
        return refusal
    digest = job_digest(kwargs)  # of what came in, before validation
    try:
        job = ToolJob.model_validate(kwargs)
    except ValidationError as error:
        logger.error("Malformed tool job rejected: %s", invalid_fields(error))
        return {"error": f"malformed tool job: {error.error_count()} invalid field(s)"}
    runtime = get_runtime()
    # Celery's request context is thread-local: read it here, not on the loop thread.
    reporter = progress_reporter(self, self.request.id, self.request.hostname, job,
                                 runtime.settings)
    return _run_job(runtime, _run_tool(reporter, job, digest))


def _run_job(runtime: Any, body: Coroutine[Any, Any, T]) -> T:
    """Run a job's body on the process's loop.

    A loop thread found dead is no outcome of the job: its message goes back to its queue
    (another worker runs it). Nothing that is not an ``Exception`` gets out of here (the
    loop hands it back as a :class:`~workers.loop.LoopExitError`): Celery's pool code only
    copes with those.
    """
    try:
        return runtime.run(body)  # type: ignore[no-any-return]
    except LoopThreadDeadError as error:
        logger.critical("%s; the job goes back to its queue", error)
        raise Reject(str(error), requeue=True) from error


def invalid_fields(error: ValidationError, most: int = 5) -> str:
    """Which fields of a refused job are wrong, and how: never their values (a job is user data).

    pydantic's own text quotes each value it refused (a message, a state snapshot).
    """
    def place(loc: tuple[Any, ...]) -> str:
        return ".".join(part if isinstance(part, str) and len(part) <= 40 and part.isidentifier()
                        else "[...]" if isinstance(part, str) else str(part) for part in loc)

    problems = [f"{place(e['loc']) or 'job'}: {e['type']}" for e in error.errors(include_input=False)]
    more = f"; and {len(problems) - most} more" if len(problems) > most else ""
    return "; ".join(problems[:most]) + more


_RETRY_FOR_SECONDS = 600.0
"""How long a job's own bookkeeping keeps retrying while Redis is away before the job's
message goes back to its queue (the tool then runs again, on whichever worker takes it)."""


async def _retrying(what: str, step: Callable[[], Awaitable[T]]) -> T:
    """Run ``step``, retrying with backoff while it fails on infrastructure (Redis away).

    A finished tool's result is stored this way: kept in memory until Redis is back, instead
    of the tool running again. Past :data:`_RETRY_FOR_SECONDS`, or on any other error, the
    error is raised (an infrastructure error as a rejection that requeues the message).
    """
    deadline = time.monotonic() + _RETRY_FOR_SECONDS
    delay = 0.1
    while True:
        try:
            return await step()
        except Exception as error:
            if not is_infrastructure_error(error):
                raise
            if time.monotonic() > deadline:
                raise Reject(f"{what}: {error}", requeue=True) from error
            logger.warning("%s failed (%s: %s); retrying in %.1f s",
                           what, type(error).__name__, error, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)


_SKIPPED = {
    "cancelled": "skipped: invocation cancelled",
    "answered": "already answered",
    "superseded": "skipped: a later attempt of this call was dispatched",
    "waiting": "skipped: already ran; the call waits for an answer from outside",
    "running": "skipped: this attempt is running already (its worker is alive)",
    "forged": "refused: no call was dispatched with this job",
}
"""What a job that is not run says it did (Flower shows it as the task's result)."""


_STOPPED = "stopped: invocation cancelled or call answered"


class _Stopper:
    """Stops the job running in the current task once it is not wanted any more.

    That is: its invocation was cancelled, or its call was answered (past its deadline).

    Called from the heartbeat thread; the task is cancelled on its own loop, and only while
    the job's body runs (:meth:`armed`). A sync tool called inline holds its loop until it
    returns: by then the body is over, nothing is cancelled, and its result is dropped (the
    invocation is cancelled).
    """

    def __init__(self) -> None:
        self._task = asyncio.current_task()
        self._loop = asyncio.get_running_loop()
        self._armed = False
        self.stopped = False

    @contextlib.contextmanager
    def armed(self) -> Iterator[None]:
        """The block in which a cancellation stops the job."""
        self._armed = True
        try:
            yield
        finally:
            self._armed = False

    def __call__(self) -> None:
        self._loop.call_soon_threadsafe(self._stop)

    def _stop(self) -> None:
        if self._armed and self._task is not None:
            self.stopped = True
            self._task.cancel()


async def _run_watched(
    job: ToolJob | AgentJob, body: Coroutine[Any, Any, ToolResult]
) -> ToolResult | None:
    """Run a claimed job's body with heartbeats; None if it was stopped (not wanted any more)."""
    stop = _Stopper()
    with get_runtime().heartbeats.running(job, on_cancel=stop):
        try:
            with stop.armed():
                return await body
        except asyncio.CancelledError:
            if not stop.stopped:
                raise
            return None


async def _claim(services: Services, job: ToolJob | AgentJob, digest: str) -> str:
    """'run' if this worker may run the job (now marked running on it), else why not.

    Only a job an orchestrator published runs: its journal holds the digest of the exact
    job sent for the call's current attempt, and ``digest`` (of the job as received) must be
    it. A forged job (another call, tool, agent, user, arguments or state) is refused and
    logged: it runs nothing, stores nothing, so nothing of it is ever appended.
    """
    runtime = get_runtime()
    verdict: str = await _retrying("Claiming a job", lambda: services.store.claim_job(
        job.app_name, job.invocation_id, job.function_call_id, attempt=job.attempt,
        worker=worker_id(), branch=isinstance(job, AgentJob),
        lost_after=runtime.heartbeats.lost_after, digest=digest,
    ))
    name = job.agent_name if isinstance(job, AgentJob) else job.tool_name
    if verdict == "forged":
        logger.warning("Refused a forged job: call %.100r (%.100r, attempt %r) of invocation "
                       "%.100r of app %.100r matches no job an orchestrator dispatched",
                       job.function_call_id, name, job.attempt, job.invocation_id, job.app_name)
    elif verdict != "run":
        logger.info("Skipped call %.100r (%.100r, attempt %r) of invocation %.100r: %s",
                    job.function_call_id, name, job.attempt, job.invocation_id, _SKIPPED[verdict])
    else:
        failpoints.hit("worker.claimed")  # marked running here; nothing run, no beat yet
    return verdict


async def _hand_back(services: Services, job: ToolJob | AgentJob, result: ToolResult) -> None:
    """Store the result (first writer wins); its resume item posts the orchestrators' wake-up."""
    key = (job.app_name, job.user_id, job.session_id)

    async def store() -> None:
        failpoints.hit("worker.before_store")
        await deliver_result(services.store, services.queue, job.app_name, job.invocation_id,
                             result, key=key)

    # The job beats until its result is in: storing it may wait out a Redis outage, and a
    # silent job would be taken for lost and run again.
    with get_runtime().heartbeats.running(job):
        await _retrying("Storing a job's result", store)
    failpoints.hit("worker.result_stored")  # stored with its resume; the message not acked yet


async def _hand_back_or_answer(services: Services, job: ToolJob, result: ToolResult) -> ToolResult:
    """Hand ``result`` back; if that fails for anything but the infrastructure, an error instead.

    A result that cannot be stored is the tool's failure, answered once: raised, the task
    would fail after its heartbeats stopped, and the watchdog would take that for its
    worker's death and run the tool again. Returns what was handed back.
    """
    try:
        await _hand_back(services, job, result)
        return result
    except Exception as error:
        if isinstance(error, Reject) or is_infrastructure_error(error):
            raise
        logger.exception("The result of call %.100r (%.100r) of invocation %.100r could not be "
                         "stored", job.function_call_id, job.tool_name, job.invocation_id)
        message = f"The result of tool {job.tool_name!r} could not be stored: {error_text(error)}"
        answer = ToolResult(function_call_id=job.function_call_id, tool_name=job.tool_name,
                            response={"error": message}, error=message, worker=result.worker)
        await _hand_back(services, job, answer)
        return answer


async def _run_tool(
    progress: Callable[[dict[str, Any]], None], job: ToolJob, digest: str
) -> dict[str, Any]:
    runtime = get_runtime()
    services = await runtime.services()
    summary = {"invocation_id": job.invocation_id, "function_call_id": job.function_call_id,
               "tool": job.tool_name, "attempt": job.attempt}
    if (verdict := await _claim(services, job, digest)) != "run":
        return {**summary, "status": _SKIPPED[verdict]}
    # A service the tool called that could not reach Redis runs the tool again once it is
    # back: the call is answered by the tool, never by the outage.
    result = await _retrying("Running a tool", lambda: _run_watched(job, execute_tool_job(
        job, services.registry, artifact_service=services.artifacts, progress=progress,
        limits=runtime.limits)))
    if result is None:
        return {**summary, "status": _STOPPED}
    try:
        check_size(result.response, runtime.settings.max_payload_bytes, "the tool result")
    except PayloadError as error:
        result = ToolResult(function_call_id=job.function_call_id, tool_name=job.tool_name,
                            response={"error": str(error)}, error=str(error), worker=result.worker)
    result = await _hand_back_or_answer(services, job, result)
    status = "error" if result.error else ("pending" if result.response is None else "answered")
    return {**summary, "status": status, "worker": result.worker}


@celery_app.task(name=TASK_RUN_AGENT, bind=True, acks_late=True, ignore_result=True)
def run_agent(self: Task, **kwargs: Any) -> dict[str, Any]:
    """Run one ParallelAgent branch for an invocation and hand its events back (workers).

    Like :func:`run_tool`: only a branch job an orchestrator dispatched runs, and never on
    an orchestrator.
    """
    if (refusal := refused_here(TASK_RUN_AGENT, self.request.delivery_info, kwargs)) is not None:
        return refusal
    digest = job_digest(kwargs)
    try:
        job = AgentJob.model_validate(kwargs)
    except ValidationError as error:
        logger.error("Malformed branch job rejected: %s", invalid_fields(error))
        return {"error": f"malformed branch job: {error.error_count()} invalid field(s)"}
    return _run_job(get_runtime(), _run_agent(job, digest))


async def _run_agent(job: AgentJob, digest: str) -> dict[str, Any]:
    runtime = get_runtime()
    services = await runtime.services()
    summary = {"invocation_id": job.invocation_id, "function_call_id": job.function_call_id,
               "agent": job.agent_name, "branch": job.branch, "attempt": job.attempt}
    if (verdict := await _claim(services, job, digest)) != "run":
        return {**summary, "status": _SKIPPED[verdict]}
    result = await _retrying("Running a branch", lambda: _run_watched(job, execute_agent_job(
        job, services.registry, artifact_service=services.artifacts,
        tool_timeout_seconds=runtime.settings.tool_timeout_seconds, limits=runtime.limits)))
    if result is None:
        return {**summary, "status": _STOPPED}
    await _hand_back(services, job, result)
    status = "error" if result.error else ("paused" if result.response is None else "completed")
    return {**summary, "status": status, "events": len(result.events), "worker": result.worker}
