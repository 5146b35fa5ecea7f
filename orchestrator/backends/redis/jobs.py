"""The job journal in Redis: every remote call's job, from publication to its result.

Each invocation has a jobs hash (``keys.invocation_jobs``) with these fields per call:

- ``a:<call id>``: the attempt now out (1 at the first dispatch);
- ``c:<call id>``: the dispatch, JSON: its queue and its broker message (the exact list
  element kombu pushed, to find it in the queue; the job is read back from it), or the job
  itself when the message was sent by other means;
- ``d:<call id>``: its deadline (epoch seconds), if it has one;
- ``h:<call id>``: the digest of the attempt now out (:func:`job_digest` of its keyword
  arguments): a worker runs a job only if its own digest of what it received is this one;
- ``k:<call id>``: how many times its worker died while running it (the watchdog counts,
  once per attempt: ``x:<call id>:<attempt>`` marks an attempt counted);
- ``r:<call id>``: where the job is, JSON: ``{"state": "queued", "at": t}``, then
  ``{"state": "running", "worker": w, "beat": t, "attempt": n}`` once a worker claims it.

A watch index (a sorted set per invocations queue, ``keys.job_watch``) holds every
call whose job is out and unanswered, scored by when an orchestrator's watchdog should look
at it next. Publishing a job writes its journal fields, its index entry and its broker
message in one script (:data:`PUBLISH_ONCE`); storing any result for the call removes the
index entry (``PUT_RESULT_SCRIPT`` in :mod:`orchestrator.backends.redis.invocation_store`).
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

# KEYS: jobs hash, watch index. ARGV: call id, attempt, dispatch JSON, ttl seconds, index
# member, index score, now, deadline or '', the job's digest, number of commands, then each
# command as name, argument count, arguments (the message and its task-sent event, as kombu
# would send them: LPUSH, PUBLISH). Publishes only if the call's current attempt is the one
# before ARGV[2] (none for 1): a job goes out once per attempt, whoever submits it. 1 if
# published, else 0.
PUBLISH_ONCE = """
local id = ARGV[1]
local current = redis.call('HGET', KEYS[1], 'a:' .. id)
if (current or '0') ~= tostring(tonumber(ARGV[2]) - 1) then return 0 end
redis.call('HSET', KEYS[1], 'a:' .. id, ARGV[2], 'c:' .. id, ARGV[3], 'h:' .. id, ARGV[9],
  'r:' .. id, cjson.encode({state = 'queued', at = tonumber(ARGV[7])}))
if ARGV[8] ~= '' then redis.call('HSET', KEYS[1], 'd:' .. id, ARGV[8]) end
redis.call('EXPIRE', KEYS[1], ARGV[4])
redis.call('ZADD', KEYS[2], ARGV[6], ARGV[5])
local i = 11
for _ = 1, tonumber(ARGV[10]) do
  local name, count = ARGV[i], tonumber(ARGV[i + 1])
  redis.call(name, unpack(ARGV, i + 2, i + 1 + count))
  i = i + 2 + count
end
return 1
"""

# When the watchdog should look at a running job next: when it would be silent too long,
# or at its deadline (field d:<call id>) if that comes first.
_NEXT_LOOK = """
local function next_look(jobs, id, beat, lost_after)
  local at = tonumber(beat) + tonumber(lost_after)
  local deadline = redis.call('HGET', jobs, 'd:' .. id)
  if deadline and tonumber(deadline) < at then return deadline end
  return at
end
"""

# KEYS: cancel flag, results hash, jobs hash, watch index. ARGV: call id, attempt, worker,
# now, '1' for a branch job, index member, lost-after seconds, the job's digest. What a
# worker does before running a job:
# - 'forged': no job was published for the call, or not this one (another attempt number,
#   or its digest is not the one published for that attempt: another tool, agent, user,
#   arguments or state snapshot than the orchestrator dispatched);
# - 'superseded': a later attempt of the call was dispatched (a stale copy, or a replay);
# - 'cancelled': the invocation was cancelled;
# - 'answered': a final result is stored (for a branch, also a paused one with its events);
# - 'waiting': the tool already ran and left the call waiting for an answer from outside
#   (its pending placeholder is stored): running it again would only repeat its effects;
# - else 'run', having marked the job running on this worker.
CLAIM = _NEXT_LOOK + """
local id = ARGV[1]
local current = redis.call('HGET', KEYS[3], 'a:' .. id)
if not current then return 'forged' end
if tonumber(current) > tonumber(ARGV[2]) then return 'superseded' end
if tonumber(current) ~= tonumber(ARGV[2]) or redis.call('HGET', KEYS[3], 'h:' .. id) ~= ARGV[8]
then
  return 'forged'
end
if redis.call('EXISTS', KEYS[1]) == 1 then return 'cancelled' end
local done = redis.call('HGET', KEYS[2], id)
if done then
  local result = cjson.decode(done)
  if result['response'] ~= nil and result['response'] ~= cjson.null then return 'answered' end
  if ARGV[5] ~= '1' then return 'waiting' end
  if type(result['events']) == 'table' and #result['events'] > 0 then return 'answered' end
end
redis.call('HSET', KEYS[3], 'r:' .. id, cjson.encode({state = 'running',
  worker = ARGV[3], beat = tonumber(ARGV[4]), attempt = tonumber(ARGV[2])}))
redis.call('ZADD', KEYS[4], next_look(KEYS[3], id, ARGV[4], ARGV[7]), ARGV[6])
return 'run'
"""

# KEYS: jobs hash, watch index, cancel flag, results hash. ARGV: call id, attempt, worker,
# now, index member, lost-after seconds. A running job's sign of life (only while it is
# still this attempt's); its next look never goes past its deadline. 2 (and no beat) once
# the invocation was cancelled or the call answered (past its deadline, or by another
# attempt): the worker stops the job if it can.
BEAT = _NEXT_LOOK + """
if redis.call('EXISTS', KEYS[3]) == 1 or redis.call('HEXISTS', KEYS[4], ARGV[1]) == 1 then
  return 2
end
local current = redis.call('HGET', KEYS[1], 'a:' .. ARGV[1])
if current ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], 'r:' .. ARGV[1], cjson.encode({state = 'running',
  worker = ARGV[3], beat = tonumber(ARGV[4]), attempt = tonumber(ARGV[2])}))
if redis.call('ZSCORE', KEYS[2], ARGV[5]) then
  redis.call('ZADD', KEYS[2], next_look(KEYS[1], ARGV[1], ARGV[4], ARGV[6]), ARGV[5])
end
return 1
"""


SILENT_BEATS = 3
"""A running job that missed this many heartbeats is taken for lost (its worker died)."""


def silence_limit(heartbeat_seconds: float) -> float:
    """How long a running job may go without a sign of life before it counts as lost."""
    return SILENT_BEATS * max(0.05, heartbeat_seconds)


def queued_look_after(lost_after_seconds: float) -> float:
    """How often the watchdog looks at a queued job.

    Twice per lost-after period, so one whose message vanished is dispatched again within
    about that period.
    """
    return lost_after_seconds / 2


def watch_member(app_name: str, invocation_id: str, function_call_id: str) -> str:
    """The watch index member of one call."""
    return json.dumps([app_name, invocation_id, function_call_id], separators=(",", ":"))


def parse_member(member: str) -> tuple[str, str, str]:
    """(app, invocation, call) of a watch index member."""
    app_name, invocation_id, call_id = json.loads(member)
    return str(app_name), str(invocation_id), str(call_id)


def job_digest(kwargs: dict[str, Any], encoder: type[json.JSONEncoder] | None = None) -> str:
    """The digest of a job's keyword arguments: sha256 of their canonical JSON (keys sorted).

    Every field counts (app, user, session, invocation, call, tool or agent, arguments, state
    snapshot, attempt, ...), so a job differing in any of them from the one published is
    told apart. ``encoder``: for values the broker's JSON decoder may have turned into
    objects (kombu's ``{"__type__": ..., "__value__": ...}`` envelopes); encoding them back
    the same way gives the digest the publisher computed from plain JSON.
    """
    text = json.dumps(kwargs, cls=encoder, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def publish_args(
    call_id: str, attempt: int, dispatch: dict[str, Any], ttl: int, member: str, score: float,
    now: float, deadline: float | None, digest: str, commands: list[tuple[str, tuple[Any, ...]]],
) -> list[Any]:
    """ARGV of :data:`PUBLISH_ONCE` (``digest``: :func:`job_digest` of the job published)."""
    return [call_id, attempt, json.dumps(dispatch, separators=(",", ":")), ttl, member, score, now,
            "" if deadline is None else repr(deadline), digest, len(commands),
            *(part for name, args in commands for part in (name, len(args), *args))]


def dispatched_job(dispatch: dict[str, Any]) -> dict[str, Any]:
    """The job's keyword arguments (ToolJob or AgentJob JSON) from a dispatch entry.

    Read back from the broker message (Celery's task protocol 2: a JSON body, base64 encoded,
    of ``[args, kwargs, embed]``) when the entry keeps the message instead of the job.
    """
    if "job" in dispatch:
        return dict(dispatch["job"])
    message = json.loads(dispatch["message"])
    body = message["body"]
    if message.get("properties", {}).get("body_encoding") == "base64":
        body = base64.b64decode(body)
    _, kwargs, _ = json.loads(body)
    return dict(kwargs)
