"""RedisInvocationStore: invocation records, call results and cancel flags in Redis.

Its scripts are in :mod:`.invocation_scripts`; the per-session queues and leases in
:mod:`.session_queue`.
"""

from __future__ import annotations

import json
import time
from typing import Any

import redis.asyncio as aioredis

from orchestrator.backends.redis import keys
from orchestrator.backends.redis.invocation_lists import list_invocations
from orchestrator.backends.redis.invocation_scripts import (
    CREATE_RECORD,
    PUT_PENDING,
    PUT_RESULT,
    SAVE_RECORD,
    put_pending_operands,
    put_result_operands,
    save_record_operands,
)
from orchestrator.backends.redis.jobs import CLAIM, ClaimJob, watch_member
from orchestrator.backends.redis.progress import latest_progress
from orchestrator.distributed.invocation_lists import InvocationPage, InvocationQuery
from orchestrator.distributed.models import (
    InvocationRecord,
    InvocationStatus,
    PendingCall,
    ToolResult,
)
from orchestrator.distributed.stores import Loaded

READ_RECORD = object()
"""What :meth:`StatusWait.feed` returns for a status entry without its record: read it."""


class StatusWait:
    """Waiting for an invocation to reach a status, without the I/O (asyncio or sync callers).

    Queue :meth:`queue_start` on a transaction and hand its replies to :meth:`started`; then,
    while nothing was found and :meth:`block_ms` is not None (the timeout), ``XREAD`` the
    :attr:`stream` after :attr:`last_id`, blocking that long, and hand the reply to
    :meth:`feed`. A found record is returned; :data:`READ_RECORD` asks for a plain read.

    A caller that must not return a pause that is already over (its calls all answered, its
    resume queued) asks :meth:`is_pause` of a found record, queues :meth:`queue_answers`,
    and hands the replies to :meth:`pause_still_on`; when it is False, it goes on reading.
    """

    def __init__(self, app_name: str, invocation_id: str, statuses: set[InvocationStatus],
                 timeout: float | None, *, after: str | None = None) -> None:
        self.stream = keys.invocation_statuses(app_name, invocation_id)
        self.record_key = keys.invocation(app_name, invocation_id)
        self.last_id = "0-0"
        self._after = after
        """A status entry id the caller has already seen: only later statuses count."""
        self.missing = False
        """After :meth:`started`: True if the invocation had no record (unknown, or not yet
        recorded, as one whose ``adk_celery.invoke`` task no orchestrator has taken)."""
        self._statuses = statuses
        self._wanted = {status.value for status in statuses}
        self._deadline = None if timeout is None else time.monotonic() + timeout

    def queue_start(self, pipe: Any) -> None:
        """The record as it is now, and the stream's newest entry id."""
        pipe.hget(self.record_key, "record")
        pipe.xrevrange(self.stream, count=1)

    def started(self, replies: list[Any]) -> InvocationRecord | None:
        """The record if it is already in a wanted status; else follow from the newest entry.

        With ``after``, the statuses after that entry are followed (the pause an answer
        sent after it ends is not returned, even while the pause waits for other calls: the
        answer brings a status of its own), but a finished record is returned at once:
        nothing comes after it.
        """
        raw, latest = replies
        self.missing = not raw
        record = InvocationRecord.model_validate_json(raw) if raw else None
        if self._after is not None:
            self.last_id = self._after  # what came since: the current status was seen
            if record is not None and record.status in self._statuses and record.status.is_finished:
                return record
            return None
        self.last_id = latest[0][0] if latest else "0-0"
        if record is not None and record.status in self._statuses:
            return record
        return None

    def block_ms(self) -> int | None:
        """How long the next read may block (at most a second); None once timed out."""
        if self._deadline is None:
            return 1000
        remaining = self._deadline - time.monotonic()
        if not remaining > 0:  # NaN too
            return None
        return max(1, int(min(remaining, 1.0) * 1000))  # an infinite remainder blocks a second

    def feed(self, reply: Any) -> InvocationRecord | object | None:
        """The record of the first wanted status entry of an ``XREAD`` reply, if any.

        A ``paused`` entry that another status entry follows in the same reply is passed
        over: that pause is over already.
        """
        entries = [entry for _, found in reply or [] for entry in found]
        for at, (entry_id, fields) in enumerate(entries):
            self.last_id = entry_id
            if fields.get("kind") != "status" or fields.get("status") not in self._wanted:
                continue
            if fields.get("status") == InvocationStatus.PAUSED.value and any(
                    later.get("kind") == "status" for _, later in entries[at + 1:]):
                continue
            saved = fields.get("record")
            return InvocationRecord.model_validate_json(saved) if saved else READ_RECORD
        return None

    @staticmethod
    def is_pause(record: InvocationRecord) -> bool:
        """True for a paused record with calls: see :meth:`pause_still_on` before returning it."""
        return record.status is InvocationStatus.PAUSED and bool(record.pending_calls)

    @staticmethod
    def queue_answers(pipe: Any, record: InvocationRecord) -> None:
        """The stored results of the calls the paused ``record`` waits for."""
        pipe.hmget(keys.invocation_results(record.app_name, record.invocation_id),
                   record.pending_calls)

    @staticmethod
    def pause_still_on(replies: list[Any]) -> bool:
        """False if every call of the pause has its answer stored: its resume is queued.

        From anyone: this client, another one, the CLI, the HTTP API or a worker. A call
        left to an outside answer (a pending placeholder) is not answered.
        """
        [results] = replies
        return not all(raw is not None and ToolResult.model_validate_json(raw).answered
                       for raw in results)


async def pause_over(client: aioredis.Redis, app_name: str, invocation_id: str) -> bool:
    """True if the invocation is no longer paused, or its pause has every answer stored.

    For a follow that read a ``paused`` entry as its stream's latest: a pause whose calls all
    have their answers (its resume queued) is over, and a follow that stopped at it would
    show the pause an answer just ended (as ``Client.wait``, see
    :meth:`StatusWait.pause_still_on`). False for an invocation that has no record (gone).
    Two reads: the record, then the answers of the calls it waits for.
    """
    raw = await client.hget(keys.invocation(app_name, invocation_id), "record")
    record = InvocationRecord.model_validate_json(raw) if raw else None
    if record is None or not StatusWait.is_pause(record):
        # Gone, or saved in another status: its entry follows the pause already.
        return record is not None and record.status is not InvocationStatus.PAUSED
    async with client.pipeline(transaction=False) as pipe:
        StatusWait.queue_answers(pipe, record)
        return not StatusWait.pause_still_on(await pipe.execute())


def loaded_from(raw: str | None, cancelled: int, results: dict[str, str]) -> Loaded:
    """The record JSON, cancel flag and results hash of an invocation, parsed (no session)."""
    return Loaded(
        InvocationRecord.model_validate_json(raw) if raw else None, bool(cancelled),
        {cid: ToolResult.model_validate_json(value) for cid, value in results.items()},
    )


def queue_waits_for_outside(pipe: Any, record: InvocationRecord) -> None:
    """Add the reads of :meth:`RedisInvocationStore.waits_for_outside` to ``pipe``.

    For a caller that batches them with others (``record`` has pending calls);
    :func:`waits_for_outside_in` reads the replies.
    """
    ids = record.pending_calls
    pipe.hmget(keys.invocation_jobs(record.app_name, record.invocation_id), [f"a:{cid}" for cid in ids])
    pipe.hmget(keys.invocation_results(record.app_name, record.invocation_id), ids)


def waits_for_outside_in(replies: list[Any]) -> bool:
    """The answer of :meth:`RedisInvocationStore.waits_for_outside` from its replies."""
    attempts, results = replies
    for attempt, raw in zip(attempts, results, strict=True):
        if raw is None:
            if attempt is None:
                return True
        elif not ToolResult.model_validate_json(raw).answered:
            return True
    return False


class RedisInvocationStore:
    """Invocation records, call results and cancel flags in Redis."""

    def __init__(
        self, client: aioredis.Redis, *, record_ttl_seconds: int = 7 * 24 * 3600,
        job_watch_key: str = keys.job_watch("adk.invocations"),
    ) -> None:
        self._redis = client
        self._ttl = record_ttl_seconds
        self.job_watch_key = job_watch_key
        """The watch index of this deployment's jobs (see :mod:`.jobs`)."""
        self._put_result = PUT_RESULT.register(client)
        self._put_pending = PUT_PENDING.register(client)
        self._claim = CLAIM.register(client)
        self._create = CREATE_RECORD.register(client)
        self._save = SAVE_RECORD.register(client)

    async def create(self, record: InvocationRecord) -> bool:
        """Store a new record unless one exists."""
        created = await self._create(save_record_operands(record, self._ttl))
        return bool(created)

    async def get(self, app_name: str, invocation_id: str) -> InvocationRecord | None:
        """The record, or None."""
        raw = await self._redis.hget(keys.invocation(app_name, invocation_id), "record")
        return InvocationRecord.model_validate_json(raw) if raw else None

    async def load(self, app_name: str, invocation_id: str) -> Loaded:
        """The record, the cancel flag and the results in one round trip."""
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.hget(keys.invocation(app_name, invocation_id), "record")
            pipe.exists(keys.cancel_flag(app_name, invocation_id))
            pipe.hgetall(keys.invocation_results(app_name, invocation_id))
            return loaded_from(*await pipe.execute())

    async def claim_job(
        self, app_name: str, invocation_id: str, function_call_id: str, *, attempt: int,
        worker: str, branch: bool, lost_after: float, digest: str,
    ) -> str:
        """Before a worker runs a job: 'run' (now marked running on ``worker``), or why not.

        ``digest``: :func:`~orchestrator.backends.redis.jobs.job_digest` of the job as the
        worker received it. 'forged' (no such job was published: another call, attempt or
        content), 'superseded' (a later attempt of the call was dispatched), 'cancelled',
        'answered' (a result is in), 'waiting' (the tool ran and the call waits for an
        outside answer) or 'running' (this attempt runs elsewhere, alive): see
        :data:`~orchestrator.backends.redis.jobs.CLAIM`.
        """
        verdict = await self._claim(ClaimJob(
            cancel=keys.cancel_flag(app_name, invocation_id),
            results=keys.invocation_results(app_name, invocation_id),
            jobs=keys.invocation_jobs(app_name, invocation_id), watch=self.job_watch_key,
            call_id=function_call_id, attempt=attempt, worker=worker,
            branch="1" if branch else "", member=watch_member(app_name, invocation_id, function_call_id),
            lost_after=lost_after, digest=digest))
        return str(verdict)

    async def pending_details(self, record: InvocationRecord) -> list[PendingCall]:
        """Where each call the invocation waits for stands (one round trip).

        Queued, running (on which worker, last seen when), retrying (a later attempt),
        waiting for an answer from outside, or answered (its answer is in, the invocation
        waits for its other calls).
        """
        ids = record.pending_calls
        if not ids:
            return []
        jobs = keys.invocation_jobs(record.app_name, record.invocation_id)
        async with self._redis.pipeline(transaction=False) as pipe:
            for cid in ids:
                pipe.hmget(jobs, f"a:{cid}", f"r:{cid}", f"p:{cid}")
            pipe.hmget(keys.invocation_results(record.app_name, record.invocation_id), ids)
            *journal, results = await pipe.execute()
        found = []
        for cid, (attempt, run_raw, progress_raw), result in zip(ids, journal, results, strict=True):
            call = PendingCall(function_call_id=cid, name=record.pending_tools.get(cid, ""),
                               where="waiting for an answer")
            if (latest := latest_progress(progress_raw, attempt)) is not None:
                call.progress, call.progress_at = latest.get("progress"), latest.get("at")
            if result is not None and ToolResult.model_validate_json(result).answered:
                call.where = "answered"
            elif attempt is not None and result is None:  # a job is out, and not back yet
                run = json.loads(run_raw) if run_raw else {}
                call.attempt = int(attempt)
                if run.get("state") == "running":
                    call.where, call.worker, call.last_seen = "running", run.get("worker"), run.get("beat")
                else:
                    call.where = "retrying" if call.attempt > 1 else "queued"
            found.append(call)
        return found

    async def waits_for_outside(self, record: InvocationRecord) -> bool:
        """True if a call the paused ``record`` waits for must be answered from outside.

        That is a call with no job out and no answer stored, or whose tool ran on a worker
        and left it unanswered (its pending placeholder). A call whose job is out, or whose
        answer is stored (its resume is on its way), does not count. One round trip.
        """
        if not record.pending_calls:
            return False
        async with self._redis.pipeline(transaction=False) as pipe:
            queue_waits_for_outside(pipe, record)
            return waits_for_outside_in(await pipe.execute())

    async def save(self, record: InvocationRecord) -> None:
        """Overwrite the record and publish its status on the invocation's stream."""
        await self._save(save_record_operands(record, self._ttl))

    async def list_invocations(self, query: InvocationQuery) -> InvocationPage:
        """A page of a session's invocations (newest first) or of an app's (latest saved first)."""
        return await list_invocations(self._redis, query)

    async def put_result(self, app_name: str, invocation_id: str, result: ToolResult) -> bool:
        """First final result wins, and so does a paused branch's turn (see :mod:`.lua_functions`).

        A pending placeholder (the tool left its call to an answer from outside) also puts a
        ``waiting`` entry on the invocation's live and status streams, in the same script
        (:data:`~.invocation_scripts.PUT_PENDING`): a follower paused on that call learns
        at once that the pause waits for outside, without looking again and again.
        """
        if result.answered:
            stored = await self._put_result(put_result_operands(
                app_name, invocation_id, result, watch=self.job_watch_key, ttl=self._ttl))
        else:
            stored = await self._put_pending(put_pending_operands(
                app_name, invocation_id, result, watch=self.job_watch_key, ttl=self._ttl))
        return bool(stored)

    async def results(self, app_name: str, invocation_id: str) -> dict[str, ToolResult]:
        """Every stored result by call id."""
        raw = await self._redis.hgetall(keys.invocation_results(app_name, invocation_id))
        return {cid: ToolResult.model_validate_json(value) for cid, value in raw.items()}

    async def request_cancel(self, app_name: str, invocation_id: str) -> None:
        """Set the cancel flag."""
        await self._redis.set(keys.cancel_flag(app_name, invocation_id), "1", ex=self._ttl)

    async def is_cancelled(self, app_name: str, invocation_id: str) -> bool:
        """True once the flag is set."""
        return bool(await self._redis.exists(keys.cancel_flag(app_name, invocation_id)))

    async def wait_for(
        self,
        app_name: str,
        invocation_id: str,
        statuses: set[InvocationStatus],
        *,
        timeout: float | None = None,
    ) -> InvocationRecord | None:
        """Block until the record reaches one of ``statuses`` (None on timeout).

        Reads the record once, then follows the status entries of the invocation's stream,
        which carry the record as saved (no read per change). See :class:`StatusWait`.
        """
        wait = StatusWait(app_name, invocation_id, statuses, timeout)
        async with self._redis.pipeline(transaction=True) as pipe:
            wait.queue_start(pipe)
            found = wait.started(await pipe.execute())
        while found is None and (block_ms := wait.block_ms()) is not None:
            found = wait.feed(await self._redis.xread({wait.stream: wait.last_id}, block=block_ms))
        if found is READ_RECORD:
            return await self.get(app_name, invocation_id)
        return found if isinstance(found, InvocationRecord) else None
