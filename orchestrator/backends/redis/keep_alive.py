"""Unfinished invocations outlive the record TTL: their keys are kept while they wait.

Every key of an invocation expires ``record_ttl_seconds`` after its last write, which is what
clears finished invocations away. An invocation that has not finished may go unwritten for
longer than that: a pause waiting for a person (an approval, a ticket), or for a job with no
deadline; a new message held behind such a pause (its session's messages wait while an
invocation is paused on calls only its workers answer), which stays queued all that time.
It would then vanish, its answer be refused as for an unknown invocation, or its held
message be dropped when it comes out. So an orchestrator looks, every so often, at the
invocations queued, running or paused for more than half the TTL (the indexes of unfinished
ones, ``keys.invocations_in``, are scored by when each was saved in its status) and renews
their keys (:data:`KEEP_UNFINISHED`): the record and its streams, results, jobs and cancel
flag, their entries in the lists of invocations, their place in the index (re-scored as if
saved now), and the session's mark that the invocation is busy, which holds the session's
next messages. An invocation whose session was deleted is not kept: it can never go on.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis

from orchestrator.backends.redis import keys
from orchestrator.backends.redis.codec import text
from orchestrator.backends.redis.lua import LuaScript, Operands, key_field
from orchestrator.distributed.models import InvocationStatus

logger = logging.getLogger(__name__)

KEEP_BATCH = 200
"""Invocations of one status renewed per pass at most (the rest are due at the next pass)."""

_UNFINISHED = [status.value for status in InvocationStatus if status in InvocationStatus.LIVE]


@dataclass(frozen=True, kw_only=True)
class KeepUnfinished(Operands):
    """Operands of :data:`KEEP_UNFINISHED`: one unfinished invocation's keys, renewed for ``ttl``."""

    index: str = key_field()
    """The index of invocations in ``status`` (``keys.invocations_in``)."""
    record_key: str = key_field()
    stream: str = key_field()
    statuses: str = key_field()
    results: str = key_field()
    jobs: str = key_field()
    cancel_flag: str = key_field()
    app_list: str = key_field()
    """The app's list of invocations in ``status`` (``keys.app_invocations``)."""
    session_list: str = key_field()
    """The session's list of invocations (``keys.session_invocations``)."""
    session_meta: str = key_field()
    """The session's metadata hash: its existence is the session's."""
    session_busy: str = key_field()
    """The session's invocations paused on calls only their workers answer."""
    status: str
    """The status the invocation is indexed in."""
    invocation_id: str
    ttl: int


KEEP_UNFINISHED = LuaScript(KeepUnfinished, """
if redis.call('HGET', record_key, 'status') ~= status
    or redis.call('EXISTS', session_meta) == 0 then
  -- It went on (its save moved it out of the index already), it is gone, or its session
  -- was deleted (it can never go on: let it expire): out of the index.
  redis.call('ZREM', index, record_key)
  return 0
end
for _, key in ipairs({record_key, stream, statuses, results, jobs, cancel_flag, app_list,
                      session_list}) do
  redis.call('EXPIRE', key, ttl)  -- a key that does not exist stays so
end
if redis.call('SISMEMBER', session_busy, invocation_id) == 1 then
  -- Still holding the session's new messages: the mark lives as long as the invocation.
  redis.call('EXPIRE', session_busy, ttl)
end
local clock = redis.call('TIME')
redis.call('ZADD', index, 'XX', clock[1], record_key)
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
redis.call('ZADD', app_list, 'XX', now, invocation_id)
return 1
""")
"""Renew an unfinished invocation's keys for ``ttl`` seconds (its session's busy mark too, if
it holds one) and re-score it in the index and its app's list of invocations in ``status``
(1); unless it is no longer in ``status`` or its session is gone: then it leaves the index,
and nothing else is written (0). The scores are what the indexes' own expiry sweeps read: an
entry re-scored now is not taken for an expired record."""


async def keep_unfinished_alive(client: aioredis.Redis, ttl: int, *, batch: int = KEEP_BATCH) -> int:
    """Renew the keys of invocations unfinished for more than half ``ttl``.

    One pass: of each unfinished status, the oldest ``batch`` invocations saved in it more
    than half ``ttl`` ago, each renewed (no longer due) or, if it can never go on, taken out
    of the index. Returns the most it saw of one status: ``batch`` may have left more due.
    """
    now_seconds, _ = await client.time()
    seen = 0
    for status in _UNFINISHED:
        seen = max(seen, await _keep(client, status, now_seconds - ttl / 2, ttl, batch))
    return seen


async def _keep(client: aioredis.Redis, status: str, due_by: float, ttl: int, batch: int) -> int:
    """Renew the invocations of one status saved in it before ``due_by``; how many it saw."""
    index = keys.invocations_in(status)
    due = await client.zrangebyscore(index, "-inf", due_by, start=0, num=batch)
    if not due:
        return 0
    async with client.pipeline(transaction=False) as pipe:
        for member in due:
            pipe.hget(member, "record")
        records = await pipe.execute()
    script = KEEP_UNFINISHED.register(client)
    for member, raw in zip(due, records, strict=True):
        operands = _operands(index, status, text(member), raw, ttl)
        if operands is not None:
            await script(operands)
        else:  # gone, or not a record: nothing to keep
            await client.zrem(index, member)
    return len(due)


def _operands(index: str, status: str, record_key: str, raw: Any, ttl: int) -> KeepUnfinished | None:
    """The script's operands for the record stored as ``raw`` (None: none, or unreadable)."""
    if raw is None:
        return None  # expired or deleted
    try:
        record = json.loads(raw)
        app, invocation_id = record["app_name"], record["invocation_id"]
        user, session_id = record["user_id"], record["session_id"]
    except (ValueError, KeyError, TypeError):
        logger.warning("Not renewing %r: its record is not an invocation record", record_key)
        return None
    if keys.invocation(app, invocation_id) != record_key:
        return None
    return KeepUnfinished(
        index=index, record_key=record_key,
        stream=keys.invocation_stream(app, invocation_id),
        statuses=keys.invocation_statuses(app, invocation_id),
        results=keys.invocation_results(app, invocation_id),
        jobs=keys.invocation_jobs(app, invocation_id),
        cancel_flag=keys.cancel_flag(app, invocation_id),
        app_list=keys.app_invocations(app, status),
        session_list=keys.session_invocations(app, user, session_id),
        session_meta=keys.session(app, user, session_id),
        session_busy=keys.session_busy(app, user, session_id),
        status=status, invocation_id=invocation_id, ttl=ttl,
    )
