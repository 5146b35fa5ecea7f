"""What a Redis session write runs: the create and append Lua scripts, and their operands.

Both scripts check everything before their first write (Redis does not roll a script back),
and reply with one of the error codes below when they refuse.
"""

from __future__ import annotations

import math
from typing import Any

from orchestrator.backends.redis import keys
from orchestrator.backends.redis.codec import dumps, encode_value
from orchestrator.backends.redis.lua_functions import LUA_SAVE_RECORD, LUA_WRONG_TYPE
from orchestrator.sessions.base_session_service import split_state_delta
from orchestrator.sessions.state import State

# Error codes the scripts reply with (the rest of the message is for humans).
NOT_FOUND = "ADK_SESSION_NOT_FOUND"
EXISTS = "ADK_SESSION_EXISTS"
STALE = "ADK_STALE_SESSION"
ANSWERED = "ADK_ALREADY_ANSWERED"

HSET_CHUNK = 256
"""Field/value pairs per HSET inside the scripts (keeps ``unpack`` far below Lua's limits)."""

# Helpers shared by both scripts. Every check runs before the first write: Redis does not
# roll a script back, so a script that fails must fail before it has written anything.
_LUA_HELPERS = LUA_WRONG_TYPE + f"""
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
  return first + 2 * count
end
"""

CREATE_LUA = _LUA_HELPERS + f"""
-- KEYS: 1 meta, 2 state, 3 events, 4 event ids, 5 user index, 6 app index, 7 app state,
--       8 user state, 9 app session sequence
-- ARGV: 1 session id, 2 app, 3 user, 4 now, 5 app-index member,
--       6 #session pairs, 7 #app pairs, 8 #user pairs, 9.. (field, JSON) pairs
if redis.call('EXISTS', KEYS[1]) == 1 then
  return redis.error_reply('{EXISTS}')
end
local bad = wrong_type({{'hash', 'hash', 'list', 'set', 'zset', 'zset', 'hash', 'hash',
                         'string'}})
if bad then return bad end
local seq = redis.call('INCR', KEYS[9])
redis.call('DEL', KEYS[2], KEYS[3], KEYS[4])
redis.call('HSET', KEYS[1], 'id', ARGV[1], 'app_name', ARGV[2], 'user_id', ARGV[3],
  'create_time', ARGV[4], 'last_update_time', ARGV[4], 'seq', seq)
local nxt = hset_pairs(KEYS[2], 9, tonumber(ARGV[6]))
nxt = hset_pairs(KEYS[7], nxt, tonumber(ARGV[7]))
hset_pairs(KEYS[8], nxt, tonumber(ARGV[8]))
redis.call('ZADD', KEYS[5], ARGV[4], ARGV[1])
redis.call('ZADD', KEYS[6], ARGV[4], ARGV[5])
return {{redis.call('HGETALL', KEYS[7]), redis.call('HGETALL', KEYS[8])}}
"""

APPEND_LUA = _LUA_HELPERS + LUA_SAVE_RECORD + f"""
-- KEYS: 1 meta, 2 state, 3 events, 4 event ids, 5 user index, 6 app index, 7 app state,
--       8 user state, 9 lease (fencing) or KEYS[1], 10 live stream (mirroring) or KEYS[1],
--       11 invocation record hash (a status to write first) or KEYS[1], 12 its status stream
--       or KEYS[1], 13 answered call ids (guarding answers) or KEYS[1]
-- ARGV: 1 event id, 2 event JSON, 3 timestamp, 4 session id, 5 app-index member,
--       6 fencing token or '', 7 stream maxlen or '', 8 stream ttl,
--       9 #session pairs, 10 #app pairs, 11 #user pairs, 12 record JSON or '', 13 status,
--       14 #answered call ids, 15.. pairs, then the call ids the event answers
-- Returns 1 when appended, 0 when the event id was already appended (the status, if any,
-- is written either way). With answered call ids, an event answering a call that already
-- has its answer in the session is refused, and nothing written.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return redis.error_reply('{NOT_FOUND}')
end
if ARGV[6] ~= '' then
  local holder = redis.call('GET', KEYS[9])
  if not holder then
    return redis.error_reply('{STALE} the lease ' .. KEYS[9] .. ' has expired or was released')
  end
  if holder ~= ARGV[6] then
    return redis.error_reply('{STALE} the lease ' .. KEYS[9] .. ' is held by another owner')
  end
end
if ARGV[12] ~= '' then
  save_record(KEYS[11], KEYS[10], KEYS[12], ARGV[12], ARGV[13], ARGV[8], ARGV[7], false)
end
if redis.call('SISMEMBER', KEYS[4], ARGV[1]) == 1 then
  return 0
end
local answers = tonumber(ARGV[14])
local first_answer = 15 + 2 * (tonumber(ARGV[9]) + tonumber(ARGV[10]) + tonumber(ARGV[11]))
for i = first_answer, first_answer + answers - 1 do
  if redis.call('SISMEMBER', KEYS[13], ARGV[i]) == 1 then
    return redis.error_reply('{ANSWERED} ' .. ARGV[i])
  end
end
local bad = wrong_type({{'hash', 'hash', 'list', 'set', 'zset', 'zset', 'hash', 'hash'}})
if bad then return bad end
redis.call('ZADD', KEYS[5], ARGV[3], ARGV[4])
redis.call('ZADD', KEYS[6], ARGV[3], ARGV[5])
redis.call('RPUSH', KEYS[3], ARGV[2])
redis.call('SADD', KEYS[4], ARGV[1])
redis.call('HSET', KEYS[1], 'last_update_time', ARGV[3])
local nxt = hset_pairs(KEYS[2], 15, tonumber(ARGV[9]))
nxt = hset_pairs(KEYS[7], nxt, tonumber(ARGV[10]))
hset_pairs(KEYS[8], nxt, tonumber(ARGV[11]))
if answers > 0 then
  redis.call('SADD', KEYS[13], unpack(ARGV, first_answer, first_answer + answers - 1))
end
if ARGV[7] ~= '' then
  redis.call('XADD', KEYS[10], 'MAXLEN', '~', ARGV[7], '*',
    'kind', 'event', 'event', ARGV[2], 'partial', '0')
  redis.call('EXPIRE', KEYS[10], ARGV[8])
end
return 1
"""


def create_keys(app_name: str, user_id: str, session_id: str) -> list[str]:
    """KEYS of :data:`CREATE_LUA` for one session."""
    return [
        *keys.session_storage_keys(app_name, user_id, session_id),
        keys.user_sessions(app_name, user_id),
        keys.app_sessions(app_name),
        keys.app_state(app_name),
        keys.user_state(app_name, user_id),
        keys.app_session_seq(app_name),
    ]


def create_args(
    app_name: str, user_id: str, session_id: str, now: str, encoded: dict[str, str]
) -> list[Any]:
    """ARGV of :data:`CREATE_LUA`: the session's identity, its creation time and its state."""
    app_delta, user_delta, session_state = split_state_delta(encoded)
    return [
        session_id, app_name, user_id, now, app_member(user_id, session_id),
        len(session_state), len(app_delta), len(user_delta),
        *flatten(session_state), *flatten(app_delta), *flatten(user_delta),
    ]


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


def flatten(mapping: dict[str, str]) -> list[str]:
    """Return ``[k1, v1, k2, v2, ...]``."""
    return [item for pair in mapping.items() for item in pair]


def app_member(user_id: str, session_id: str) -> str:
    """Member of the per-app session index for one session."""
    return dumps([user_id, session_id])


def score(timestamp: float, *, what: str) -> str:
    """Return a timestamp as an exact decimal string for Redis (sorted-set score, hash field)."""
    value = float(timestamp)
    if not math.isfinite(value):
        raise ValueError(f"{what} must be a finite number, got {timestamp!r}.")
    return repr(value)
