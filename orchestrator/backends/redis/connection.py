"""The project's Redis clients: how they are made, and how they ride out a Redis restart."""

from __future__ import annotations

from typing import Any

import redis
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import EqualJitterBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry


def resolve_client(
    redis_url: str | None, client: aioredis.Redis | None, *, owner: str
) -> tuple[aioredis.Redis, bool]:
    """Return ``(client, owned)``: the given client, or a new one for the URL.

    One of the two is required (the process role that builds the service has the URL in its
    settings); ``owned`` is True when the client was created here and must be closed by its
    owner.
    """
    if client is not None:
        if redis_url is not None:
            raise ValueError(f"{owner}: pass either redis_url or client, not both.")
        return client, False
    if not redis_url:
        raise ValueError(f"{owner} needs a Redis connection: pass redis_url=... or client=....")
    return connect(redis_url), True


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
# retry sends it again, its caller seeing only the second run's reply. So each command sent
# through these clients answers a second run as its first (tests/test_lost_replies*.py
# lose one reply of each):
# - appends dedupe by event id and reply 0 (the caller still takes the event), or 2 when the
#   invocation was cancelled since; results are first-writer-wins and answers stored byte
#   for byte already count as taken; a record is created only if absent;
# - steps that take something name their call (the session's lease: TAKE's taker id; a
#   job's publication: its publish id; a saved artifact version: its save id; a streamed
#   entry: its publish id) or find what they took (the next work item: work items are
#   unique), and a second run replies what the first took;
# - a duplicate RPUSH of a work item, XADD of a wake-up or LPUSH of a job only wakes or runs
#   something that checks first (drains, jobs skip what is already answered: at-least-once);
# - reads (HGETALL, XREAD, XRANGE, ...) change nothing; entries an XREADGROUP or XAUTOCLAIM
#   delivered with a reply that was lost are taken in by the consumer's look at its own
#   pending list (wakeup_pending.py) within about a second;
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


def is_unix_socket(url: str) -> bool:
    """True for a ``unix://`` URL (a local socket: no TCP options apply)."""
    return url.startswith("unix:")


def client_options(*, asynchronous: bool = True, url: str = "") -> dict[str, Any]:
    """The reconnect and retry options of the project's Redis clients (see the comment above).

    Keyword arguments for ``Redis.from_url`` (``redis.asyncio`` or, with ``asynchronous=False``,
    synchronous ``redis``): a fresh ``Retry`` and error list each call, since redis-py copies
    them into every connection. TCP keepalive for a TCP ``url`` (a socket's connection class
    refuses the option).
    """
    retry_class = AsyncRetry if asynchronous else Retry
    options: dict[str, Any] = {
        "retry": retry_class(EqualJitterBackoff(cap=RETRY_CAP_SECONDS, base=RETRY_BASE_SECONDS),
                             RETRY_ATTEMPTS),
        # The errors ``retry`` supports by default, listed again: older redis-py releases
        # retry a pipeline only for the errors named here.
        "retry_on_error": [RedisConnectionError, RedisTimeoutError],
        "health_check_interval": HEALTH_CHECK_SECONDS,
    }
    if not is_unix_socket(url):
        options["socket_keepalive"] = True
    return options


def connect(url: str) -> aioredis.Redis:
    """An asyncio Redis client for ``url`` (replies decoded).

    It reconnects and retries a command after a connection error, with bounded exponential
    backoff (see :func:`client_options`), so a Redis restart is ridden out.
    """
    return aioredis.Redis.from_url(url, decode_responses=True, **client_options(url=url))


def connect_sync(url: str, **options: Any) -> redis.Redis:
    """A synchronous Redis client for ``url`` (replies decoded) with :func:`connect`'s policy.

    ``options`` go to ``redis.Redis.from_url`` too (``socket_timeout`` for long blocking
    reads, for example).
    """
    return redis.Redis.from_url(url, decode_responses=True,
                                **{**client_options(asynchronous=False, url=url), **options})


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
