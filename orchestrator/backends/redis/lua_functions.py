"""Lua functions several scripts include: type checks, saving a record, storing a result.

Each fragment defines one or more local functions (nothing runs at its inclusion); a script
lists the fragments it uses (see :mod:`.lua`). Every check runs before the first write:
Redis does not roll a script back.
"""

from __future__ import annotations

from orchestrator.backends.redis import keys
from orchestrator.backends.redis.keys import PREFIX
from orchestrator.distributed.models import InvocationStatus

LUA_WRONG_TYPE = """
local function wrong_type(expected)
  for _, pair in ipairs(expected) do
    local name, want = pair[1], pair[2]
    local have = redis.call('TYPE', name).ok
    if have ~= 'none' and have ~= want then
      return redis.error_reply('ADK_WRONGTYPE key ' .. name .. ' holds a ' .. have ..
        ', expected a ' .. want .. '; nothing was written')
    end
  end
  return nil
end
"""
"""``wrong_type({{key, type}, ...})``: an error reply naming the first ``key`` that exists with
another type than its ``type``, else nil."""

STATUS_ENTRY_RECORD_MAX = 16384
"""Largest record (JSON bytes) a status entry carries; a larger one is read by its watcher."""

STATUSES_MAXLEN = 32
"""Entries kept (at least) in an invocation's status-only stream: a waiter reads only new ones."""

# In the enum's order: the script's text (hence its SHA) must be the same in every process.
# Live status -> its index key; both functions below read it (truthy: the status is live).
_LIVE_STATUSES = ", ".join(f"['{status.value}'] = '{keys.invocations_in(status.value)}'"
                           for status in InvocationStatus if status in InvocationStatus.LIVE)

# For metrics: the index of live invocations by status, and a count of the ones that ended
# (a record leaving a live status for a finished one, or created in one). Keys not passed in
# KEYS: the metrics need one instance (standalone Redis, or these keys' shard).
LUA_INDEX_STATUS = f"""
local function index_status(record_key, status, previous, created, clock)
  local live = {{{_LIVE_STATUSES}}}
  if previous and previous ~= status and live[previous] then
    redis.call('ZREM', live[previous], record_key)
  end
  if live[status] then
    redis.call('ZADD', live[status], clock[1], record_key)
  elseif created or (previous and live[previous]) then
    redis.call('HINCRBY', '{keys.stats()}', 'finished:' .. status, 1)
  end
end
"""
"""``index_status(record_key, status, previous, created, clock)``: keep
``keys.invocations_in`` and the ``finished:<status>`` counters of ``keys.stats`` up
to date for a record saved in ``status`` that was in ``previous`` (nil: new, or unknown);
``clock``: Redis ``TIME``."""

INDEX_SWEEP = 2
"""How many of a session's oldest listed invocations each new one checks for expiry."""

LUA_INDEX_RECORD = f"""
local function key_part(value)
  return (string.gsub(value, '[%%{{}}:]', {{['%'] = '%25', ['{{'] = '%7B', ['}}'] = '%7D', [':'] = '%3A'}}))
end
local function index_record(decoded, status, previous, ttl, clock)
  for _, field in ipairs({{'app_name', 'invocation_id', 'user_id', 'session_id'}}) do
    if type(decoded[field]) ~= 'string' then return end  -- not a record: nothing to list
  end
  local app = key_part(decoded['app_name'])
  local id = decoded['invocation_id']
  local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
  local by_status = '{PREFIX}app:{{' .. app .. '}}:invocations:'
  if previous and previous ~= status then
    redis.call('ZREM', by_status .. key_part(previous), id)
  end
  local listed = by_status .. key_part(status)
  redis.call('ZADD', listed, now, id)
  redis.call('ZREMRANGEBYSCORE', listed, '-inf', string.format('(%.6f', now - tonumber(ttl)))
  redis.call('EXPIRE', listed, ttl)
  local session_hash = '{PREFIX}session:{{' .. app .. ':' .. key_part(decoded['user_id']) ..
    ':' .. key_part(decoded['session_id']) .. '}}'
  local session = session_hash .. ':invocations'
  if not ({{{_LIVE_STATUSES}}})[status] and redis.call('EXISTS', session_hash) == 0 then
    -- Its session was deleted (the invocation ends with it): the session's list went with
    -- it and is not made again, for a new session of that id to find.
    return
  end
  local created = tonumber(decoded['created_at']) or now
  if redis.call('ZADD', session, 'NX', created, id) == 1 then
    for _, oldest in ipairs(redis.call('ZRANGE', session, 0, {INDEX_SWEEP - 1})) do
      if redis.call('EXISTS', '{PREFIX}invocation:{{' .. app .. ':' .. key_part(oldest) .. '}}') == 0 then
        redis.call('ZREM', session, oldest)
      end
    end
  end
  redis.call('EXPIRE', session, ttl)
end
"""
"""``index_record(decoded, status, previous, ttl, clock)``: file a saved record in the lists of
invocations (``keys.app_invocations``, ``keys.session_invocations``, whose names
it builds the same way): out of ``previous``'s status set, into ``status``'s scored by now,
into its session's set scored by creation. Entries whose record has expired are dropped:
those of a status set older than ``ttl`` at each save into it (a record expires ``ttl`` after
its last save), the oldest :data:`INDEX_SWEEP` of a session's set when it gains one; each
set expires ``ttl`` after its last write. A finished record whose session does not exist (it
was deleted) is not filed in the session's set."""

LUA_SAVE_RECORD = LUA_INDEX_STATUS + LUA_INDEX_RECORD + f"""
local function save_record(record_key, stream_key, statuses_key, record, status, ttl, maxlen,
                           only_if_new, shown)
  local decoded = cjson.decode(record)
  local entry = record
  if shown and shown ~= '' then entry = shown end
  local previous = nil
  if only_if_new then
    if redis.call('HSETNX', record_key, 'record', record) == 0 then return false end
  else
    previous = redis.call('HGET', record_key, 'status')
    if not previous then  -- a record saved before statuses were kept beside it
      local old = redis.call('HGET', record_key, 'record')
      if old then previous = cjson.decode(old)['status'] end
    end
    redis.call('HSET', record_key, 'record', record)
  end
  redis.call('HSET', record_key, 'status', status)
  redis.call('EXPIRE', record_key, ttl)
  -- The live stream's entry is the status alone: its followers show statuses, and the few
  -- that need the record read it (a copy per status was a quarter of an invocation's keys).
  -- The status-only stream's entry carries the record, for waiters (no read), unless it is
  -- large (a long message, a big state delta): a waiter reads the record then.
  redis.call('XADD', stream_key, 'MAXLEN', '~', maxlen, '*', 'kind', 'status', 'status', status)
  redis.call('EXPIRE', stream_key, ttl)
  local fields = {{'kind', 'status', 'status', status}}
  if string.len(entry) <= {STATUS_ENTRY_RECORD_MAX} then
    fields[5], fields[6] = 'record', entry
  end
  redis.call('XADD', statuses_key, 'MAXLEN', '~', {STATUSES_MAXLEN}, '*', unpack(fields))
  redis.call('EXPIRE', statuses_key, ttl)
  -- Both indexes move the record from the status it had (read once, above) to its new one.
  local clock = redis.call('TIME')
  index_status(record_key, status, previous, only_if_new, clock)
  index_record(decoded, status, previous, ttl, clock)
  return true
end
"""
"""``save_record(...)``: store an invocation record (``only_if_new``: unless one exists, then
false and nothing written) and add its status entry to the invocation's live stream (the
status alone) and to its status-only stream (with the record as ``shown``, if given, unless
over :data:`STATUS_ENTRY_RECORD_MAX` bytes; ``keys.invocation_record_keys`` names the three
keys); file it in the lists of invocations (:data:`LUA_INDEX_RECORD`) in the same step."""

LUA_PUT_RESULT = """
local function result_refused(results, call_id)
  local existing = redis.call('HGET', results, call_id)
  if existing then
    local decoded = cjson.decode(existing)
    if decoded['response'] ~= nil and decoded['response'] ~= cjson.null then return true end
    -- A paused branch's turn (its events, no response) is the branch's run: its own calls
    -- wait for answers, and once they come the orchestrator continues the branch itself and
    -- answers this call with an event, never with a stored result. So any other result
    -- for the call is another run of the same job (a copy delivered again, claimed while
    -- the first still ran), paused or ended: its events (new ids) would be committed beside
    -- the first turn's, whose calls would stay open. The first stored turn wins.
    if type(decoded['events']) == 'table' and #decoded['events'] > 0 then return true end
  end
  return false
end
local function put_result(results, watch, jobs, call_id, result, ttl, member, final)
  if result_refused(results, call_id) then return false end
  redis.call('HSET', results, call_id, result)
  redis.call('EXPIRE', results, ttl)
  redis.call('ZREM', watch, member)
  if final == '1' then
    -- The job's dispatch (its whole broker message) serves only to find or send the job
    -- again, which an answered call never needs: most of an invocation's jobs hash.
    redis.call('HDEL', jobs, 'c:' .. call_id)
  end
  return true
end
"""
"""``result_refused(results, call_id)``: true if ``put_result`` would store no result for
the call (whatever the result).
``put_result(results, watch, jobs, call_id, result, ttl, member, final)``: store a call's
result in the invocation's results hash unless a final one is there, or a paused branch's
turn (then false, nothing written; a tool's pending placeholder may be replaced), and end
the watchdog's watch over the call (its ``member`` of the job watch index ``watch``); a
``final`` ('1') result also drops the call's dispatch from the jobs hash ``jobs`` (field
``c:<call id>``, see :mod:`.jobs`)."""
