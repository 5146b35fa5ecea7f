"""RedisSessionQueue: per-session work queues and leases in Redis (distributed mode).

Leases carry strictly increasing fencing tokens; while an orchestrator works on a session,
every append checks that it still holds the lease with its token, so a holder that lost
the lease (it stalled past the TTL and another took over) cannot write. Each push also posts
a wake-up on the orchestrators' wake stream, in the same round trip.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis

from orchestrator.backends.redis import keys
from orchestrator.backends.redis.codec import pairs_to_dict
from orchestrator.backends.redis.invocation_store import (
    PutResult,
    SaveRecord,
    loaded_from,
    put_result_operands,
    save_record_operands,
)
from orchestrator.backends.redis.lua import LuaScript, Operands, key_field, optional_key_field
from orchestrator.backends.redis.lua_functions import LUA_PUT_RESULT, LUA_SAVE_RECORD
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

_LUA_PUSH_ITEM = """
local function push_item(queue, wake, item, app, user, session, invocation)
  redis.call('RPUSH', queue, item)
  if app ~= '' then
    redis.call('XADD', wake, '*', 'app', app, 'user', user, 'session', session, 'inv', invocation)
  end
  return 1
end
"""
"""``push_item(queue, wake, item, app, user, session, invocation)``: push a work item on a
session's queue and post its wake-up (``app`` '': none); 1."""


@dataclass(frozen=True, kw_only=True)
class PushItem(Operands):
    """Operands of :data:`PUSH`: a work item for a session's queue, and its wake-up."""

    queue: str = key_field()
    """The session's queue (``keys.session_queue``)."""
    wake: str | None = optional_key_field()
    """The orchestrators' wake stream (None: no wake-up, the caller drains)."""
    item: str
    """The work item's JSON."""
    app: str = ""
    """The wake-up's fields (with ``wake``): the session and the item's invocation."""
    user: str = ""
    session: str = ""
    invocation: str = ""


PUSH = LuaScript(PushItem, """
return push_item(queue, wake, item, app, user, session, invocation)
""", functions=[_LUA_PUSH_ITEM])
"""Push a work item and post its wake-up: 1."""


@dataclass(frozen=True, kw_only=True)
class PutResultAndPush(PushItem, PutResult):
    """Operands of :data:`PUT_RESULT_AND_PUSH`: a call's result, and the item resuming it."""


PUT_RESULT_AND_PUSH = LuaScript(PutResultAndPush, """
if not put_result(results, watch, call_id, result, ttl, member) then return 0 end
return push_item(queue, wake, item, app, user, session, invocation)
""", functions=[LUA_PUT_RESULT, _LUA_PUSH_ITEM])
"""Store a call's result (as :data:`~.invocation_store.PUT_RESULT`) and, if it was stored,
push the item: 1, else 0 and nothing written."""


@dataclass(frozen=True, kw_only=True)
class CreateAndPush(PushItem, SaveRecord):
    """Operands of :data:`CREATE_AND_PUSH`: a new invocation's record, and its first item."""


CREATE_AND_PUSH = LuaScript(CreateAndPush, """
if not save_record(record_key, stream, statuses, record, status, ttl, maxlen, true) then
  return 0
end
return push_item(queue, wake, item, app, user, session, invocation)
""", functions=[LUA_SAVE_RECORD, _LUA_PUSH_ITEM])
"""Store a new record (as :data:`~.invocation_store.CREATE_RECORD`) and, if it was new,
push the item: 1, else 0 and nothing written."""


@dataclass(frozen=True, kw_only=True)
class CreateAndPushIfSession(CreateAndPush):
    """Operands of :data:`CREATE_AND_PUSH_IF_SESSION`: :class:`CreateAndPush`'s, and more."""

    session_meta: str = key_field()
    """The session's hash (``keys.session``): the item is queued only if it exists."""


CREATE_AND_PUSH_IF_SESSION = LuaScript(CreateAndPushIfSession, """
if redis.call('EXISTS', session_meta) == 0 then return -1 end
if not save_record(record_key, stream, statuses, record, status, ttl, maxlen, true) then
  return 0
end
return push_item(queue, wake, item, app, user, session, invocation)
""", functions=[LUA_SAVE_RECORD, _LUA_PUSH_ITEM])
""":data:`CREATE_AND_PUSH` for an existing session only: -1 (and nothing written) unless the
session exists. A door that must refuse an unknown session (the HTTP API's 404) learns it
in the enqueue's own round trip."""


@dataclass(frozen=True, kw_only=True)
class TakeSession(Operands):
    """Operands of :data:`TAKE`: a session's lease and queue; with ``hint``, what to read."""

    lease: str = key_field()
    fence: str = key_field()
    """The counter issuing fencing tokens."""
    processing: str = key_field()
    queue: str = key_field()
    record_key: str | None = optional_key_field()
    """With ``hint``: the hinted invocation's record hash, cancel flag and results..."""
    cancel: str | None = optional_key_field()
    results: str | None = optional_key_field()
    meta: str | None = optional_key_field()
    """... and the session's reads (:func:`~.session_service.session_read_keys`)."""
    state: str | None = optional_key_field()
    app_state: str | None = optional_key_field()
    user_state: str | None = optional_key_field()
    events: str | None = optional_key_field()
    ttl_ms: int
    hint: str = ""
    """The invocation the wake-up announced ('': none)."""
    first_event: int = 0
    """The index to read the session's events from."""


TAKE = LuaScript(TakeSession, f"""
if redis.call('EXISTS', lease) == 1 then return false end
local left = 0
while redis.call('LMOVE', processing, queue, 'RIGHT', 'LEFT') do left = left + 1 end
if left > 0 then redis.call('HINCRBY', '{keys.stats()}', 'takeovers', 1) end
local token = redis.call('INCR', fence)
local item = redis.call('LMOVE', queue, processing, 'LEFT', 'RIGHT')
if not item then return {{token}} end
redis.call('SET', lease, token, 'PX', ttl_ms)
local ok, decoded = pcall(cjson.decode, item)  -- a malformed item is the caller's to report
if hint == '' or not ok or type(decoded) ~= 'table' or decoded['invocation_id'] ~= hint then
  return {{token, item}}
end
return {{token, item, redis.call('HGET', record_key, 'record'), redis.call('EXISTS', cancel),
  redis.call('HGETALL', results), redis.call('HGETALL', meta), redis.call('HGETALL', state),
  redis.call('HGETALL', app_state), redis.call('HGETALL', user_state),
  redis.call('LRANGE', events, tonumber(first_event), -1)}}
""")
"""Take a session: false while its lease is held. Else the next fencing token, after a
previous holder's in-progress items went back to the head of the queue (which counts as a
takeover in ``keys.stats``, for metrics); then ``{token}`` (nothing queued: the lease is not
set) or ``{token, first item}`` with the lease set, followed, when the item is the hinted
invocation's, by its record, cancel flag and results and the session's hashes and events
from ``first_event`` on, in the same step (HGETALLs as flat field/value lists)."""


@dataclass(frozen=True, kw_only=True)
class LeaseToken(Operands):
    """Operands of :data:`RENEW` and :data:`RELEASE`."""

    lease: str = key_field()
    token: str
    ttl_ms: int = 0
    """How long a renewed lease lasts (:data:`RENEW`)."""


RENEW = LuaScript(LeaseToken, """
if redis.call('GET', lease) == token then
  return redis.call('PEXPIRE', lease, ttl_ms)
end
return 0
""")
"""Extend the lease if it is still held with ``token``: 1, else 0."""

RELEASE = LuaScript(LeaseToken, """
if redis.call('GET', lease) == token then redis.call('DEL', lease) end
""")
"""Delete the lease if it is still held with ``token``."""


@dataclass(frozen=True, kw_only=True)
class ClaimOrRelease(Operands):
    """Operands of :data:`CLAIM_OR_RELEASE`: the session's lists and lease, and a record."""

    processing: str = key_field()
    queue: str = key_field()
    lease: str = key_field()
    record_key: str | None = optional_key_field()
    """With ``record``: its keys (``keys.invocation_record_keys``)."""
    stream: str | None = optional_key_field()
    statuses: str | None = optional_key_field()
    finished: str
    """The finished item's JSON ('': none)."""
    token: str
    record: str = ""
    """A record's JSON to save first ('': none), with its status, TTL and stream cap."""
    status: str = ""
    ttl: int = 0
    maxlen: int = 0


CLAIM_OR_RELEASE = LuaScript(ClaimOrRelease, """
if record ~= '' then
  save_record(record_key, stream, statuses, record, status, ttl, maxlen, false)
end
if finished ~= '' then redis.call('LREM', processing, 1, finished) end
local item = redis.call('LMOVE', queue, processing, 'LEFT', 'RIGHT')
if item then return item end
if redis.call('GET', lease) == token then redis.call('DEL', lease) end
return false
""", functions=[LUA_SAVE_RECORD])
"""Save the record (as ``RedisInvocationStore.save`` does), drop the finished item, then
return the next item, or release the lease (if still held with ``token``) when the queue
is empty and return false."""


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
        self._take = TAKE.register(client)
        self._push = PUSH.register(client)
        self._put_result_and_push = PUT_RESULT_AND_PUSH.register(client)
        self._create_and_push = CREATE_AND_PUSH.register(client)
        self._create_and_push_if_session = CREATE_AND_PUSH_IF_SESSION.register(client)
        self._renew = RENEW.register(client)
        self._release = RELEASE.register(client)
        self._claim_or_release = CLAIM_OR_RELEASE.register(client)

    async def push(self, key: SessionKey, item: WorkItem, result: ToolResult | None = None) -> bool:
        """Append an item, and post a wake-up for it in the same round trip.

        With ``result`` (a call's result, stored as :meth:`RedisInvocationStore.put_result`
        does), one script stores it and pushes only if it was stored.
        """
        push = self._push_fields(key, item)
        if result is not None:
            stored = put_result_operands(key[0], item.invocation_id, result,
                                         watch=self._job_watch_key, ttl=self._record_ttl)
            return bool(await self._put_result_and_push(
                PutResultAndPush(**stored.field_values(), **push)))
        return bool(await self._push(PushItem(**push)))

    def queue_create_and_push(self, pipe: Any, record: InvocationRecord, item: WorkItem, *,
                              session_must_exist: bool = False) -> None:
        """Add to a pipeline: store ``record`` unless it exists and, if stored, push ``item``.

        Its reply is 1 if the record was new (the item is queued), else 0; with
        ``session_must_exist``, -1 (nothing written) if the record's session does not exist.
        The scripts are called by their sha: load :attr:`create_and_push_script_sources`
        after Redis forgot them.
        """
        key = (record.app_name, record.user_id, record.session_id)
        fields = {**save_record_operands(record, self._record_ttl).field_values(),
                  **self._push_fields(key, item)}
        if session_must_exist:
            self._create_and_push_if_session.queue(
                pipe, CreateAndPushIfSession(**fields, session_meta=keys.session(*key)))
        else:
            self._create_and_push.queue(pipe, CreateAndPush(**fields))

    @property
    def create_and_push_script_sources(self) -> list[str]:
        """The Lua sources :meth:`queue_create_and_push` calls by sha (to ``SCRIPT LOAD``)."""
        return [CREATE_AND_PUSH.source, CREATE_AND_PUSH_IF_SESSION.source]

    def _push_fields(self, key: SessionKey, item: WorkItem) -> dict[str, Any]:
        """The :class:`PushItem` fields pushing ``item`` on ``key``'s queue, with its wake-up."""
        fields: dict[str, Any] = {"queue": keys.session_queue(*key), "item": item.model_dump_json()}
        if self._wakeups is not None:
            fields.update(wake=self._wakeups.stream_key, app=key[0], user=key[1], session=key[2],
                          invocation=item.invocation_id)
        return fields

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
        hinted: dict[str, Any] = {}
        if hint:
            meta, state, app_state, user_state, events = session_read_keys(*key)
            hinted = {"record_key": keys.invocation(key[0], hint),
                      "cancel": keys.cancel_flag(key[0], hint),
                      "results": keys.invocation_results(key[0], hint), "meta": meta,
                      "state": state, "app_state": app_state, "user_state": user_state,
                      "events": events}
        reply = await self._take(TakeSession(
            lease=keys.session_lease(*key), fence=keys.fence_counter(*key),
            processing=keys.session_processing(*key), queue=keys.session_queue(*key), **hinted,
            ttl_ms=self._ttl_ms, hint=hint or "", first_event=first_unread(known)))
        if not reply:
            return None
        token = str(reply[0])
        if len(reply) < 2:
            return Taken(token, None, None)
        item = WorkItem.model_validate_json(reply[1])
        if len(reply) < 3:
            return Taken(token, item, None)
        raw, cancelled, results, meta, state, app_state, user_state, events = reply[2:]
        loaded = loaded_from(raw or None, cancelled, pairs_to_dict(results))
        hashes = [pairs_to_dict(raw_hash) for raw_hash in (meta, state, app_state, user_state)]
        if known is None:
            return Taken(token, item, loaded._replace(session=session_from_replies(
                *key, [*hashes, events])))
        same, session = session_after(known, hashes, events)
        # Not the session ``known`` was: no session here, the caller reads it whole.
        return Taken(token, item, loaded._replace(session=session) if same else loaded)

    async def renew(self, key: SessionKey, token: str) -> bool:
        """Extend the lease if still held."""
        return bool(await self._renew(LeaseToken(lease=keys.session_lease(*key), token=token,
                                                 ttl_ms=self._ttl_ms)))

    async def release(self, key: SessionKey, token: str) -> None:
        """Free the lease if still held with ``token``."""
        await self._release(LeaseToken(lease=keys.session_lease(*key), token=token))

    async def claim_or_release(
        self,
        key: SessionKey,
        token: str,
        finished: WorkItem | None = None,
        save: InvocationRecord | None = None,
    ) -> WorkItem | None:
        """Save ``save``, then the next item, or (atomically) release the lease: one script."""
        saved = save_record_operands(save, self._record_ttl).field_values() if save is not None else {}
        raw = await self._claim_or_release(ClaimOrRelease(
            processing=keys.session_processing(*key), queue=keys.session_queue(*key),
            lease=keys.session_lease(*key), **saved,
            finished=finished.model_dump_json() if finished is not None else "", token=token))
        return WorkItem.model_validate_json(raw) if raw else None

