"""Paused invocations outlive the record TTL: their keys are kept while they wait.

Every key of an invocation expires ``record_ttl_seconds`` after its last write, which is what
clears finished invocations away. A paused invocation is written to only when it goes on,
and one waiting for a person (an approval, a ticket) may wait longer than the TTL: it would
then vanish, and its answer be refused as for an unknown invocation. So an orchestrator
looks, every so often, at the invocations paused for more than half the TTL (the index of
paused ones, ``keys.invocations_in``, is scored by when each was saved paused) and renews
their keys (:data:`KEEP_PAUSED`): the record and its streams, results and jobs, their
entries in the lists of invocations, and their place in the index (re-scored as if saved
now). An invocation whose session was deleted is not kept: it can never go on.
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
"""Paused invocations renewed per pass at most (the rest are due at the next pass)."""

_PAUSED = InvocationStatus.PAUSED.value


@dataclass(frozen=True, kw_only=True)
class KeepPaused(Operands):
    """Operands of :data:`KEEP_PAUSED`: one paused invocation's keys, renewed for ``ttl``."""

    index: str = key_field()
    """The index of paused invocations (``keys.invocations_in('paused')``)."""
    record_key: str = key_field()
    stream: str = key_field()
    statuses: str = key_field()
    results: str = key_field()
    jobs: str = key_field()
    app_list: str = key_field()
    """The app's list of paused invocations (``keys.app_invocations``)."""
    session_list: str = key_field()
    """The session's list of invocations (``keys.session_invocations``)."""
    session_meta: str = key_field()
    """The session's metadata hash: its existence is the session's."""
    invocation_id: str
    ttl: int


KEEP_PAUSED = LuaScript(KeepPaused, """
if redis.call('HGET', record_key, 'status') ~= 'paused'
    or redis.call('EXISTS', session_meta) == 0 then
  -- It went on (its save moved it out of the index already), it is gone, or its session
  -- was deleted (it can never go on: let it expire): out of the index of paused ones.
  redis.call('ZREM', index, record_key)
  return 0
end
for _, key in ipairs({record_key, stream, statuses, results, jobs, app_list, session_list}) do
  redis.call('EXPIRE', key, ttl)  -- a key that does not exist stays so
end
local clock = redis.call('TIME')
redis.call('ZADD', index, 'XX', clock[1], record_key)
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
redis.call('ZADD', app_list, 'XX', now, invocation_id)
return 1
""")
"""Renew a paused invocation's keys for ``ttl`` seconds and re-score it in the index and its
app's list of paused invocations (1); unless it is no longer paused or its session is gone:
then it leaves the index, and nothing else is written (0). The scores are what the
indexes' own expiry sweeps read: an entry re-scored now is not taken for an expired record."""


async def keep_paused_alive(client: aioredis.Redis, ttl: int, *, batch: int = KEEP_BATCH) -> int:
    """Renew the keys of invocations paused for more than half ``ttl``; return how many it saw.

    One pass: the oldest ``batch`` of them, each renewed (no longer due) or, if it can never
    go on, taken out of the index; a pass that saw ``batch`` may have left more due.
    """
    index = keys.invocations_in(_PAUSED)
    now_seconds, _ = await client.time()
    due = await client.zrangebyscore(index, "-inf", now_seconds - ttl / 2, start=0, num=batch)
    if not due:
        return 0
    async with client.pipeline(transaction=False) as pipe:
        for member in due:
            pipe.hget(member, "record")
        records = await pipe.execute()
    script = KEEP_PAUSED.register(client)
    for member, raw in zip(due, records, strict=True):
        operands = _operands(index, text(member), raw, ttl)
        if operands is not None:
            await script(operands)
        else:  # gone, or not a record: nothing to keep
            await client.zrem(index, member)
    return len(due)


def _operands(index: str, record_key: str, raw: Any, ttl: int) -> KeepPaused | None:
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
    return KeepPaused(
        index=index, record_key=record_key,
        stream=keys.invocation_stream(app, invocation_id),
        statuses=keys.invocation_statuses(app, invocation_id),
        results=keys.invocation_results(app, invocation_id),
        jobs=keys.invocation_jobs(app, invocation_id),
        app_list=keys.app_invocations(app, _PAUSED),
        session_list=keys.session_invocations(app, user, session_id),
        session_meta=keys.session(app, user, session_id),
        invocation_id=invocation_id, ttl=ttl,
    )
