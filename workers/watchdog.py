"""The orchestrators' job watchdog: no remote call waits forever for a job that is gone.

Celery over Redis loses a job in two ways nothing else notices: the worker running it dies
(its message comes back only after the broker's visibility timeout, an hour by default), or
a worker dies between kombu popping the message and recording it as unacknowledged (the
message is gone). Every orchestrator runs this watchdog on its event loop. It reads the
calls that are due in the job watch index (see :mod:`orchestrator.backends.redis.jobs`)
and, for each one that has no result yet:

- running, with a beat younger than ``3 x job_heartbeat_seconds``: alive, look again later;
- queued, and its message is still in its queue: waiting for a worker, look again later;
- past its deadline (a tool's ``adk_celery_timeout`` metadata, or ``tool_timeout_seconds``):
  answered with a timeout error the model can read;
- otherwise lost (a silent worker, or a message neither queued nor claimed for
  ``job_lost_after_seconds``): dispatched again with the same call id and the next attempt
  number, or, once its worker died ``tool_max_attempts`` times while running it, answered
  with an error naming the tool and the cause, so the model can go on. A message lost
  before any worker started it is counted apart, against the same limit: losing one is not
  the tool's doing, but a job whose message is never acknowledged must not go round for ever.

An attempt whose worker died may have left its task in the state ``PROGRESS`` in Celery's
result backend (a tool that reported progress): before the call is sent again or answered,
that state is replaced by ``FAILURE`` saying so, and the task's ``task-failed`` event that
its worker never sent is sent for Flower (:mod:`workers.lost_attempts`). A call
answered by its timeout while an attempt runs is watched on until that attempt ends: its
worker may have died just before the deadline, too recently to be taken for dead then
(its next look was the deadline). Once it is silent, its state is settled the same way; a
live worker goes on beating, and its task's end removes its state itself.

Several orchestrators may look at one call at once: a job goes out once per attempt
(:data:`~orchestrator.backends.redis.jobs.PUBLISH`), and a late copy of an older
attempt is skipped by the worker that receives it (it claims 'superseded'). Each attempt is
journaled with the digest of its own job, so the worker that receives it runs it as one an
orchestrator dispatched (see :data:`~orchestrator.backends.redis.jobs.CLAIM`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import TYPE_CHECKING, Any

from config import Settings
from orchestrator import failpoints
from orchestrator.backends.redis import keys
from orchestrator.backends.redis.jobs import (
    CLOCK,
    COUNT_ATTEMPT,
    DEATHS,
    LOSSES,
    CountAttempt,
    ReadClock,
    dispatched_job,
    parse_member,
    queued_look_after,
    silence_limit,
)
from orchestrator.backends.redis.stats import queue_lists
from orchestrator.distributed.executor import deliver_result
from orchestrator.distributed.models import AgentJob, ToolJob, ToolResult
from orchestrator.distributed.transport import timeout_error
from orchestrator.errors import is_infrastructure_error
from orchestrator.flows.contents import RUN_BRANCH
from workers import metrics
from workers.lost_attempts import LostAttemptEvents, LostAttempts
from workers.periodic import Periodic
from workers.transport import CeleryTransport, job_task_id

if TYPE_CHECKING:
    from workers.runtime import Services

logger = logging.getLogger(__name__)

_BATCH = 100
"""Calls looked at per sweep at most (the rest are due next time)."""


class JobWatchdog(Periodic):
    """Finds lost jobs in the watch index and dispatches them again (see the module doc)."""

    what = "Job watchdog sweep"

    def __init__(self, services: Services, transport: CeleryTransport, settings: Settings,
                 hostname: str | None = None) -> None:
        """Watch the calls of ``services``, sending them again through ``transport``.

        ``hostname``: this orchestrator's Celery node name, which the events it sends for
        Flower name (:class:`~workers.lost_attempts.LostAttemptEvents`).
        """
        super().__init__(settings.watchdog_interval_seconds)
        self._services = services
        self._redis = services.redis
        self._count_attempt = COUNT_ATTEMPT.register(self._redis)
        self._clock = CLOCK.register(self._redis)
        self._transport = transport
        self._lost = LostAttempts(self._redis, transport.app.backend)
        self._lost_events = LostAttemptEvents(transport.app, hostname)
        self._watch_key = keys.job_watch(settings.invocations_queue)
        self._silent_after = silence_limit(settings.job_heartbeat_seconds)
        self._missing_after = queued_look_after(settings.job_lost_after_seconds)
        self._max_attempts = max(1, settings.tool_max_attempts)
        self._default_timeout = settings.tool_timeout_seconds
        self._missing_since: dict[str, float] = {}
        """Calls seen neither queued nor claimed, and since when (this orchestrator's view)."""
        self._seeing_since = 0.0
        """Since when this watchdog reads Redis without failing: silence from before that
        (its start, or the end of an outage, when no worker could beat) is not held
        against a job. Redis's clock, as every time here: set by the first sweep."""
        self._blind = True

    async def run_pass(self) -> None:
        """One sweep (every ``watchdog_interval_seconds``)."""
        await self.sweep()

    async def stop(self) -> None:
        """Stop sweeping; release the connection the events for Flower went by."""
        await super().stop()
        await asyncio.to_thread(self._lost_events.close)

    def on_outage(self) -> None:
        """A sweep that failed on Redis: the next one that reads gives workers time to beat."""
        self._blind = True

    async def sweep(self, now: float | None = None) -> int:
        """Look at every call due by ``now``; return how many were dispatched again or ended.

        ``now``: Redis's clock by default, which stamps the workers' beats too (a worker or
        an orchestrator whose own clock is off does not make a live job look silent).
        """
        asked = time.monotonic()
        if now is None:
            # Read by a script: one that Redis holds back while it holds writes back (the
            # workers' beats are scripts too), so a pause of writes is an outage here as
            # well; the reads below would go on, and see only the silence it made.
            seconds, micros = await self._clock(ReadClock())
            now = int(seconds) + int(micros) / 1_000_000
            # A read that waited out a Redis outage (the client retries through a restart)
            # or a pause of writes, the first sweep, or one after failed sweeps: Redis is
            # back, and every worker gets its time to beat again before its silence counts.
            if self._blind or time.monotonic() - asked > self._interval + 1.0:
                self._blind, self._seeing_since = False, now
        due = await self._redis.zrangebyscore(self._watch_key, "-inf", now, start=0, num=_BATCH)
        acted = 0
        for member in due:
            acted += await self._look(member, now)
        return acted

    async def _look(self, member: str, now: float) -> int:
        app_name, invocation_id, call_id = parse_member(member)
        jobs = keys.invocation_jobs(app_name, invocation_id)
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.hmget(jobs, f"a:{call_id}", f"c:{call_id}", f"r:{call_id}", f"d:{call_id}",
                       f"t:{call_id}")
            pipe.hexists(keys.invocation_results(app_name, invocation_id), call_id)
            pipe.exists(keys.cancel_flag(app_name, invocation_id))
            (attempt_raw, dispatch_raw, run_raw, deadline_raw, timed_out_raw), answered, \
                cancelled = await pipe.execute()
        run: dict[str, Any] = json.loads(run_raw) if run_raw else {"state": "queued"}
        if answered and timed_out_raw is not None:
            await self._follow_timed_out(member, invocation_id, call_id, int(timed_out_raw), run,
                                         now)
            return 0
        if answered or cancelled or attempt_raw is None or dispatch_raw is None:
            await self._forget(member)
            return 0
        dispatch: dict[str, Any] = json.loads(dispatch_raw)
        deadline = float(deadline_raw) if deadline_raw is not None else None
        if deadline is not None and now >= deadline:
            self._missing_since.pop(member, None)
            await self._time_out(member, dispatched_job(dispatch), int(attempt_raw), run, now)
            return 1
        cause = await self._lost_because(member, dispatch, run, now, deadline)
        if cause is None:
            return 0
        self._missing_since.pop(member, None)
        # Only runs that died count against the call's attempts (a tool that kills its
        # worker must not loop forever); a message lost before any worker started it does not.
        # A message lost again and again is bounded too (by the same limit, counted apart):
        # a job that keeps its worker from ever acknowledging it must not go round for ever.
        deaths = lost = 0
        if run.get("state") == "running":
            # Once per attempt, however many watchdogs find it dead at the same time.
            deaths = int(await self._count_attempt(CountAttempt(
                jobs=jobs, call_id=call_id, attempt=str(attempt_raw), counter=DEATHS)))
        else:
            lost = int(await self._count_attempt(CountAttempt(
                jobs=jobs, call_id=call_id, attempt=str(attempt_raw), counter=LOSSES)))
        failpoints.hit("watchdog.attempt_counted")  # counted; not sent again nor answered yet
        await self._dispatch_again(dispatched_job(dispatch), int(attempt_raw), deaths, cause,
                                   lost=lost)
        return 1

    async def _look_again(self, member: str, when: float, deadline: float | None) -> None:
        """Have the call looked at again at ``when`` (or at its deadline, if sooner)."""
        await self._redis.zadd(self._watch_key, {member: min(when, deadline or when)})

    async def _time_out(self, member: str, raw: dict[str, Any], attempt: int,
                        run: dict[str, Any], now: float) -> None:
        """Answer a call past its deadline with an error the model can read.

        A copy of the job still queued is skipped by the worker that takes it (the call is
        answered); one still running goes on, and its result is dropped (first answer wins).
        A running attempt whose worker is dead has its task state settled first; one whose
        worker only looks alive is watched on (:meth:`_follow_timed_out`).
        """
        job = ToolJob.model_validate(raw)
        timeout = job.timeout_seconds or self._default_timeout
        message = timeout_error(job.tool_name, timeout)
        heard = self._heard(run, attempt)
        if heard is not None and now - heard >= self._silent_after:
            await self._settle(job.invocation_id, job.function_call_id, attempt,
                               f"{_stopped(run, now)}; {_ANSWERED_BY_TIMEOUT}")
        elif heard is not None:
            # Marked before the answer (which takes the call out of the watch index): a
            # watchdog that dies in between does all this again on its next look.
            await self._redis.hset(keys.invocation_jobs(job.app_name, job.invocation_id),
                                   f"t:{job.function_call_id}", attempt)
            failpoints.hit("watchdog.timeout_marked")  # marked; the call not answered yet
        logger.warning("Call %s of invocation %s: %s", job.function_call_id, job.invocation_id,
                       message)
        await self._answer_with_error(job, job.tool_name, message)
        metrics.WATCHDOG_ANSWERS.labels("timeout").inc()
        if heard is not None and now - heard < self._silent_after:
            await self._redis.zadd(self._watch_key, {member: heard + self._silent_after})

    async def _follow_timed_out(self, member: str, invocation_id: str, call_id: str,
                                attempt: int, run: dict[str, Any], now: float) -> None:
        """The attempt running when the call was answered by its timeout: settled once dead.

        Still beating (its worker runs the tool on: a sync tool is not interrupted), it is
        looked at again when it would be silent too long; silent, its ``PROGRESS`` state is
        settled (nothing is written if its task ended and removed it).
        """
        heard = self._heard(run, attempt)
        if heard is not None and now - heard < self._silent_after:
            await self._redis.zadd(self._watch_key, {member: heard + self._silent_after})
            return
        if heard is not None:
            await self._settle(invocation_id, call_id, attempt,
                               f"{_stopped(run, now)}; {_ANSWERED_BY_TIMEOUT}")
        app_name, _, _ = parse_member(member)
        await self._redis.hdel(keys.invocation_jobs(app_name, invocation_id), f"t:{call_id}")
        await self._forget(member)

    def _heard(self, run: dict[str, Any], attempt: int) -> float | None:
        """When ``attempt``, running, was last heard of (None: it is not running).

        Not before this watchdog could see: silence from before then is not held against it.
        """
        if run.get("state") != "running" or int(run.get("attempt", attempt)) != attempt:
            return None
        return max(float(run.get("beat", 0)), self._seeing_since)

    async def _answer_with_error(self, job: ToolJob | AgentJob, name: str, message: str) -> None:
        result = ToolResult(function_call_id=job.function_call_id, tool_name=name,
                            response={"error": message}, error=message)
        await deliver_result(self._services.store, self._services.queue, job.app_name,
                             job.invocation_id, result, key=(job.app_name, job.user_id, job.session_id))

    async def _lost_because(
        self, member: str, dispatch: dict[str, Any], run: dict[str, Any], now: float,
        deadline: float | None,
    ) -> str | None:
        """Why the job is lost, or None (it is alive or waiting: look again later)."""
        if run.get("state") == "running":
            self._missing_since.pop(member, None)
            beat = float(run.get("beat", 0))
            heard = max(beat, self._seeing_since)
            if now - heard < self._silent_after:
                await self._look_again(member, heard + self._silent_after, deadline)
                return None
            return _stopped(run, now)
        message, queue_key = dispatch.get("message"), dispatch.get("queue_key")
        if message is not None and queue_key is not None:
            queued = await self._redis.lpos(queue_key, message) is not None
        else:
            # Sent by kombu's own publish (fast_publish off, TLS or Sentinel brokers): its
            # place is unknown. While its queue holds messages it may be one of them; only
            # a job missing from an empty queue is taken for lost.
            queued = await self._queue_holds_messages(str(dispatch.get("queue", "")))
        if queued:
            self._missing_since.pop(member, None)  # still waiting for a free worker
            await self._look_again(member, now + self._missing_after, deadline)
            return None
        since = max(self._missing_since.setdefault(member, now), self._seeing_since)
        if now - since < self._missing_after:
            await self._look_again(member, since + self._missing_after, deadline)
            return None
        return "its message was lost before any worker started it"

    async def _queue_holds_messages(self, queue: str) -> bool:
        """True if the queue (any of kombu's priority lists of it) holds a message."""
        if not queue:
            return False
        async with self._redis.pipeline(transaction=False) as pipe:
            for key in queue_lists(queue):
                pipe.llen(key)
            return any(await pipe.execute())

    async def _dispatch_again(
        self, raw: dict[str, Any], attempt: int, deaths: int, cause: str, *, lost: int = 0
    ) -> None:
        job: ToolJob | AgentJob = AgentJob.model_validate(raw) if "parallel_agent" in raw else (
            ToolJob.model_validate(raw))
        name = job.agent_name if isinstance(job, AgentJob) else job.tool_name
        limit = (job.max_attempts if isinstance(job, ToolJob) else None) or self._max_attempts
        if deaths >= limit or lost >= limit:
            how = (f"its worker died in {deaths} of {attempt} attempt(s)" if deaths >= limit
                   else f"its job was lost in {lost} of {attempt} attempt(s)")
            message = (f"{'Branch' if isinstance(job, AgentJob) else 'Tool'} {name!r} did not "
                       f"finish: {cause}; {how}.")
            logger.warning("Call %s of invocation %s: %s", job.function_call_id,
                           job.invocation_id, message)
            await self._settle_dead(job, attempt, deaths, (
                f"{cause}; not sent again ({how}): the call is answered with an error"))
            await self._answer_with_error(
                job, name if isinstance(job, ToolJob) else RUN_BRANCH, message)
            metrics.WATCHDOG_ANSWERS.labels("gave_up").inc()
            return
        again = job.model_copy(update={"attempt": attempt + 1})
        logger.warning("Call %s (%s) of invocation %s: %s; dispatching attempt %d",
                       job.function_call_id, name, job.invocation_id, cause, attempt + 1)
        task_id = job_task_id(job.invocation_id, job.function_call_id, attempt + 1)
        await self._settle_dead(job, attempt, deaths,
                                f"{cause}; sent again as attempt {attempt + 1} (task {task_id})")
        if isinstance(again, AgentJob):
            await self._transport.submit_agent(again)
        else:
            await self._transport.submit(again)
        failpoints.hit("watchdog.sent_again")  # the next attempt journaled and out
        # ``deaths`` is only counted for a job found running: its worker went silent.
        metrics.REDELIVERIES.labels("branch" if isinstance(again, AgentJob) else "tool",
                                    "worker_died" if deaths else "message_lost").inc()

    async def _settle_dead(
        self, job: ToolJob | AgentJob, attempt: int, deaths: int, what: str
    ) -> None:
        """A dead attempt's ``PROGRESS`` state ends as ``FAILURE``: worker lost, and ``what``.

        Done before the call is sent again or answered, the step after which this call is
        not looked at as lost again: a watchdog that dies in between, or meets Redis away
        (the sweep fails and is retried, as for any of its reads), does it all again on its
        next look, and the settling is idempotent. Any other error is logged: the call goes on.
        """
        if not deaths:
            return  # no worker ran this attempt (its message was lost): no task state
        failpoints.hit("watchdog.settling_lost")
        await self._settle(job.invocation_id, job.function_call_id, attempt, what)
        failpoints.hit("watchdog.lost_settled")

    async def _settle(self, invocation_id: str, call_id: str, attempt: int, what: str) -> None:
        """End the attempt's task as ``FAILURE``: worker lost, and ``what``.

        In the result backend (its ``PROGRESS`` state) and in Flower (a ``task-failed``
        event). Redis errors are raised (the sweep is retried); any other error is logged.
        """
        reason = f"Worker lost: {what}."
        try:
            await self._lost.settle_call(invocation_id, call_id, attempt, reason)
        except Exception as error:
            if is_infrastructure_error(error):
                raise
            logger.exception("Call %s of invocation %s: the PROGRESS state of its attempt %d "
                             "not settled", call_id, invocation_id, attempt)
        failpoints.hit("watchdog.lost_state_settled")
        # Also when it left no PROGRESS state: Flower shows it STARTED until told otherwise.
        await asyncio.to_thread(self._lost_events.send,
                                job_task_id(invocation_id, call_id, attempt), reason)

    async def _forget(self, member: str) -> None:
        """Take the call out of the watch index (and this watchdog's memory)."""
        self._missing_since.pop(member, None)
        await self._redis.zrem(self._watch_key, member)


_ANSWERED_BY_TIMEOUT = "not sent again: the call was answered with a timeout error at its deadline"
"""What became of a call whose running attempt died around its deadline."""


def _stopped(run: dict[str, Any], now: float) -> str:
    """Why a running attempt is taken for dead: its worker's silence."""
    beat = float(run.get("beat", 0))
    return f"its worker {run.get('worker')} stopped (no sign of life for {now - beat:.0f} s)"
