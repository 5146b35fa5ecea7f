"""Helpers shared by the Redis-backed services: the one JSON codec, client setup, decoding."""

from __future__ import annotations

import json
from functools import cache
from typing import Any

import redis
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import EqualJitterBackoff
from redis.connection import HiredisRespSerializer
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry
from redis.utils import HIREDIS_AVAILABLE

from config import get_settings
from orchestrator.backends.redis import keys
from orchestrator.backends.redis.keys import PREFIX
from orchestrator.distributed.models import InvocationStatus
from orchestrator.errors import register_infrastructure_errors

_JSON_SEPARATORS = (",", ":")


# Lua fragments that scripts of several services start with (each defines one local
# function). Every check runs before the first write: Redis does not roll a script back.
LUA_WRONG_TYPE = """
local function wrong_type(expected)
  for i, want in ipairs(expected) do
    local have = redis.call('TYPE', KEYS[i]).ok
    if have ~= 'none' and have ~= want then
      return redis.error_reply('ADK_WRONGTYPE key ' .. KEYS[i] .. ' holds a ' .. have ..
        ', expected a ' .. want .. '; nothing was written')
    end
  end
  return nil
end
"""
"""``wrong_type(types)``: an error reply if ``KEYS[i]`` exists with another type than
``types[i]``, else nil."""

STATUSES_MAXLEN = 32
"""Entries kept (at least) in an invocation's status-only stream: a waiter reads only new ones."""

# In the enum's order: the script's text (hence its SHA) must be the same in every process.
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
  local session = '{PREFIX}session:{{' .. app .. ':' .. key_part(decoded['user_id']) .. ':' ..
    key_part(decoded['session_id']) .. '}}:invocations'
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
set expires ``ttl`` after its last write."""

LUA_SAVE_RECORD = LUA_INDEX_STATUS + LUA_INDEX_RECORD + f"""
local function save_record(record_key, stream_key, statuses_key, record, status, ttl, maxlen,
                           only_if_new)
  local decoded = cjson.decode(record)
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
  redis.call('XADD', stream_key, 'MAXLEN', '~', maxlen, '*',
    'kind', 'status', 'status', status, 'record', record)
  redis.call('EXPIRE', stream_key, ttl)
  redis.call('XADD', statuses_key, 'MAXLEN', '~', {STATUSES_MAXLEN}, '*',
    'kind', 'status', 'status', status, 'record', record)
  redis.call('EXPIRE', statuses_key, ttl)
  -- Both indexes move the record from the status it had (read once, above) to its new one.
  local clock = redis.call('TIME')
  index_status(record_key, status, previous, only_if_new, clock)
  index_record(decoded, status, previous, ttl, clock)
  return true
end
"""
"""``save_record(...)``: store an invocation record (``only_if_new``: unless one exists, then
false and nothing written) and add its status entry to the invocation's live stream and to
its status-only stream (``keys.invocation_record_keys`` names the three keys); file it
in the lists of invocations (:data:`LUA_INDEX_RECORD`) in the same step."""


def dumps(value: Any) -> str:
    """Encode a value with the project's single JSON codec (compact, UTF-8, no NaN/inf).

    Raises ``TypeError`` (not JSON-serialisable) or ``ValueError`` (NaN/infinity, circular
    reference) from ``json.dumps``; callers re-raise with the offending key named.
    """
    return json.dumps(value, separators=_JSON_SEPARATORS, ensure_ascii=False, allow_nan=False)


def loads(raw: str | bytes) -> Any:
    """Decode a value written by :func:`dumps`."""
    return json.loads(raw)


def encode_value(value: Any, *, what: str) -> str:
    """Encode ``value`` with :func:`dumps`; on failure raise an error naming ``what``.

    ``what`` describes the value, e.g. ``"state key 'user:x'"``. The error keeps the type
    ``json.dumps`` raised (``TypeError`` or ``ValueError``).
    """
    try:
        return dumps(value)
    except TypeError as exc:
        raise TypeError(
            f"The value of {what} is not JSON-serialisable ({type(value).__name__}): {exc}. "
            "Redis-backed services store values as JSON; use JSON types "
            "(dict, list, str, int, float, bool, None)."
        ) from exc
    except ValueError as exc:
        raise ValueError(
            f"The value of {what} cannot be stored as JSON: {exc}. Redis-backed services store "
            "values as strict JSON (no NaN/infinity, no circular references)."
        ) from exc


def text(value: str | bytes) -> str:
    """Return a Redis reply item as ``str`` (clients may or may not decode responses)."""
    return value.decode() if isinstance(value, bytes) else value


def decode_hash(raw: dict[Any, Any]) -> dict[str, Any]:
    """Decode an HGETALL reply whose values were written by :func:`dumps`."""
    return {text(field): loads(value) for field, value in raw.items()}


def pairs_to_dict(flat: list[Any]) -> dict[Any, Any]:
    """Turn a flat ``[field, value, field, value, ...]`` reply (HGETALL in Lua) into a dict."""
    return dict(zip(flat[0::2], flat[1::2], strict=True))


def resolve_client(
    redis_url: str | None, client: aioredis.Redis | None, *, owner: str
) -> tuple[aioredis.Redis, bool]:
    """Return ``(client, owned)``: the given client, or a new one for the URL.

    Without either, the URL comes from the settings (``ADK_CELERY_REDIS_URL``); ``owned`` is
    True when the client was created here and must be closed by its owner.
    """
    if client is not None:
        if redis_url is not None:
            raise ValueError(f"{owner}: pass either redis_url or client, not both.")
        return client, False
    url = redis_url or get_settings().redis_url
    if not url:
        raise ValueError(
            f"{owner} needs a Redis connection: pass redis_url=..., client=..., or set "
            "ADK_CELERY_REDIS_URL."
        )
    return connect(url), True


# A dropped or timed-out Redis connection (BusyLoadingError, Redis loading its data after a
# restart, is a ConnectionError too) is never an agent's or a tool's outcome.
register_infrastructure_errors(RedisConnectionError, RedisTimeoutError)


# How the project's Redis clients ride out a dropped connection or a Redis restart: redis-py
# reconnects and sends the command again, up to RETRY_ATTEMPTS times, after a backoff that
# doubles from RETRY_BASE_SECONDS up to RETRY_CAP_SECONDS, with jitter (half of each wait is
# random, so the connections of many worker threads do not all come back in the same
# instant). A command that finds Redis down keeps trying for about 5 to 9.5 s in all
# (measured: 7 s) and goes on within about 1 s once Redis is back (measured: 0.05 to 0.5 s
# after a restart); past that it raises ConnectionError. A restart is ridden out; a Redis
# that stays down is still reported, to code that waits or hands the work back (DESIGN.md
# §5.4). redis-py applies the policy to opening the connection as well, inside each
# attempt: a command whose connection dropped while it was under way can wait several
# times longer before it gives up.
#
# Retrying is only safe for commands that may run twice: a connection that drops after the
# command reached Redis and before its reply came back leaves the outcome unknown, and the
# retry sends it again. The commands sent through these clients allow it:
# - the Lua scripts (appends, lease steps, result stores, enqueue steps) are idempotent by
#   design: appends dedupe by event id, results are first-writer-wins, a record is created
#   only if absent;
# - a lease taken by a first run that lost its reply is seen as busy by the second run: the
#   session waits for that lease to expire (the TTL), and nothing is lost or run twice;
# - a duplicate RPUSH of a work item, XADD of a wake-up or LPUSH of a job only wakes or runs
#   something that checks first (drains, jobs skip what is already answered: at-least-once);
# - reads (HGETALL, XREAD, XRANGE, ...) change nothing; an XREADGROUP whose reply was lost
#   leaves its entries pending in the group, where the reclaim loop takes them over;
# - MULTI/EXEC transactions are whole and made of the steps above; WATCHed ones raise
#   WatchError instead of retrying (redis-py), as they must.
# TimeoutError is retried too: a reply later than the socket timeout has the same unknown
# outcome as a dropped connection. The health check pings a connection that sat idle
# longer than HEALTH_CHECK_SECONDS before reusing it, so a connection that died while idle
# is replaced before a command is sent on it; TCP keepalive finds dead peers of idle
# connections.
RETRY_ATTEMPTS = 12
"""Times a command is sent again after a connection or timeout error (see the comment above)."""
RETRY_BASE_SECONDS = 0.05
"""First backoff before a retry (about; each doubles, half of it random)."""
RETRY_CAP_SECONDS = 1.0
"""Longest backoff between two attempts: Redis back, a client is back within about that."""
HEALTH_CHECK_SECONDS = 10
"""A pooled connection idle for longer is checked with PING before it is used again."""


def client_options(*, asynchronous: bool = True) -> dict[str, Any]:
    """The reconnect and retry options of the project's Redis clients (see the comment above).

    Keyword arguments for ``Redis.from_url`` (``redis.asyncio`` or, with ``asynchronous=False``,
    synchronous ``redis``): a fresh ``Retry`` and error list each call, since redis-py copies
    them into every connection.
    """
    retry_class = AsyncRetry if asynchronous else Retry
    return {
        "retry": retry_class(EqualJitterBackoff(cap=RETRY_CAP_SECONDS, base=RETRY_BASE_SECONDS),
                             RETRY_ATTEMPTS),
        # The errors ``retry`` supports by default, listed again: older redis-py releases
        # retry a pipeline only for the errors named here.
        "retry_on_error": [RedisConnectionError, RedisTimeoutError],
        "health_check_interval": HEALTH_CHECK_SECONDS,
        "socket_keepalive": True,
    }


def connect(url: str) -> aioredis.Redis:
    """An asyncio Redis client for ``url`` (replies decoded), packing commands with hiredis.

    It reconnects and retries a command after a connection error, with bounded exponential
    backoff (see :func:`client_options`), so a Redis restart is ridden out.

    redis-py's asyncio connections build every command in Python even when hiredis is
    installed (its synchronous ones use hiredis's packer); an append script's fifty-odd
    arguments cost more to pack than Redis takes to run the script. The connections here use
    the synchronous client's hiredis packer, so the bytes sent are the same, built in C.
    """
    client = aioredis.Redis.from_url(url, decode_responses=True, **client_options())
    if HIREDIS_AVAILABLE:
        pool = client.connection_pool
        pool.connection_class = _hiredis_packing(pool.connection_class)
    return client


def connect_sync(url: str, **options: Any) -> redis.Redis:
    """A synchronous Redis client for ``url`` (replies decoded) with :func:`connect`'s policy.

    ``options`` go to ``redis.Redis.from_url`` too (``socket_timeout`` for long blocking
    reads, for example).
    """
    return redis.Redis.from_url(url, decode_responses=True,
                                **{**client_options(asynchronous=False), **options})


@cache
def _hiredis_packing(connection_class: type) -> type:
    """``connection_class`` (TCP, TLS or Unix socket) with hiredis's command packer."""

    class HiredisPacking(connection_class):  # type: ignore[misc, valid-type]
        _packer = HiredisRespSerializer()

        def pack_command(self, *args: Any) -> list[bytes]:
            return self._packer.pack(*args)

    HiredisPacking.__name__ = HiredisPacking.__qualname__ = f"HiredisPacking{connection_class.__name__}"
    return HiredisPacking


class RedisClientOwner:
    """Mixin for Redis-backed services: holds the client, closes it only if it made it."""

    def __init__(self, redis_url: str | None = None, *, client: aioredis.Redis | None = None) -> None:
        self._client, self._owns_client = resolve_client(
            redis_url, client, owner=type(self).__name__
        )

    @property
    def client(self) -> aioredis.Redis:
        """The Redis client this service talks through."""
        return self._client

    async def aclose(self) -> None:
        """Close the Redis client if this service created it (a given client is left open)."""
        if self._owns_client:
            await self._client.aclose()
