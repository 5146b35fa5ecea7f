"""A job's steps on a worker, around the tool or branch it runs: claim, watch, hand back.

:mod:`workers.tasks` holds the Celery tasks; each runs its job through these steps:

- :func:`claim`: only a job an orchestrator dispatched runs (the digest of the job sent for
  the call's current attempt), once per attempt, and never one no longer wanted;
- :func:`run_watched`: the job's body runs with heartbeats (a silent job is taken for lost
  and sent again) and is stopped when its invocation is cancelled or its call answered;
- :func:`hand_back`: the result is stored (first writer wins), which wakes the orchestrators;
- :func:`retrying`: each step rides out a Redis outage with backoff rather than failing the
  job or running its tool again (an infrastructure error is never the tool's).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from typing import Any, TypeVar

from celery.exceptions import Reject

from orchestrator import failpoints
from orchestrator.distributed.executor import worker_id
from orchestrator.distributed.hand_back import deliver_result
from orchestrator.distributed.models import AgentJob, ToolJob, ToolResult
from orchestrator.errors import error_text, is_infrastructure_error
from workers.runtime import Services, get_runtime

logger = logging.getLogger(__name__)
T = TypeVar("T")


RETRY_FOR_SECONDS = 600.0
"""How long a job's own bookkeeping keeps retrying while Redis is away before the job's
message goes back to its queue (the tool then runs again, on whichever worker takes it)."""


async def retrying(what: str, step: Callable[[], Awaitable[T]]) -> T:
    """Run ``step``, retrying with backoff while it fails on infrastructure (Redis away).

    A finished tool's result is stored this way: kept in memory until Redis is back, instead
    of the tool running again. Past :data:`RETRY_FOR_SECONDS`, or on any other error, the
    error is raised (an infrastructure error as a rejection that requeues the message).
    """
    deadline = time.monotonic() + RETRY_FOR_SECONDS
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


SKIPPED = {
    "cancelled": "skipped: invocation cancelled",
    "answered": "already answered",
    "superseded": "skipped: a later attempt of this call was dispatched",
    "waiting": "skipped: already ran; the call waits for an answer from outside",
    "forged": "refused: no call was dispatched with this job",
}
"""What a job that is not run says it did (Flower shows it as the task's result)."""


STOPPED = "stopped: invocation cancelled or call answered"


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


async def run_watched(
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


async def claim(services: Services, job: ToolJob | AgentJob, digest: str) -> str:
    """'run' if this worker may run the job (now marked running on it), else why not.

    Only a job an orchestrator published runs: its journal holds the digest of the exact
    job sent for the call's current attempt, and ``digest`` (of the job as received) must be
    it. A forged job (another call, tool, agent, user, arguments or state) is refused and
    logged: it runs nothing, stores nothing, so nothing of it is ever appended.
    """
    runtime = get_runtime()
    verdict: str = await retrying("Claiming a job", lambda: services.store.claim_job(
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
                    job.function_call_id, name, job.attempt, job.invocation_id, SKIPPED[verdict])
    return verdict


async def hand_back(services: Services, job: ToolJob | AgentJob, result: ToolResult) -> None:
    """Store the result (first writer wins); its resume item posts the orchestrators' wake-up."""
    key = (job.app_name, job.user_id, job.session_id)

    async def store() -> None:
        failpoints.hit("worker.before_store")
        await deliver_result(services.store, services.queue, job.app_name, job.invocation_id,
                             result, key=key)

    # The job beats until its result is in: storing it may wait out a Redis outage, and a
    # silent job would be taken for lost and run again.
    with get_runtime().heartbeats.running(job):
        await retrying("Storing a job's result", store)


async def hand_back_or_answer(services: Services, job: ToolJob, result: ToolResult) -> ToolResult:
    """Hand ``result`` back; if that fails for anything but the infrastructure, an error instead.

    A result that cannot be stored is the tool's failure, answered once: raised, the task
    would fail after its heartbeats stopped, and the watchdog would take that for its
    worker's death and run the tool again. Returns what was handed back.
    """
    try:
        await hand_back(services, job, result)
        return result
    except Exception as error:
        if isinstance(error, Reject) or is_infrastructure_error(error):
            raise
        logger.exception("The result of call %.100r (%.100r) of invocation %.100r could not be "
                         "stored", job.function_call_id, job.tool_name, job.invocation_id)
        message = f"The result of tool {job.tool_name!r} could not be stored: {error_text(error)}"
        answer = ToolResult(function_call_id=job.function_call_id, tool_name=job.tool_name,
                            response={"error": message}, error=message, worker=result.worker)
        await hand_back(services, job, answer)
        return answer
