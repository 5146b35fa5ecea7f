"""What a Redis session write runs: the create and append Lua scripts, and their operands.

Both scripts check everything before their first write (Redis does not roll a script back),
and reply with one of the error codes below when they refuse.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from orchestrator.backends.redis import keys
from orchestrator.backends.redis.codec import dumps, encode_value
from orchestrator.backends.redis.jobs import LUA_PUBLISH_JOB
from orchestrator.backends.redis.lua import (
    LuaScript,
    Operands,
    key_field,
    many_field,
    optional_key_field,
    pairs_field,
)
from orchestrator.backends.redis.lua_functions import LUA_SAVE_RECORD, LUA_WRONG_TYPE
from orchestrator.sessions.base_session_service import split_state_delta
from orchestrator.sessions.state import State

# Error codes the scripts reply with (the rest of the message is for humans).
NOT_FOUND = "ADK_SESSION_NOT_FOUND"
EXISTS = "ADK_SESSION_EXISTS"
STALE = "ADK_STALE_SESSION"
ANSWERED = "ADK_ALREADY_ANSWERED"
CANCELLED = "ADK_INVOCATION_CANCELLED"

HSET_CHUNK = 256
"""Field/value pairs per HSET inside the scripts (keeps ``unpack`` far below Lua's limits)."""

# Every check runs before the first write: Redis does not roll a script back, so a script
# that fails must fail before it has written anything.
_LUA_HSET_PAIRS = f"""
local function hset_pairs(key, first, count)
  local done = 0
  while done < count do
    local n = math.min(count - done, {HSET_CHUNK})
    local args = {{}}
    for j = 1, 2 * n do
      args[j] = ARGV[first + 2 * done + j - 1]
    end
    redis.call('HSET', key, unpack(args))
    done = done + n
  end
end
"""
"""``hset_pairs(key, first, count)``: HSET the ``count`` field/value pairs of ARGV from index
``first`` (a :func:`~.lua.pairs_field` group's ``_first`` and ``_count``) into ``key``."""


@dataclass(frozen=True, kw_only=True)
class SessionKeys(Operands):
    """The keys of a session both scripts write, in the order they check their types."""

    meta: str = key_field()
    state: str = key_field()
    events: str = key_field()
    event_ids: str = key_field()
    user_sessions: str = key_field()
    app_sessions: str = key_field()
    app_state: str = key_field()
    user_state: str = key_field()


def session_keys(app_name: str, user_id: str, session_id: str) -> dict[str, str]:
    """The fields of :class:`SessionKeys` for one session."""
    meta, state, events, event_ids = keys.session_storage_keys(app_name, user_id, session_id)
    return {"meta": meta, "state": state, "events": events, "event_ids": event_ids,
            "user_sessions": keys.user_sessions(app_name, user_id),
            "app_sessions": keys.app_sessions(app_name), "app_state": keys.app_state(app_name),
            "user_state": keys.user_state(app_name, user_id)}


_LUA_SESSION_TYPES = """{meta, 'hash'}, {state, 'hash'}, {events, 'list'}, {event_ids, 'set'},
  {user_sessions, 'zset'}, {app_sessions, 'zset'}, {app_state, 'hash'}, {user_state, 'hash'}"""
"""The :class:`SessionKeys` and their types, as ``wrong_type`` takes them."""


@dataclass(frozen=True, kw_only=True)
class CreateSession(SessionKeys):
    """Operands of :data:`CREATE`: a new session, its creation time and its initial state."""

    session_seq: str = key_field()
    """The app's counter of sessions (orders sessions created at the same time)."""
    unless: str | None = optional_key_field()
    """An invocation record: the session is not created if it exists (an enqueue sent
    again with its invocation id, for which the session was made the first time)."""
    session_id: str
    app_name: str
    user_id: str
    now: str
    app_member: str
    """The session's member of the app's session index (:func:`app_member`)."""
    create_id: str = ""
    """A name of this creation, unique ('': none), kept in the session's hash: run twice (a
    lost reply resent), the script finds the session its first run made and replies as then."""
    state_pairs: dict[str, str] = pairs_field()
    """Session-scoped state (JSON values), then the ``app:`` and ``user:`` state, prefixes
    stripped."""
    app_state_pairs: dict[str, str] = pairs_field()
    user_state_pairs: dict[str, str] = pairs_field()


CREATE = LuaScript(CreateSession, f"""
if create_id ~= '' and redis.call('HGET', meta, 'create_id') == create_id then
  return {{redis.call('HGETALL', app_state), redis.call('HGETALL', user_state)}}
end
if redis.call('EXISTS', meta) == 1 or (unless ~= meta and redis.call('EXISTS', unless) == 1) then
  return redis.error_reply('{EXISTS}')
end
local bad = wrong_type({{{_LUA_SESSION_TYPES}, {{session_seq, 'string'}}}})
if bad then return bad end
local seq = redis.call('INCR', session_seq)
redis.call('DEL', state, events, event_ids)
redis.call('HSET', meta, 'id', session_id, 'app_name', app_name, 'user_id', user_id,
  'create_time', now, 'last_update_time', now, 'seq', seq)
if create_id ~= '' then redis.call('HSET', meta, 'create_id', create_id) end
hset_pairs(state, state_pairs_first, state_pairs_count)
hset_pairs(app_state, app_state_pairs_first, app_state_pairs_count)
hset_pairs(user_state, user_state_pairs_first, user_state_pairs_count)
redis.call('ZADD', user_sessions, now, session_id)
redis.call('ZADD', app_sessions, now, app_member)
return {{redis.call('HGETALL', app_state), redis.call('HGETALL', user_state)}}
""", functions=[LUA_WRONG_TYPE, _LUA_HSET_PAIRS])
"""Create a session unless it exists (an ``EXISTS`` error, nothing written); reply: the
app's and the user's state hashes (flat field/value lists)."""


@dataclass(frozen=True, kw_only=True)
class AppendEvent(SessionKeys):
    """Operands of :data:`APPEND`: one event, its state delta, and what else the append does.

    Each optional key goes with an argument: ``lease`` with ``token`` (fenced by a lease),
    ``stream`` with ``maxlen`` (mirrored to a live stream), ``record_key`` and ``statuses``
    with ``record`` (a record to save first), ``answered`` with ``answers`` (the call ids the
    event answers, each answered at most once), ``jobs`` and ``watch`` with ``publishes``
    (jobs of the event's remote calls, sent by the same script).
    """

    lease: str | None = optional_key_field()
    stream: str | None = optional_key_field()
    record_key: str | None = optional_key_field()
    statuses: str | None = optional_key_field()
    answered: str | None = optional_key_field()
    jobs: str | None = optional_key_field()
    """The invocation's jobs hash, when ``publishes`` has jobs."""
    watch: str | None = optional_key_field()
    """The job watch index, when ``publishes`` has jobs."""
    cancel_flag: str | None = optional_key_field()
    """The event's invocation's cancel flag, when ``unless_cancelled``."""
    event_id: str
    event_json: str
    timestamp: str
    session_id: str
    app_member: str
    token: str = ""
    """The lease's fencing token ('': not fenced)."""
    maxlen: int | str = ""
    """The live stream's approximate cap ('': not mirrored)."""
    stream_ttl: int = 0
    unless_cancelled: str = ""
    """'1': refused once the invocation's cancel flag is set ('': whatever the flag)."""
    record: str = ""
    """An invocation record's JSON to save with its status before the event ('': none)."""
    status: str = ""
    state_pairs: dict[str, str] = pairs_field()
    app_state_pairs: dict[str, str] = pairs_field()
    user_state_pairs: dict[str, str] = pairs_field()
    answers: list[str] = many_field()
    publishes: list[Any] = many_field()
    """Jobs to publish once the event is stored, one :meth:`~.jobs.JobPublish.flat` after
    another: a remote call goes out in the commit that makes it, not one round trip later."""


APPEND = LuaScript(AppendEvent, f"""
local function publish_all()
  local i = publishes_first
  while i < publishes_first + publishes_count do i = publish_job(jobs, watch, i) end
end
if redis.call('EXISTS', meta) == 0 then
  return redis.error_reply('{NOT_FOUND}')
end
if token ~= '' then
  local holder = redis.call('GET', lease)
  if not holder then
    return redis.error_reply('{STALE} the lease ' .. lease .. ' has expired or was released')
  end
  if holder ~= token then
    return redis.error_reply('{STALE} the lease ' .. lease .. ' is held by another owner')
  end
end
local stored = redis.call('SISMEMBER', event_ids, event_id) == 1
if unless_cancelled ~= '' and redis.call('EXISTS', cancel_flag) == 1 then
  -- Stored already (by an earlier try, or by this very append run once before, its reply
  -- lost and the request sent again): 2, so the caller holds it, and seals its calls too.
  if stored then return 2 end
  return redis.error_reply('{CANCELLED}')
end
if record ~= '' then
  save_record(record_key, stream, statuses, record, status, stream_ttl, maxlen, false)
end
if stored then
  publish_all()  -- stored by an earlier try: its jobs are out unless that try was plain
  return 0
end
for i = answers_first, answers_first + answers_count - 1 do
  if redis.call('SISMEMBER', answered, ARGV[i]) == 1 then
    return redis.error_reply('{ANSWERED} ' .. ARGV[i])
  end
end
local bad = wrong_type({{{_LUA_SESSION_TYPES}}})
if bad then return bad end
redis.call('ZADD', user_sessions, timestamp, session_id)
redis.call('ZADD', app_sessions, timestamp, app_member)
redis.call('RPUSH', events, event_json)
redis.call('SADD', event_ids, event_id)
redis.call('HSET', meta, 'last_update_time', timestamp)
hset_pairs(state, state_pairs_first, state_pairs_count)
hset_pairs(app_state, app_state_pairs_first, app_state_pairs_count)
hset_pairs(user_state, user_state_pairs_first, user_state_pairs_count)
if answers_count > 0 then
  redis.call('SADD', answered, unpack(ARGV, answers_first, answers_first + answers_count - 1))
end
if maxlen ~= '' then
  redis.call('XADD', stream, 'MAXLEN', '~', maxlen, '*',
    'kind', 'event', 'event', event_json, 'partial', '0')
  redis.call('EXPIRE', stream, stream_ttl)
end
publish_all()
return 1
""", functions=[LUA_WRONG_TYPE, _LUA_HSET_PAIRS, LUA_SAVE_RECORD, LUA_PUBLISH_JOB])
"""Append an event: 1 when appended, 0 when its id was already appended (the record, if
any, is saved either way, and so are the jobs sent: each at most once per attempt), 2 when
its id was already appended and the invocation is cancelled since (with
``unless_cancelled``; nothing written). Refused (an error reply, nothing written) when the
session is gone, the lease is not held with the token, the event's invocation was cancelled
(with ``unless_cancelled``), or the event answers a call already answered."""


def create_operands(
    app_name: str, user_id: str, session_id: str, now: str, encoded: dict[str, str],
    unless: str | None = None, create_id: str = "",
) -> CreateSession:
    """The operands of :data:`CREATE`: the session's identity, creation time and state.

    ``unless``: see :attr:`CreateSession.unless`.
    """
    app_delta, user_delta, session_state = split_state_delta(encoded)
    return CreateSession(
        **session_keys(app_name, user_id, session_id), unless=unless,
        session_seq=keys.app_session_seq(app_name), session_id=session_id, app_name=app_name,
        user_id=user_id, now=now, app_member=app_member(user_id, session_id), create_id=create_id,
        state_pairs=session_state, app_state_pairs=app_delta, user_state_pairs=user_delta)


def check_created_if_absent(reply: Any) -> None:
    """Raise the error a queued create-if-absent replied with (an existing session is none)."""
    if isinstance(reply, Exception) and not str(reply).startswith(EXISTS):
        raise reply


def encode_state(state: dict[str, Any]) -> dict[str, str]:
    """JSON-encode every value of a (non-temp) state mapping, naming the key on failure."""
    encoded: dict[str, str] = {}
    for key, value in state.items():
        if not isinstance(key, str):
            raise TypeError(f"State keys must be strings, got {key!r} ({type(key).__name__}).")
        if key.startswith(State.TEMP_PREFIX):
            continue
        encoded[key] = encode_value(value, what=f"state key {key!r}")
    return encoded


def app_member(user_id: str, session_id: str) -> str:
    """Member of the per-app session index for one session."""
    return dumps([user_id, session_id])


def score(timestamp: float, *, what: str) -> str:
    """Return a timestamp as an exact decimal string for Redis (sorted-set score, hash field)."""
    value = float(timestamp)
    if not math.isfinite(value):
        raise ValueError(f"{what} must be a finite number, got {timestamp!r}.")
    return repr(value)


@dataclass(frozen=True, kw_only=True)
class DeleteSession(Operands):
    """Operands of :data:`DELETE`: a session's keys, its queue, and its unfinished invocations."""

    meta: str = key_field()
    state: str = key_field()
    events: str = key_field()
    event_ids: str = key_field()
    answered: str = key_field()
    invocations: str = key_field()
    """The session's index of invocations (``keys.session_invocations``)."""
    busy: str = key_field()
    held: str = key_field()
    queue: str = key_field()
    """The session's work queue: it outlives the session, for its items to end their invocations."""
    user_sessions: str = key_field()
    app_sessions: str = key_field()
    fence: str = key_field()
    wake: str | None = optional_key_field()
    """The orchestrators' wake stream (with ``announce``)."""
    announce: str = ""
    """'1': post a wake-up on ``wake`` for what was queued ('': none, the caller drains)."""
    app_name: str
    user_id: str
    session_id: str
    app_member: str
    fence_ttl: int
    records: list[str] = many_field()
    """The record key of each invocation the index lists."""
    items: list[str] = many_field()
    """For each of ``records``, the ``session_deleted`` work item ending it."""


DELETE = LuaScript(DeleteSession, """
-- Messages held behind a busy invocation go back to the queue's head, in order: the
-- orchestrator fails each start (its session is gone) as any other queued one.
local hint = ''
while true do
  local item = redis.call('RPOP', held)
  if not item then break end
  redis.call('LPUSH', queue, item)
  local ok, decoded = pcall(cjson.decode, item)
  if ok and type(decoded) == 'table' then hint = tostring(decoded['invocation_id']) end
end
local queued = hint ~= '' or redis.call('LLEN', queue) > 0
-- An invocation that ran (paused, or running) gets an item that ends it: nothing else would.
for i = 0, records_count - 1 do
  local status = redis.call('HGET', ARGV[records_first + i], 'status')
  if status == 'paused' or status == 'running' then
    local item = ARGV[items_first + i]
    redis.call('RPUSH', queue, item)
    if hint == '' then hint = tostring(cjson.decode(item)['invocation_id']) end
    queued = true
  end
end
redis.call('DEL', meta, state, events, event_ids, answered, invocations, busy, held)
redis.call('ZREM', user_sessions, session_id)
redis.call('ZREM', app_sessions, app_member)
redis.call('EXPIRE', fence, fence_ttl)
if queued and announce == '1' then
  redis.call('XADD', wake, '*', 'app', app_name, 'user', user_id, 'session', session_id, 'inv', hint)
  return 1
end
return 0
""")
"""Delete a session (its data, its index entries, its lists of invocations and of held
messages) and, in the same step, queue what ends its unfinished invocations: its held
messages back on its queue, a ``session_deleted`` item for each invocation paused or running,
and a wake-up for them (1; 0 when nothing was queued). Its work queue stays for those items;
the fencing counter expires after ``fence_ttl`` seconds."""
