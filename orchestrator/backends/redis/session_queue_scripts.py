"""The Lua scripts of the per-session queues and leases, with their operands.

Every push also posts the item's wake-up on the orchestrators' wake stream, in the same
script (``push_item``); a call's result and a new invocation's record are stored by the
script that pushes the item they go with, so the item is queued if and only if they are
stored.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.backends.redis import keys
from orchestrator.backends.redis.invocation_scripts import PutResult, SaveRecord
from orchestrator.backends.redis.lua import (
    LuaScript,
    Operands,
    key_field,
    many_field,
    optional_key_field,
)
from orchestrator.backends.redis.lua_functions import LUA_PUT_RESULT, LUA_SAVE_RECORD

_LUA_CLAIM_NEXT = """
local function claim_next(queue, processing, held, busy)
  if redis.call('SCARD', busy) == 0 then
    while true do  -- nobody busy (any more): held messages back at the queue's head, in order
      local item = redis.call('RPOP', held)
      if not item then break end
      redis.call('LPUSH', queue, item)
    end
  end
  while true do
    local item = redis.call('LMOVE', queue, processing, 'LEFT', 'RIGHT')
    if not item or redis.call('SCARD', busy) == 0 then return item end
    local ok, decoded = pcall(cjson.decode, item)
    if not (ok and type(decoded) == 'table' and decoded['kind'] == 'start'
            and redis.call('SISMEMBER', busy, tostring(decoded['invocation_id'])) == 0) then
      return item
    end
    redis.call('LREM', processing, -1, item)  -- a new message: held while any is busy
    redis.call('RPUSH', held, item)
  end
end
local function mark_busy(busy, invocation, in_flight, ttl)
  if in_flight == '1' then
    redis.call('SADD', busy, invocation)
    redis.call('EXPIRE', busy, ttl)
  else
    redis.call('SREM', busy, invocation)
  end
end
"""
"""``claim_next(queue, processing, held, busy)``: move the queue's first item to
``processing`` and return it; while ``busy`` (a set) names invocations, the new messages
(``start`` items of other invocations) met on the way go to ``held`` instead, and once it
is empty (its invocations done, or the set expired with their records) the held messages
go back to the queue's head first, in their order. ``mark_busy(...)``: after saving
``invocation``'s record, count it busy (``in_flight`` '1') or not any more. Several can be
busy at once: one resumed from an outside answer goes to its workers while another waits
for its own.

Why: an invocation paused on calls only its workers answer (plain tools, parallel branches)
is still answering its message, as it would be in process; a new message to its session
waits for it, or the model would answer the one with the other half done. A pause on a
call answered from outside (a long-running tool) lets the next message run, as in
google-adk."""

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
if not put_result(results, watch, jobs, call_id, result, ttl, member, final) then return 0 end
return push_item(queue, wake, item, app, user, session, invocation)
""", functions=[LUA_PUT_RESULT, _LUA_PUSH_ITEM])
"""Store a call's result (as :data:`~.invocation_store.PUT_RESULT`) and, if it was stored,
push the item: 1, else 0 and nothing written."""


@dataclass(frozen=True, kw_only=True)
class PutAnswersAndPush(PushItem):
    """Operands of :data:`PUT_ANSWERS_AND_PUSH`: several calls' answers, and their resume."""

    results: str = key_field()
    """The invocation's results hash."""
    watch: str = key_field()
    """The job watch index the calls leave."""
    jobs: str = key_field()
    """The invocation's jobs hash (an answered call's dispatch leaves it)."""
    ttl: int
    call_ids: list[str] = many_field()
    answers: list[str] = many_field()
    """Each call's result JSON, in the order of ``call_ids``."""
    members: list[str] = many_field()
    """Each call's member of the watch index."""


PUT_ANSWERS_AND_PUSH = LuaScript(PutAnswersAndPush, """
local fresh = {}
for i = 0, call_ids_count - 1 do
  local call_id, answer = ARGV[call_ids_first + i], ARGV[answers_first + i]
  if redis.call('HGET', results, call_id) ~= answer then
    if result_refused(results, call_id) then return call_id end
    fresh[#fresh + 1] = i
  end
end
-- Every answer is in exactly so already: this request sent again (its reply was lost).
if #fresh == 0 then return '' end
for _, i in ipairs(fresh) do
  put_result(results, watch, jobs, ARGV[call_ids_first + i], ARGV[answers_first + i], ttl,
    ARGV[members_first + i], '1')
end
push_item(queue, wake, item, app, user, session, invocation)
return ''
""", functions=[LUA_PUT_RESULT, _LUA_PUSH_ITEM])
"""Store every answer and push the item, all or nothing: '' when done, else the id of a call
whose answer could not be stored (it has another final one), and nothing written. An answer
stored already, byte for byte, is taken as done: a request sent twice (a lost reply) is
taken once, and queues one resume."""


@dataclass(frozen=True, kw_only=True)
class CreateAndPush(PushItem, SaveRecord):
    """Operands of :data:`CREATE_AND_PUSH`: a new invocation's record, and its first item."""


CREATE_AND_PUSH = LuaScript(CreateAndPush, """
if not save_record(record_key, stream, statuses, record, status, ttl, maxlen, true, shown) then
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
if not save_record(record_key, stream, statuses, record, status, ttl, maxlen, true, shown) then
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
    held: str = key_field()
    busy: str = key_field()
    """The session's held messages and busy invocations (see :data:`_LUA_CLAIM_NEXT`)."""
    taker: str | None = optional_key_field()
    """With ``taker_id``: names the call that took the lease (``keys.session_lease_taker``)."""
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
    taker_id: str = ""
    """A name of this call, unique ('': none): run twice, it is given what it took."""


TAKE = LuaScript(TakeSession, f"""
local token, item
if redis.call('EXISTS', lease) == 1 then
  if taker_id == '' or redis.call('GET', taker) ~= taker_id then return false end
  -- This very call run a second time (its reply was lost and the client sent it again):
  -- the lease and the item its first run took.
  token, item = redis.call('GET', lease), redis.call('LINDEX', processing, 0)
  if not item then return false end
else
  local left = 0
  while redis.call('LMOVE', processing, queue, 'RIGHT', 'LEFT') do left = left + 1 end
  if left > 0 then redis.call('HINCRBY', '{keys.stats()}', 'takeovers', 1) end
  token = redis.call('INCR', fence)
  item = claim_next(queue, processing, held, busy)
  if not item then return {{token}} end
  redis.call('SET', lease, token, 'PX', ttl_ms)
  if taker_id ~= '' then redis.call('SET', taker, taker_id, 'PX', ttl_ms) end
end
local ok, decoded = pcall(cjson.decode, item)  -- a malformed item is the caller's to report
if hint == '' or not ok or type(decoded) ~= 'table' or decoded['invocation_id'] ~= hint then
  return {{token, item}}
end
return {{token, item, redis.call('HGET', record_key, 'record'), redis.call('EXISTS', cancel),
  redis.call('HGETALL', results), redis.call('HGETALL', meta), redis.call('HGETALL', state),
  redis.call('HGETALL', app_state), redis.call('HGETALL', user_state),
  redis.call('LRANGE', events, tonumber(first_event), -1)}}
""", functions=[_LUA_CLAIM_NEXT])
"""Take a session: false while its lease is held. Else the next fencing token, after a
previous holder's in-progress items went back to the head of the queue (which counts as a
takeover in ``keys.stats``, for metrics); then ``{token}`` (nothing queued: the lease is not
set) or ``{token, first item}`` with the lease set, followed, when the item is the hinted
invocation's, by its record, cancel flag and results and the session's hashes and events
from ``first_event`` on, in the same step (HGETALLs as flat field/value lists). Run twice
with one ``taker_id`` (a lost reply resent), it replies what its first run took, instead of
false (the lease would have looked busy until it expired)."""


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
    held: str = key_field()
    busy: str = key_field()
    """The session's held messages and busy invocations (see :data:`_LUA_CLAIM_NEXT`)."""
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
    shown: str = ""
    """The record's JSON for its status entries, when it differs ('': ``record``)."""
    invocation: str = ""
    """With ``record``: its invocation id..."""
    in_flight: str = ""
    """... and '1' if it is paused on calls only its workers answer (the session is busy)."""


CLAIM_OR_RELEASE = LuaScript(ClaimOrRelease, """
if redis.call('GET', lease) ~= token then
  -- This very call run a second time after its first run let the lease go (its reply was
  -- lost, the client sent it again): the finished item is in neither list any more.
  if finished ~= '' and not redis.call('LPOS', processing, finished)
      and not redis.call('LPOS', queue, finished) then
    return false
  end
  return -1
end
if record ~= '' then
  save_record(record_key, stream, statuses, record, status, ttl, maxlen, false, shown)
  mark_busy(busy, invocation, in_flight, ttl)
end
if finished ~= '' and redis.call('LREM', processing, 1, finished) == 0 then
  -- This very call run a second time (its reply was lost and the client sent it again):
  -- the first run dropped the finished item and claimed the next one, held here.
  local claimed = redis.call('LINDEX', processing, 0)
  if claimed then return claimed end
end
local item = claim_next(queue, processing, held, busy)
if item then return item end
redis.call('DEL', lease)  -- held with the token: checked first
return false
""", functions=[LUA_SAVE_RECORD, _LUA_CLAIM_NEXT])
"""Unless the lease is still held with ``token`` (-1: lost, nothing written): save the
record (as ``RedisInvocationStore.save`` does), drop the finished item, then return the next
item, or release the lease when the queue is empty and return false. Run twice (a lost
reply resent), it returns the item its first run claimed: items are unique
(:attr:`WorkItem.item_id`), so the finished one is gone and the claimed one is not; after a
first run that let the lease go, false again (the finished item is gone from both lists). A
holder whose lease ran out must not write its record over the next holder's (a finished
invocation put back to "paused"), nor take an item from under it."""
