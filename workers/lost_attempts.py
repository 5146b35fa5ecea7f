"""A lost job attempt's task in Celery's result backend: the ``PROGRESS`` it left says it ended.

A tool that reports progress puts its task in the state ``PROGRESS`` in Celery's result
backend, and the task's end removes it (:class:`workers.progress.BackendProgress`). A worker
killed mid-tool never ends its task: that state, with the tool's last payload, would stay
until the backend expires it (``result_expires``, an hour), and Flower's
``/api/task/result``, ``AsyncResult(task_id).state`` or anything else reading that task id
would see a running task that is long dead. So when the job watchdog takes an attempt's
worker for dead, before it sends the call again or answers it, :class:`LostAttempts`
replaces that state by ``FAILURE`` with a ``WorkerLostError`` saying what became of the call
(sent again as attempt n, under which task id; or answered with an error). The same holds
for an attempt that was running when its call was answered by its timeout, once its worker
is seen dead (at the deadline, or later: a worker that died just before it still looked
alive then). That is what
Celery itself records for a task whose worker process died, so an operator reads it as one.

The replacement is one script, and replaces only a ``PROGRESS`` state: an attempt that never
reported has no state and gets none, a settled or finished one is left as it is. Run again
(a watchdog that died before sending the call again looks at it again; two watchdogs at
once), it changes nothing.

Flower's task list and task page are made of task events, not of the result backend: there
the dead attempt would stay ``STARTED`` or ``PROGRESS`` (the last event its worker sent) for
as long as Flower runs. :class:`LostAttemptEvents` sends the ``task-failed`` event its worker
never sent, with the same ``WorkerLostError``, so Flower shows the attempt as ``FAILURE`` and
why. Best effort: the event is for the operator's eyes, the call goes on whether it is sent
or not, and one sent twice (a watchdog that looks again) says the same thing twice.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from celery import Celery, states
from celery.backends.base import BaseKeyValueStoreBackend
from celery.exceptions import WorkerLostError
from kombu.utils.encoding import bytes_to_str, safe_repr

from orchestrator.backends.redis.lua import LuaScript, Operands, key_field
from orchestrator.distributed.models import AgentJob, ToolJob
from workers.progress import PROGRESS_STATE
from workers.task_events import TaskEvents
from workers.transport import job_task_id

logger = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class SettleProgress(Operands):
    """Operands of :data:`SETTLE`: one task's state in the result backend, and its end."""

    meta: str = key_field()
    """The task's key in the result backend (``celery-task-meta-<task id>``)."""
    progress: str
    """The state replaced (:data:`~workers.progress.PROGRESS_STATE`)."""
    failure: str
    """The ``FAILURE`` meta stored instead, encoded as the backend stores a task's meta."""
    ttl: int
    """Seconds it is kept (the backend's ``result_expires``; 0: for ever)."""


SETTLE = LuaScript(SettleProgress, """
local current = redis.call('GET', meta)
if not current then return 0 end
local ok, stored = pcall(cjson.decode, current)
if not ok or type(stored) ~= 'table' or stored['status'] ~= progress then return 0 end
if tonumber(ttl) > 0 then
  redis.call('SET', meta, failure, 'EX', ttl)
else
  redis.call('SET', meta, failure)
end
-- As Celery's Redis backend does when it stores a state: a client waiting on the task wakes.
redis.call('PUBLISH', meta, failure)
return 1
""")
"""Replace a task's ``PROGRESS`` state by ``failure``: 1, or 0 (nothing written) if the task
has no state or another one."""


class LostAttempts:
    """Settles the result-backend state of job attempts whose worker died (see the module doc).

    ``backend``: the Celery app's result backend, whose key names and encoding are used; it
    must keep its states in the Redis ``redis`` talks to (the project's: one Redis URL).
    Another kind of backend (none configured) has nothing to settle.
    """

    def __init__(self, redis: aioredis.Redis, backend: Any) -> None:
        self._settle = SETTLE.register(redis)
        self._backend = backend if isinstance(backend, BaseKeyValueStoreBackend) else None

    async def settle(self, job: ToolJob | AgentJob, attempt: int, what: str) -> bool:
        """If ``attempt`` of ``job`` left its task in ``PROGRESS``, end it as ``FAILURE``.

        ``what``: the reason the task's ``WorkerLostError`` gives. True if a state was
        replaced. Redis errors are raised (the caller retries on its next look).
        """
        return await self.settle_call(job.invocation_id, job.function_call_id, attempt, what)

    async def settle_call(self, invocation_id: str, call_id: str, attempt: int, what: str) -> bool:
        """:meth:`settle` for the call ``call_id`` of ``invocation_id`` (its job may be gone)."""
        backend = self._backend
        if backend is None:
            return False
        task_id = job_task_id(invocation_id, call_id, attempt)
        meta = {  # what Celery's backend stores for a failed task (result_extended is off)
            "status": states.FAILURE, "result": backend.prepare_exception(WorkerLostError(what)),
            "traceback": None, "children": [], "date_done": backend.app.now().isoformat(),
            "task_id": task_id,
        }
        return bool(await self._settle(SettleProgress(
            meta=bytes_to_str(backend.get_key_for_task(task_id)), progress=PROGRESS_STATE,
            failure=backend.encode(meta), ttl=int(backend.expires or 0))))


class LostAttemptEvents:
    """Sends the ``task-failed`` event of a dead attempt's task, for Flower (see the module doc).

    ``hostname``: the node name the events are sent under (this orchestrator's Celery node
    name): Flower lists the task under it, the process that saw the attempt's end.
    """

    def __init__(self, app: Celery, hostname: str | None) -> None:
        self._events = TaskEvents(app, hostname)

    def send(self, task_id: str, reason: str) -> None:
        """Send ``task-failed`` for ``task_id`` with a ``WorkerLostError(reason)``.

        Blocks (a broker publish): call it off the event loop. Never raises: a failure is
        logged (:class:`~workers.task_events.TaskEvents`).
        """
        self._events.send("task-failed", uuid=task_id,
                          exception=safe_repr(WorkerLostError(reason)), traceback=None)

    def close(self) -> None:
        """Release the dispatcher's broker connection."""
        self._events.close()
