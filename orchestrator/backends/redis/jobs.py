"""The job journal in Redis: every remote call's job, from publication to its result.

Each invocation has a jobs hash (``keys.invocation_jobs``) with these fields per call:

- ``a:<call id>``: the attempt now out (1 at the first dispatch);
- ``c:<call id>``: the dispatch, JSON: its queue and its broker message (the exact list
  element kombu pushed, to find it in the queue; the job is read back from it), or the job
  itself when the message was sent by other means; dropped once the call is answered
  (``put_result``), as only a call still waiting is ever found or sent again;
- ``d:<call id>``: its deadline (epoch seconds by Redis's clock), if it has one;
- ``h:<call id>``: the digest of the attempt now out (:func:`job_digest` of its keyword
  arguments): a worker runs a job only if its own digest of what it received is this one;
- ``k:<call id>``: how many times its worker died while running it (the watchdog counts,
  once per attempt: ``x:<call id>:<attempt>`` marks an attempt counted);
- ``l:<call id>``: how many of its attempts' messages were lost before any worker started
  them (counted once per attempt: ``y:<call id>:<attempt>``);
- ``n:<call id>``: the name of the publication of the attempt now out (a publication run
  twice, after a lost reply, knows it went out);
- ``t:<call id>``: the attempt that was running when the call was answered by its timeout,
  until the watchdog has seen it end or its worker die (:mod:`workers.watchdog`);
- ``r:<call id>``: where the job is, JSON: ``{"state": "queued", "at": t}``, then
  ``{"state": "running", "worker": w, "beat": t, "attempt": n}`` once a worker claims it.

A watch index (a sorted set per invocations queue, ``keys.job_watch``) holds every
call whose job is out and unanswered, scored by when an orchestrator's watchdog should look
at it next. Publishing a job writes its journal fields, its index entry and its broker
message in one script (:data:`PUBLISH`); storing any result for the call removes the
index entry (``put_result`` in :mod:`.lua_functions`).
"""

from __future__ import annotations

import base64
import hashlib
import json
import uuid
from dataclasses import dataclass
from typing import Any

from orchestrator.backends.redis.lua import LuaScript, Operands, key_field, many_field


@dataclass(frozen=True, kw_only=True)
class JobPublish:
    """One attempt of a call's job, and the commands sending it (see :data:`LUA_PUBLISH_JOB`)."""

    call_id: str
    attempt: int
    dispatch: str
    """The dispatch entry's JSON (field ``c:<call id>``)."""
    ttl: int
    member: str
    """The call's member of the watch index (:func:`watch_member`)."""
    look_after: float
    """Seconds from now until the watchdog should look at the call first."""
    timeout: str
    """Seconds from now until the call's deadline, for a call that has none yet ('': none).
    A later attempt keeps the deadline its call got at the first."""
    digest: str
    """:func:`job_digest` of the job published."""
    publish_id: str = ""
    """A name of this publication, unique: run twice (a lost reply resent), the script
    finds its own and says published again ('': none)."""
    commands: tuple[Any, ...] = ()
    """The commands sending the job (its message and its task-sent event, as kombu would
    send them: LPUSH, PUBLISH), each as its name, its number of arguments, its arguments."""

    def flat(self) -> list[Any]:
        """The arguments :data:`LUA_PUBLISH_JOB` reads, in its order."""
        return [self.call_id, self.attempt, self.dispatch, self.ttl, self.member,
                self.look_after, self.timeout, self.digest, self.publish_id, len(self.commands),
                *self.commands]


LUA_PUBLISH_JOB = """
local function publish_job(jobs, watch, i)
  local call_id, attempt, dispatch, ttl = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local member, look_after, timeout = ARGV[i + 4], ARGV[i + 5], ARGV[i + 6]
  local digest, publish_id, first = ARGV[i + 7], ARGV[i + 8], i + 10
  local after = first + tonumber(ARGV[i + 9])
  local current = redis.call('HGET', jobs, 'a:' .. call_id)
  if (current or '0') ~= tostring(tonumber(attempt) - 1) then
    -- This very publication run a second time (its reply was lost and the client sent it
    -- again): published, by its first run (whose caller sends the message, if it must).
    if publish_id ~= '' and current == attempt and
        redis.call('HGET', jobs, 'n:' .. call_id) == publish_id then
      return after, 1
    end
    return after, 0
  end
  -- Times by Redis's clock, which the watchdog judges them by: taken from a publisher's own
  -- clock, the deadline and the first look moved by as much as that clock is off.
  local clock = redis.call('TIME')
  local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
  redis.call('HSET', jobs, 'a:' .. call_id, attempt, 'c:' .. call_id, dispatch,
    'h:' .. call_id, digest, 'r:' .. call_id, cjson.encode({state = 'queued', at = now}))
  if publish_id ~= '' then redis.call('HSET', jobs, 'n:' .. call_id, publish_id) end
  local deadline = redis.call('HGET', jobs, 'd:' .. call_id)
  if not deadline and timeout ~= '' then
    deadline = string.format('%.6f', now + tonumber(timeout))
    redis.call('HSET', jobs, 'd:' .. call_id, deadline)
  end
  local score = now + tonumber(look_after)
  if deadline and tonumber(deadline) < score then score = tonumber(deadline) end
  redis.call('EXPIRE', jobs, ttl)
  redis.call('ZADD', watch, string.format('%.6f', score), member)
  local j = first
  while j < after do
    local name, count = ARGV[j], tonumber(ARGV[j + 1])
    redis.call(name, unpack(ARGV, j + 2, j + 1 + count))
    j = j + 2 + count
  end
  return after, 1
end
"""
"""``publish_job(jobs, watch, i)``: journal a job and send it (a :class:`JobPublish` read
from ARGV at ``i``), only if the call's current attempt is the one before its attempt (none
for 1): a job goes out once per attempt, whoever submits it. Returns the ARGV index after
the job, and 1 if it was published, else 0. Used by :data:`PUBLISH`, and by the session's
append script for calls whose jobs go out with the event that makes them."""


@dataclass(frozen=True, kw_only=True)
class PublishOnce(Operands):
    """Operands of :data:`PUBLISH`: one job (:meth:`JobPublish.flat`) and where it is kept."""

    jobs: str = key_field()
    """The invocation's jobs hash (``keys.invocation_jobs``)."""
    watch: str = key_field()
    """The job watch index (``keys.job_watch``)."""
    job: list[Any] = many_field()


PUBLISH = LuaScript(PublishOnce, """
local _, published = publish_job(jobs, watch, job_first)
return published
""", functions=[LUA_PUBLISH_JOB])
"""Journal a job and send it, once per attempt (``publish_job``): 1 if published, else 0."""

# When the watchdog should look at a running job next: when it would be silent too long,
# or at its deadline (field d:<call id>) if that comes first. A running job's beats are
# stamped with Redis's clock, which the watchdog reads too: a worker whose own clock is
# behind is not taken for silent (and its deaths counted) while it beats.
_NEXT_LOOK = """
local function redis_now()
  local clock = redis.call('TIME')
  return tonumber(clock[1]) + tonumber(clock[2]) / 1000000
end
local function next_look(jobs, id, beat, lost_after)
  local at = tonumber(beat) + tonumber(lost_after)
  local deadline = redis.call('HGET', jobs, 'd:' .. id)
  if deadline and tonumber(deadline) < at then return deadline end
  return at
end
"""


@dataclass(frozen=True, kw_only=True)
class ReadClock(Operands):
    """Operands of :data:`CLOCK`: none."""


CLOCK = LuaScript(ReadClock, """
return redis.call('TIME')
""")
"""Redis's clock, read as a script is run: held back, as every script is, while Redis holds
writes back (``CLIENT PAUSE ... WRITE``, a failover), when the workers' beats (scripts too)
are held. A plain ``TIME`` would answer at once and the watchdog would judge silence that
only the pause made (see :mod:`workers.watchdog`)."""


@dataclass(frozen=True, kw_only=True)
class ClaimJob(Operands):
    """Operands of :data:`CLAIM`: a worker about to run an attempt of a call's job."""

    cancel: str = key_field()
    """The invocation's cancel flag."""
    results: str = key_field()
    jobs: str = key_field()
    watch: str = key_field()
    call_id: str
    attempt: int
    worker: str
    branch: str
    """'1' for a branch job, else ''."""
    member: str
    lost_after: float
    """Seconds a running job may stay silent (:func:`silence_limit`)."""
    digest: str
    """:func:`job_digest` of the job as the worker received it."""


CLAIM = LuaScript(ClaimJob, """
local current = redis.call('HGET', jobs, 'a:' .. call_id)
if not current then return 'forged' end
if tonumber(current) > tonumber(attempt) then return 'superseded' end
if tonumber(current) ~= tonumber(attempt) or redis.call('HGET', jobs, 'h:' .. call_id) ~= digest
then
  return 'forged'
end
if redis.call('EXISTS', cancel) == 1 then return 'cancelled' end
local done = redis.call('HGET', results, call_id)
if done then
  local result = cjson.decode(done)
  if result['response'] ~= nil and result['response'] ~= cjson.null then return 'answered' end
  if branch ~= '1' then return 'waiting' end
  if type(result['events']) == 'table' and #result['events'] > 0 then return 'answered' end
end
local now = redis_now()
-- A copy of this attempt (a replay, or kombu restoring a message whose run goes on past
-- the visibility timeout) while its run is alive: one run at a time. A run whose beats
-- stopped for lost_after is taken for dead, as the watchdog takes it.
local running = redis.call('HGET', jobs, 'r:' .. call_id)
if running then
  local run = cjson.decode(running)
  if run['state'] == 'running' and tonumber(run['attempt']) == tonumber(attempt)
      and now - tonumber(run['beat']) < tonumber(lost_after) then
    return 'running'
  end
end
redis.call('HSET', jobs, 'r:' .. call_id, cjson.encode({state = 'running',
  worker = worker, beat = now, attempt = tonumber(attempt)}))
redis.call('ZADD', watch, next_look(jobs, call_id, now, lost_after), member)
return 'run'
""", functions=[_NEXT_LOOK])
"""What a worker does before running a job:

- 'forged': no job was published for the call, or not this one (another attempt number,
  or its digest is not the one published for that attempt: another tool, agent, user,
  arguments or state snapshot than the orchestrator dispatched);
- 'superseded': a later attempt of the call was dispatched (a stale copy, or a replay);
- 'cancelled': the invocation was cancelled;
- 'answered': a final result is stored (for a branch, also a paused one with its events);
- 'waiting': the tool already ran and left the call waiting for an answer from outside
  (its pending placeholder is stored): running it again would only repeat its effects;
- 'running': this attempt is running elsewhere, its last beat younger than ``lost_after``
  (a copy of its message: a replay, or one kombu restored while the run went on);
- else 'run', having marked the job running on this worker.
"""


@dataclass(frozen=True, kw_only=True)
class Beat(Operands):
    """Operands of :data:`BEAT`: a running job's sign of life."""

    jobs: str = key_field()
    watch: str = key_field()
    cancel: str = key_field()
    results: str = key_field()
    call_id: str
    attempt: int
    worker: str
    member: str
    lost_after: float


BEAT = LuaScript(Beat, """
local ended = redis.call('EXISTS', cancel) == 1 or redis.call('HEXISTS', results, call_id) == 1
local current = redis.call('HGET', jobs, 'a:' .. call_id)
if current ~= attempt then
  if ended then return 2 end
  return 0
end
local now = redis_now()
redis.call('HSET', jobs, 'r:' .. call_id, cjson.encode({state = 'running',
  worker = worker, beat = now, attempt = tonumber(attempt)}))
if ended then return 2 end
if redis.call('ZSCORE', watch, member) then
  redis.call('ZADD', watch, next_look(jobs, call_id, now, lost_after), member)
end
return 1
""", functions=[_NEXT_LOOK])
"""A running job's sign of life, only while it is still this attempt's (1; else 0); its next
look never goes past its deadline. 2 once the invocation was cancelled or the call answered
(past its deadline, or by another attempt): the worker stops the job if it can. The beat of
an attempt still the call's is stamped all the same (and no look is set): a sync tool runs
on past its deadline, and the watchdog, which settles the task state of an attempt that
died after its call was answered by its timeout, must not take it for dead."""


@dataclass(frozen=True, kw_only=True)
class CountAttempt(Operands):
    """Operands of :data:`COUNT_ATTEMPT`: an attempt of a call found dead, or its message lost."""

    jobs: str = key_field()
    call_id: str
    attempt: str
    counter: str
    """Which count: :data:`DEATHS` (its worker died running it) or :data:`LOSSES` (its
    message was lost before any worker started it)."""


DEATHS = "k"
"""The count of attempts whose worker died running them (``k:<call id>``)."""
LOSSES = "l"
"""The count of attempts whose message was lost before any worker started them (``l:``)."""

COUNT_ATTEMPT = LuaScript(CountAttempt, """
local marks = {k = 'x:', l = 'y:'}
if redis.call('HSETNX', jobs, marks[counter] .. call_id .. ':' .. attempt, 1) == 1 then
  redis.call('HINCRBY', jobs, counter .. ':' .. call_id, 1)
end
return tonumber(redis.call('HGET', jobs, counter .. ':' .. call_id) or 0)
""")
"""Count this attempt of the call once in ``counter``, however many watchdogs find it (or
however many times this script runs: a lost reply resent); reply the count."""



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


def job_digest(kwargs: dict[str, Any]) -> str:
    """The digest of a job's keyword arguments: sha256 of their canonical JSON (keys sorted).

    Every field counts (app, user, session, invocation, call, tool or agent, arguments, state
    snapshot, attempt, ...), so a job differing in any of them from the one published is
    told apart. Both sides digest plain JSON: the publisher the job it sends, the worker the
    job as decoded from its message, which nothing turns into other objects on the way
    (``workers/wire_json.py``; a stock ``json`` message holding kombu's type envelope is
    refused before it is decoded, ``workers/consumer.py``). A value that is not JSON raises
    TypeError rather than being digested as something else.
    """
    text = json.dumps(kwargs, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def job_publish(
    *, call_id: str, attempt: int, dispatch: dict[str, Any], ttl: int, member: str,
    look_after: float, timeout: float | None, digest: str,
    commands: list[tuple[str, tuple[Any, ...]]],
) -> JobPublish:
    """What publishing one attempt of a job writes and sends.

    ``look_after``: seconds until the watchdog's first look; ``timeout``: seconds until the
    call's deadline (None: none), both from the publication, by Redis's clock (a first
    attempt's deadline is kept by the later ones); ``digest``: :func:`job_digest` of the job
    published; ``commands``: the Redis commands of its broker message.
    """
    return JobPublish(
        call_id=call_id, attempt=attempt, dispatch=json.dumps(dispatch, separators=(",", ":")),
        ttl=ttl, member=member, look_after=look_after,
        timeout="" if timeout is None else repr(float(timeout)), digest=digest,
        publish_id=uuid.uuid4().hex,
        commands=tuple(part for name, args in commands for part in (name, len(args), *args)))


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
