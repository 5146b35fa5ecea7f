"""Redis-backed invocation store and per-session queue (distributed mode).

Leases carry strictly increasing fencing tokens; while an orchestrator works on a session,
every append checks that it still holds the lease with its token, so a holder that lost
the lease (it stalled past the TTL and another took over) cannot write.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import NoScriptError

from orchestrator import redis_keys as keys
from orchestrator.distributed.models import InvocationRecord, InvocationStatus, ToolResult, WorkItem
from orchestrator.distributed.stores import Loaded, SessionKey, Taken
from orchestrator.distributed.streams import STREAM_MAXLEN
from orchestrator.distributed.wakeups import RedisWakeups
from orchestrator.sessions.redis_scopes import fenced
from orchestrator.sessions.redis_session_service import queue_session_reads, session_from_replies

# KEYS: results hash. ARGV: call id, result JSON, ttl seconds.
# An existing final result wins (0, nothing written); a pending placeholder may be replaced.
_PUT_RESULT = """
local existing = redis.call('HGET', KEYS[1], ARGV[1])
if existing then
  local decoded = cjson.decode(existing)
  if decoded['response'] ~= nil and decoded['response'] ~= cjson.null then return 0 end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('EXPIRE', KEYS[1], ARGV[3])
"""


# KEYS: record hash, stream. ARGV: record JSON, status, ttl seconds, stream maxlen.
# Stores a new record and publishes its status; 0 (and nothing written) if one exists.
_CREATE = """
if redis.call('HSETNX', KEYS[1], 'record', ARGV[1]) == 0 then return 0 end
redis.call('EXPIRE', KEYS[1], ARGV[3])
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[4], '*',
  'kind', 'status', 'status', ARGV[2], 'record', ARGV[1])
redis.call('EXPIRE', KEYS[2], ARGV[3])
"""

# Push a work item and post its wake-up, after a step that decided to (see below): KEYS
# from index push_keys: session queue, wake stream; ARGV from push_args: item JSON, then the
# wake-up's app, user, session, invocation ('' app: no wake-up).
_PUSH = """
redis.call('RPUSH', KEYS[push_keys], ARGV[push_args])
if ARGV[push_args + 1] ~= '' then
  redis.call('XADD', KEYS[push_keys + 1], '*', 'app', ARGV[push_args + 1],
    'user', ARGV[push_args + 2], 'session', ARGV[push_args + 3], 'inv', ARGV[push_args + 4])
end
return 1
"""

# _CREATE, then (if created) _PUSH: KEYS 3-4 and ARGV 5-9 as _PUSH's.
_CREATE_AND_PUSH = _CREATE + "local push_keys, push_args = 3, 5\n" + _PUSH

# _PUT_RESULT, then (if stored) _PUSH: KEYS 2-3 and ARGV 4-8 as _PUSH's.
_PUT_RESULT_AND_PUSH = _PUT_RESULT + "local push_keys, push_args = 2, 4\n" + _PUSH

# KEYS: lease, fence counter, processing, queue. ARGV: ttl ms. Returns the new token or
# false. A previous holder's in-progress items go back to the head of the queue.
_ACQUIRE = """
if redis.call('EXISTS', KEYS[1]) == 1 then return false end
local token = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], token, 'PX', ARGV[1])
while redis.call('LMOVE', KEYS[3], KEYS[4], 'RIGHT', 'LEFT') do end
return token
"""

# KEYS: lease, fence counter, processing, queue. ARGV: ttl ms. Returns false (lease busy),
# {token} (acquired, nothing queued: released again) or {token, first item}.
_TAKE = """
if redis.call('EXISTS', KEYS[1]) == 1 then return false end
while redis.call('LMOVE', KEYS[3], KEYS[4], 'RIGHT', 'LEFT') do end
local token = redis.call('INCR', KEYS[2])
local item = redis.call('LMOVE', KEYS[4], KEYS[3], 'LEFT', 'RIGHT')
if not item then return {token} end
redis.call('SET', KEYS[1], token, 'PX', ARGV[1])
return {token, item}
"""

# KEYS: lease. ARGV: token, ttl ms.
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""

# KEYS: processing, queue, lease, record hash, record stream. ARGV: finished item JSON or '',
# token, record JSON or '' (nothing to save), status, ttl seconds, stream maxlen. Saves the
# record (as RedisInvocationStore.save does), then returns the next item, or releases the
# lease (if still ours) when the queue is empty and returns false.
_CLAIM_OR_RELEASE = """
if ARGV[3] ~= '' then
  redis.call('HSET', KEYS[4], 'record', ARGV[3])
  redis.call('EXPIRE', KEYS[4], ARGV[5])
  redis.call('XADD', KEYS[5], 'MAXLEN', '~', ARGV[6], '*',
    'kind', 'status', 'status', ARGV[4], 'record', ARGV[3])
  redis.call('EXPIRE', KEYS[5], ARGV[5])
end
if ARGV[1] ~= '' then redis.call('LREM', KEYS[1], 1, ARGV[1]) end
local item = redis.call('LMOVE', KEYS[2], KEYS[1], 'LEFT', 'RIGHT')
if item then return item end
if redis.call('GET', KEYS[3]) == ARGV[2] then redis.call('DEL', KEYS[3]) end
return false
"""

# KEYS: lease, queue. ARGV: token. Returns the number of queued items.
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return redis.call('LLEN', KEYS[2])
"""

_STATUS_STREAM_MAXLEN = STREAM_MAXLEN
"""Status entries share the stream with live events: trim it to the same length."""


def _queue_load(pipe: Any, app_name: str, invocation_id: str) -> None:
    """Add the reads of :meth:`RedisInvocationStore.load` to a pipeline (3 replies)."""
    pipe.hget(keys.invocation(app_name, invocation_id), "record")
    pipe.exists(keys.cancel_flag(app_name, invocation_id))
    pipe.hgetall(keys.invocation_results(app_name, invocation_id))


def _loaded(raw: str | None, cancelled: int, results: dict[str, str]) -> Loaded:
    return Loaded(
        InvocationRecord.model_validate_json(raw) if raw else None, bool(cancelled),
        {cid: ToolResult.model_validate_json(value) for cid, value in results.items()},
    )


class RedisInvocationStore:
    """Invocation records, call results and cancel flags in Redis."""

    def __init__(self, client: aioredis.Redis, *, record_ttl_seconds: int = 7 * 24 * 3600) -> None:
        self._redis = client
        self._ttl = record_ttl_seconds
        self._put_result = client.register_script(_PUT_RESULT + "return 1")
        self._create = client.register_script(_CREATE + "return 1")

    async def create(self, record: InvocationRecord) -> bool:
        """Store a new record unless one exists."""
        key = keys.invocation(record.app_name, record.invocation_id)
        created = await self._create(
            keys=[key, keys.invocation_stream(record.app_name, record.invocation_id)],
            args=[record.model_dump_json(), record.status.value, self._ttl, _STATUS_STREAM_MAXLEN],
        )
        return bool(created)

    async def get(self, app_name: str, invocation_id: str) -> InvocationRecord | None:
        """The record, or None."""
        raw = await self._redis.hget(keys.invocation(app_name, invocation_id), "record")
        return InvocationRecord.model_validate_json(raw) if raw else None

    async def load(self, app_name: str, invocation_id: str) -> Loaded:
        """The record, the cancel flag and the results in one round trip."""
        async with self._redis.pipeline(transaction=False) as pipe:
            _queue_load(pipe, app_name, invocation_id)
            return _loaded(*await pipe.execute())

    async def job_state(
        self, app_name: str, invocation_id: str, function_call_id: str
    ) -> tuple[bool, ToolResult | None]:
        """Whether the invocation was cancelled, and the call's stored result: one round trip."""
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.exists(keys.cancel_flag(app_name, invocation_id))
            pipe.hget(keys.invocation_results(app_name, invocation_id), function_call_id)
            cancelled, raw = await pipe.execute()
        return bool(cancelled), ToolResult.model_validate_json(raw) if raw else None

    async def save(self, record: InvocationRecord) -> None:
        """Overwrite the record and publish its status on the invocation's stream."""
        key = keys.invocation(record.app_name, record.invocation_id)
        raw = record.model_dump_json()
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hset(key, "record", raw)
            pipe.expire(key, self._ttl)
            self._queue_publish(pipe, record, raw)
            await pipe.execute()

    def _queue_publish(self, pipe: Any, record: InvocationRecord, raw: str) -> None:
        stream = keys.invocation_stream(record.app_name, record.invocation_id)
        pipe.xadd(
            stream,
            {"kind": "status", "status": record.status.value, "record": raw},
            maxlen=_STATUS_STREAM_MAXLEN,
            approximate=True,
        )
        pipe.expire(stream, self._ttl)

    async def put_result(self, app_name: str, invocation_id: str, result: ToolResult) -> bool:
        """First final result wins (a pending placeholder can be replaced)."""
        stored = await self._put_result(
            keys=[keys.invocation_results(app_name, invocation_id)],
            args=[result.function_call_id, result.model_dump_json(), self._ttl],
        )
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
        which carry the record as saved (no read per change).
        """
        stream = keys.invocation_stream(app_name, invocation_id)
        deadline = None if timeout is None else time.monotonic() + timeout
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hget(keys.invocation(app_name, invocation_id), "record")
            pipe.xrevrange(stream, count=1)
            raw, latest = await pipe.execute()
        record = InvocationRecord.model_validate_json(raw) if raw else None
        if record is not None and record.status in statuses:
            return record
        last_id = latest[0][0] if latest else "0-0"
        wanted = {status.value for status in statuses}
        while True:
            block_ms = 1000
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                block_ms = max(1, min(block_ms, int(remaining * 1000)))
            reply = await self._redis.xread({stream: last_id}, block=block_ms)
            for _, entries in reply or []:
                for entry_id, fields in entries:
                    last_id = entry_id
                    if fields.get("kind") == "status" and fields.get("status") in wanted:
                        saved = fields.get("record")
                        if saved:
                            return InvocationRecord.model_validate_json(saved)
                        return await self.get(app_name, invocation_id)


class RedisSessionQueue:
    """Per-session work queues (reliable: claimed items sit in a processing list) and leases."""

    def __init__(
        self,
        client: aioredis.Redis,
        *,
        lease_ttl_seconds: float = 30.0,
        wakeups: RedisWakeups | None = None,
        record_ttl_seconds: int = 7 * 24 * 3600,
    ) -> None:
        self._redis = client
        self._ttl_ms = int(lease_ttl_seconds * 1000)
        self._record_ttl = record_ttl_seconds
        """TTL of the records :meth:`claim_or_release` saves (as the store's)."""
        self._wakeups = wakeups
        """Where each push announces itself to orchestrators (None: the caller drains)."""
        self._acquire = client.register_script(_ACQUIRE)
        self._take = client.register_script(_TAKE)
        self._put_result_and_push = client.register_script(_PUT_RESULT_AND_PUSH)
        self._create_and_push = client.register_script(_CREATE_AND_PUSH)
        self._renew = client.register_script(_RENEW)
        self._release = client.register_script(_RELEASE)
        self._claim_or_release = client.register_script(_CLAIM_OR_RELEASE)

    async def push(self, key: SessionKey, item: WorkItem, result: ToolResult | None = None) -> bool:
        """Append an item, and post a wake-up for it in the same round trip.

        With ``result`` (a call's result, stored as :meth:`RedisInvocationStore.put_result`
        does), one script stores it and pushes only if it was stored.
        """
        if result is not None:
            push_keys, push_args = self._push_operands(key, item)
            return bool(await self._put_result_and_push(
                keys=[keys.invocation_results(key[0], item.invocation_id), *push_keys],
                args=[result.function_call_id, result.model_dump_json(), self._record_ttl,
                      *push_args],
            ))
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.rpush(keys.session_queue(*key), item.model_dump_json())
            if self._wakeups is not None:
                self._wakeups.queue_post(pipe, key, item.invocation_id)
            await pipe.execute()
        return True

    def queue_create_and_push(self, pipe: Any, record: InvocationRecord, item: WorkItem) -> None:
        """Add to a pipeline: store ``record`` unless it exists and, if stored, push ``item``.

        Its reply is 1 if the record was new (the item is queued), else 0. The script is
        called by its sha: call :meth:`load_scripts` after Redis forgot it.
        """
        key = (record.app_name, record.user_id, record.session_id)
        push_keys, push_args = self._push_operands(key, item)
        pipe.evalsha(
            self._create_and_push.sha, 4,
            keys.invocation(record.app_name, record.invocation_id),
            keys.invocation_stream(record.app_name, record.invocation_id), *push_keys,
            record.model_dump_json(), record.status.value, self._record_ttl,
            _STATUS_STREAM_MAXLEN, *push_args,
        )

    async def load_scripts(self) -> None:
        """Load the scripts that pipelines call by sha (after a Redis restart, for instance)."""
        for script in (self._take, self._create_and_push):
            await self._redis.script_load(script.script)

    def _push_operands(self, key: SessionKey, item: WorkItem) -> tuple[list[str], list[Any]]:
        """KEYS and ARGV of the _PUSH fragment for ``item`` on ``key``'s queue."""
        queue = keys.session_queue(*key)
        if self._wakeups is None:
            return [queue, queue], [item.model_dump_json(), "", "", "", ""]
        return ([queue, self._wakeups.stream_key],
                [item.model_dump_json(), *key, item.invocation_id])

    async def take(self, key: SessionKey, hint: str | None = None) -> Taken | None:
        """Acquire the lease and claim the first item in one round trip (see SessionQueue).

        With ``hint`` (the invocation the wake-up announced) that invocation and its session
        are read in the same transaction, right after the claim, and returned if the item is
        one of the hinted invocation's.
        """
        try:
            replies = await self._take_and_read(key, hint)
        except NoScriptError:  # Redis restarted or flushed its scripts: nothing ran
            await self.load_scripts()
            replies = await self._take_and_read(key, hint)
        reply = replies[0]
        if not reply:
            return None
        token = str(reply[0])
        if len(reply) < 2:
            return Taken(token, None, None)
        item = WorkItem.model_validate_json(reply[1])
        if not hint or item.invocation_id != hint:
            return Taken(token, item, None)
        loaded = _loaded(*replies[1:4])
        session = session_from_replies(*key, replies[4:])
        return Taken(token, item, loaded._replace(session=session))

    async def _take_and_read(self, key: SessionKey, hint: str | None) -> list[Any]:
        # EVALSHA by hand: a Script object in a pipeline costs a SCRIPT EXISTS round trip.
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.evalsha(self._take.sha, 4, keys.session_lease(*key), keys.fence_counter(*key),
                         keys.session_processing(*key), keys.session_queue(*key), self._ttl_ms)
            if hint:
                _queue_load(pipe, key[0], hint)
                queue_session_reads(pipe, *key)
            return list(await pipe.execute())

    async def acquire(self, key: SessionKey) -> str | None:
        """Take the lease (recovering a dead holder's leftovers); the fencing token or None."""
        token = await self._acquire(
            keys=[keys.session_lease(*key), keys.fence_counter(*key),
                  keys.session_processing(*key), keys.session_queue(*key)],
            args=[self._ttl_ms],
        )
        return str(token) if token else None

    async def renew(self, key: SessionKey, token: str) -> bool:
        """Extend the lease if still held."""
        return bool(await self._renew(keys=[keys.session_lease(*key)], args=[token, self._ttl_ms]))

    async def release(self, key: SessionKey, token: str) -> int:
        """Free the lease if still held with ``token``; return the items still queued."""
        return int(await self._release(
            keys=[keys.session_lease(*key), keys.session_queue(*key)], args=[token]
        ))

    async def claim_or_release(
        self,
        key: SessionKey,
        token: str,
        finished: WorkItem | None = None,
        save: InvocationRecord | None = None,
    ) -> WorkItem | None:
        """Save ``save``, then the next item, or (atomically) release the lease: one script."""
        processing = keys.session_processing(*key)
        record_keys = [processing, processing]
        record_args: list[Any] = ["", "", 0, 0]
        if save is not None:
            record_keys = [keys.invocation(save.app_name, save.invocation_id),
                           keys.invocation_stream(save.app_name, save.invocation_id)]
            record_args = [save.model_dump_json(), save.status.value, self._record_ttl,
                           _STATUS_STREAM_MAXLEN]
        raw = await self._claim_or_release(
            keys=[processing, keys.session_queue(*key), keys.session_lease(*key), *record_keys],
            args=[finished.model_dump_json() if finished is not None else "", token, *record_args],
        )
        return WorkItem.model_validate_json(raw) if raw else None

    @contextlib.contextmanager
    def fencing(self, key: SessionKey, token: str) -> Iterator[None]:
        """Session appends inside this block require the lease to be held with ``token``."""
        with fenced(keys.session_lease(*key), token):
            yield
