"""RedisSessionQueue: per-session work queues and leases in Redis (distributed mode).

Leases carry strictly increasing fencing tokens; while an orchestrator works on a session,
every append checks that it still holds the lease with its token, so a holder that lost
the lease (it stalled past the TTL and another took over) cannot write. Each push also posts
a wake-up on the orchestrators' wake stream, in the same round trip.
"""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis

from orchestrator.backends.redis import keys
from orchestrator.backends.redis.invocation_store import (
    CREATE_SCRIPT,
    PUT_RESULT_SCRIPT,
    STATUS_STREAM_MAXLEN,
    loaded_from,
)
from orchestrator.backends.redis.jobs import watch_member
from orchestrator.backends.redis.lua_functions import LUA_SAVE_RECORD
from orchestrator.backends.redis.session_service import (
    first_unread,
    session_after,
    session_from_replies,
    session_read_keys,
)
from orchestrator.backends.redis.wakeups import RedisWakeups
from orchestrator.distributed.models import InvocationRecord, ToolResult, WorkItem
from orchestrator.distributed.stores import SessionKey, Taken
from orchestrator.sessions.session import Session

# Push a work item and post its wake-up (alone, or after a step that decided to): KEYS
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

# CREATE_SCRIPT, then (if created) _PUSH: KEYS 4-5 and ARGV 5-9 as _PUSH's.
_CREATE_AND_PUSH = CREATE_SCRIPT + "local push_keys, push_args = 4, 5\n" + _PUSH

# The same for an existing session only: -1 (and nothing written) unless KEYS[6], the
# session's hash, exists. A door that must refuse an unknown session (the HTTP API's 404)
# learns it in the enqueue's own round trip.
_CREATE_AND_PUSH_IF_SESSION = (
    "if redis.call('EXISTS', KEYS[6]) == 0 then return -1 end\n" + _CREATE_AND_PUSH)

# _PUSH alone: KEYS 1-2 and ARGV 1-5 as _PUSH's.
_PUSH_ONLY = "local push_keys, push_args = 1, 1\n" + _PUSH

# PUT_RESULT_SCRIPT, then (if stored) _PUSH: KEYS 3-4 and ARGV 5-9 as _PUSH's.
_PUT_RESULT_AND_PUSH = PUT_RESULT_SCRIPT + "local push_keys, push_args = 3, 5\n" + _PUSH

# The start of the take script. KEYS: lease, fence counter, processing, queue. new_token() is nil
# when the lease is held; else the next fencing token, after a previous holder's
# in-progress items went back to the head of the queue (the caller sets the lease), which
# counts as a takeover in keys.stats (for metrics).
_NEW_TOKEN = """
local function new_token()
  if redis.call('EXISTS', KEYS[1]) == 1 then return nil end
  local left = 0
  while redis.call('LMOVE', KEYS[3], KEYS[4], 'RIGHT', 'LEFT') do left = left + 1 end
  if left > 0 then redis.call('HINCRBY', '""" + keys.stats() + """', 'takeovers', 1) end
  return redis.call('INCR', KEYS[2])
end
local token = new_token()
if not token then return false end
"""

# ARGV: ttl ms, the hinted invocation id or '', the first event to read. Returns false
# (lease busy), {token} (acquired, nothing queued: released again) or {token, first item};
# when the item is the hinted invocation's, followed by what a resume or start reads, in the
# same step: KEYS 5-7 the invocation's record hash, cancel flag and results, KEYS 8-12 the
# session's reads (session_read_keys), events from the one given on. HGETALLs come back as
# flat field/value lists.
_TAKE = _NEW_TOKEN + """
local item = redis.call('LMOVE', KEYS[4], KEYS[3], 'LEFT', 'RIGHT')
if not item then return {token} end
redis.call('SET', KEYS[1], token, 'PX', ARGV[1])
local ok, decoded = pcall(cjson.decode, item)  -- a malformed item is the caller's to report
if ARGV[2] == '' or not ok or type(decoded) ~= 'table' or decoded['invocation_id'] ~= ARGV[2] then
  return {token, item}
end
return {token, item, redis.call('HGET', KEYS[5], 'record'), redis.call('EXISTS', KEYS[6]),
  redis.call('HGETALL', KEYS[7]), redis.call('HGETALL', KEYS[8]), redis.call('HGETALL', KEYS[9]),
  redis.call('HGETALL', KEYS[10]), redis.call('HGETALL', KEYS[11]),
  redis.call('LRANGE', KEYS[12], tonumber(ARGV[3]), -1)}
"""

# KEYS: lease. ARGV: token, ttl ms.
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""

# KEYS: processing, queue, lease, then the record's (keys.invocation_record_keys).
# ARGV: finished item JSON or '',
# token, record JSON or '' (nothing to save), status, ttl seconds, stream maxlen. Saves the
# record (as RedisInvocationStore.save does), then returns the next item, or releases the
# lease (if still ours) when the queue is empty and returns false.
_CLAIM_OR_RELEASE = LUA_SAVE_RECORD + """
if ARGV[3] ~= '' then
  save_record(KEYS[4], KEYS[5], KEYS[6], ARGV[3], ARGV[4], ARGV[5], ARGV[6], false)
end
if ARGV[1] ~= '' then redis.call('LREM', KEYS[1], 1, ARGV[1]) end
local item = redis.call('LMOVE', KEYS[2], KEYS[1], 'LEFT', 'RIGHT')
if item then return item end
if redis.call('GET', KEYS[3]) == ARGV[2] then redis.call('DEL', KEYS[3]) end
return false
"""

# KEYS: lease. ARGV: token. Deletes the lease if it is still held with that token.
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
"""


class RedisSessionQueue:
    """Per-session work queues (reliable: claimed items sit in a processing list) and leases."""

    def __init__(
        self,
        client: aioredis.Redis,
        *,
        lease_ttl_seconds: float = 30.0,
        wakeups: RedisWakeups | None = None,
        record_ttl_seconds: int = 7 * 24 * 3600,
        job_watch_key: str = keys.job_watch("adk.invocations"),
    ) -> None:
        self._redis = client
        self._job_watch_key = job_watch_key
        """The watch index a stored result takes its call out of."""
        self._ttl_ms = int(lease_ttl_seconds * 1000)
        self._record_ttl = record_ttl_seconds
        """TTL of the records :meth:`claim_or_release` saves (as the store's)."""
        self._wakeups = wakeups
        """Where each push announces itself to orchestrators (None: the caller drains)."""
        self._take = client.register_script(_TAKE)
        self._push = client.register_script(_PUSH_ONLY)
        self._put_result_and_push = client.register_script(_PUT_RESULT_AND_PUSH)
        self._create_and_push = client.register_script(_CREATE_AND_PUSH)
        self._create_and_push_if_session = client.register_script(_CREATE_AND_PUSH_IF_SESSION)
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
                keys=[keys.invocation_results(key[0], item.invocation_id), self._job_watch_key,
                      *push_keys],
                args=[result.function_call_id, result.model_dump_json(), self._record_ttl,
                      watch_member(key[0], item.invocation_id, result.function_call_id),
                      *push_args],
            ))
        push_keys, push_args = self._push_operands(key, item)
        return bool(await self._push(keys=push_keys, args=push_args))

    def queue_create_and_push(self, pipe: Any, record: InvocationRecord, item: WorkItem, *,
                              session_must_exist: bool = False) -> None:
        """Add to a pipeline: store ``record`` unless it exists and, if stored, push ``item``.

        Its reply is 1 if the record was new (the item is queued), else 0; with
        ``session_must_exist``, -1 (nothing written) if the record's session does not exist.
        The scripts are called by their sha: load :attr:`create_and_push_script_sources`
        after Redis forgot them.
        """
        key = (record.app_name, record.user_id, record.session_id)
        push_keys, push_args = self._push_operands(key, item)
        script, operands = self._create_and_push, [
            *keys.invocation_record_keys(record.app_name, record.invocation_id), *push_keys]
        if session_must_exist:
            script = self._create_and_push_if_session
            operands.append(keys.session(*key))
        pipe.evalsha(
            script.sha, len(operands), *operands,
            record.model_dump_json(), record.status.value, self._record_ttl,
            STATUS_STREAM_MAXLEN, *push_args,
        )

    @property
    def create_and_push_script_sources(self) -> list[str]:
        """The Lua sources :meth:`queue_create_and_push` calls by sha (to ``SCRIPT LOAD``)."""
        return [str(self._create_and_push.script), str(self._create_and_push_if_session.script)]

    def _push_operands(self, key: SessionKey, item: WorkItem) -> tuple[list[str], list[Any]]:
        """KEYS and ARGV of the _PUSH fragment for ``item`` on ``key``'s queue."""
        queue = keys.session_queue(*key)
        if self._wakeups is None:
            return [queue, queue], [item.model_dump_json(), "", "", "", ""]
        return ([queue, self._wakeups.stream_key],
                [item.model_dump_json(), *key, item.invocation_id])

    async def take(
        self, key: SessionKey, hint: str | None = None, known: Session | None = None
    ) -> Taken | None:
        """Acquire the lease and claim the first item in one round trip (see SessionQueue).

        With ``hint`` (the invocation the wake-up announced) the same script also reads that
        invocation and its session, right after the claim, and they are returned if the item
        is one of the hinted invocation's. One script costs the client far less than the
        same reads as a pipeline. With ``known``, the script reads the events from the last
        of ``known``'s on: if that one is still there, only the newer ones are parsed.
        """
        operands = [keys.session_lease(*key), keys.fence_counter(*key),
                    keys.session_processing(*key), keys.session_queue(*key)]
        if hint:
            operands += [keys.invocation(key[0], hint), keys.cancel_flag(key[0], hint),
                         keys.invocation_results(key[0], hint), *session_read_keys(*key)]
        reply = await self._take(keys=operands, args=[self._ttl_ms, hint or "",
                                                      first_unread(known)])
        if not reply:
            return None
        token = str(reply[0])
        if len(reply) < 2:
            return Taken(token, None, None)
        item = WorkItem.model_validate_json(reply[1])
        if len(reply) < 3:
            return Taken(token, item, None)
        raw, cancelled, results, meta, state, app_state, user_state, events = reply[2:]
        loaded = loaded_from(raw or None, cancelled, _pairs(results))
        hashes = [_pairs(meta), _pairs(state), _pairs(app_state), _pairs(user_state)]
        if known is None:
            return Taken(token, item, loaded._replace(session=session_from_replies(
                *key, [*hashes, events])))
        same, session = session_after(known, hashes, events)
        # Not the session ``known`` was: no session here, the caller reads it whole.
        return Taken(token, item, loaded._replace(session=session) if same else loaded)

    async def renew(self, key: SessionKey, token: str) -> bool:
        """Extend the lease if still held."""
        return bool(await self._renew(keys=[keys.session_lease(*key)], args=[token, self._ttl_ms]))

    async def release(self, key: SessionKey, token: str) -> None:
        """Free the lease if still held with ``token``."""
        await self._release(keys=[keys.session_lease(*key)], args=[token])

    async def claim_or_release(
        self,
        key: SessionKey,
        token: str,
        finished: WorkItem | None = None,
        save: InvocationRecord | None = None,
    ) -> WorkItem | None:
        """Save ``save``, then the next item, or (atomically) release the lease: one script."""
        processing = keys.session_processing(*key)
        record_keys = [processing, processing, processing]
        record_args: list[Any] = ["", "", 0, 0]
        if save is not None:
            record_keys = keys.invocation_record_keys(save.app_name, save.invocation_id)
            record_args = [save.model_dump_json(), save.status.value, self._record_ttl,
                           STATUS_STREAM_MAXLEN]
        raw = await self._claim_or_release(
            keys=[processing, keys.session_queue(*key), keys.session_lease(*key), *record_keys],
            args=[finished.model_dump_json() if finished is not None else "", token, *record_args],
        )
        return WorkItem.model_validate_json(raw) if raw else None


def _pairs(flat: list[Any]) -> dict[Any, Any]:
    """A hash as a Lua script returns it (field, value, field, value...) as a dict."""
    return dict(zip(flat[::2], flat[1::2], strict=True))
