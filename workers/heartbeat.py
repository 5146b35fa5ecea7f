"""Signs of life of the jobs a worker process is running, so a long tool is not taken for lost.

One daemon thread per process, with its own synchronous Redis client (a tool that blocks its
thread, or its event loop, must not stop the beats), writes every running job's beat into
the job journal every ``job_heartbeat_seconds`` (see
:mod:`orchestrator.backends.redis.jobs`). A job that stops beating, because its worker
died, is dispatched again by an orchestrator's watchdog once ``3 x job_heartbeat_seconds``
have passed. Jobs shorter than one interval never beat: claiming a job counts as its first.
A beat that finds the invocation cancelled, or the call answered already (past its deadline),
stops the job where it can (an async tool or a branch, cancelled on its event loop; a sync
tool runs to its end and its result is dropped).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator

import redis

from orchestrator.backends.redis import keys
from orchestrator.backends.redis.connection import connect_sync
from orchestrator.backends.redis.jobs import BEAT, Beat, silence_limit, watch_member
from orchestrator.distributed.models import AgentJob, ToolJob

logger = logging.getLogger(__name__)


class Heartbeats:
    """The running jobs of this process, and the thread that says they are alive."""

    def __init__(
        self, redis_url: str, watch_key: str, interval: float, worker: Callable[[], str]
    ) -> None:
        """``worker``: this process's name, asked at each beat (it changes across a fork)."""
        self._url = redis_url
        self._watch_key = watch_key
        self.interval = max(0.05, interval)
        self.lost_after = silence_limit(interval)
        """How long a silent job is taken for alive: what claims and beats promise."""
        self._worker = worker
        self._running: dict[int, tuple[ToolJob | AgentJob, Callable[[], None] | None]] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._ids = iter(range(1, 1 << 62))

    @contextlib.contextmanager
    def running(
        self, job: ToolJob | AgentJob, on_cancel: Callable[[], None] | None = None
    ) -> Iterator[None]:
        """Beat for ``job`` while the block runs.

        ``on_cancel`` is called (once, from the heartbeat thread) when a beat finds the
        invocation cancelled: it should stop the job if it can.
        """
        with self._lock:
            token = next(self._ids)
            self._running[token] = (job, on_cancel)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._beat_forever, name="adk-heartbeats",
                                                daemon=True)
                self._thread.start()
        try:
            yield
        finally:
            with self._lock:
                self._running.pop(token, None)

    def _beat_forever(self) -> None:
        client = connect_sync(self._url, socket_timeout=max(5.0, self.interval))
        beat = BEAT.register(client)
        while True:
            time.sleep(self.interval)
            with self._lock:
                running = list(self._running.items())
            if not running:
                continue
            try:
                with client.pipeline(transaction=False) as pipe:
                    for _, (job, _) in running:
                        beat(Beat(
                            jobs=keys.invocation_jobs(job.app_name, job.invocation_id),
                            watch=self._watch_key,
                            cancel=keys.cancel_flag(job.app_name, job.invocation_id),
                            results=keys.invocation_results(job.app_name, job.invocation_id),
                            call_id=job.function_call_id, attempt=job.attempt, worker=self._worker(),
                            member=watch_member(job.app_name, job.invocation_id,
                                                job.function_call_id),
                            lost_after=self.lost_after), client=pipe)
                    replies = pipe.execute()
            except redis.RedisError as error:  # Redis away: the next beat tries again
                logger.warning("Job heartbeats failed (%s); retrying", error)
                continue
            for (token, (job, on_cancel)), reply in zip(running, replies, strict=True):
                if reply == 2 and on_cancel is not None:
                    with self._lock:  # once: the job is no longer told again
                        if token in self._running:
                            self._running[token] = (job, None)
                    logger.info("Call %s of invocation %s answered or cancelled: stopping its job",
                                job.function_call_id, job.invocation_id)
                    on_cancel()
