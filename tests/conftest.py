"""Test-wide setup: real (network) model calls are blocked; a real redis-server on demand."""

from __future__ import annotations

import os

import pytest
import redis.asyncio as aioredis

from orchestrator.backends.memory.stores import InMemoryInvocationStore
from orchestrator.backends.redis.invocation_store import RedisInvocationStore
from orchestrator.models.guard import set_model_requests_allowed
from tests.support.backends import (  # noqa: F401  (shared fixtures)
    backend,
    celery_stack,
    celery_stack_plain,
)
from tests.support.redis_server import find_redis_server, redis_server
from tests.support.reply_loss import losing_client


@pytest.fixture(autouse=True, scope="session")
def _block_real_model_requests():
    set_model_requests_allowed(False)
    yield
    set_model_requests_allowed(True)


# --- a real redis-server for the Redis-backed services (never a fake) -----------------------


@pytest.fixture(scope="session")
def redis_url():
    """URL of a throw-away redis-server started for this test session.

    Skips the tests that need it when no ``redis-server`` binary is installed, except in CI
    (``CI`` set), where a missing binary is a failure: tests/run.sh installs it.
    """
    binary = find_redis_server()
    if binary is None:
        if os.environ.get("CI"):
            pytest.fail(
                "CI is set but no redis-server binary is on PATH; the Redis-backed tests "
                "must run in CI (tests/run.sh installs redis-server with apt-get).",
                pytrace=False,
            )
        pytest.skip(
            "redis-server is not installed (apt-get install redis-server, or run "
            "tests/run.sh); skipping the tests that need a real Redis."
        )
    with redis_server(binary) as url:
        yield url


@pytest.fixture
async def redis_client(redis_url):
    """A client of the test redis-server; the database is flushed before each test."""
    client = aioredis.Redis.from_url(redis_url, decode_responses=True)
    await client.flushdb()
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
async def proxied(redis_url, redis_client):
    """(proxy, client): a project client of the test Redis (flushed) through a proxy that can
    lose one reply (``tests/support/reply_loss.py``)."""
    async with losing_client(redis_url) as pair:
        yield pair


@pytest.fixture(params=["memory", "redis"])
async def store(request):
    """An invocation store of each back-end: in memory, and over the test redis-server."""
    if request.param == "memory":
        yield InMemoryInvocationStore()
        return
    client = aioredis.Redis.from_url(request.getfixturevalue("redis_url"), decode_responses=True)
    await client.flushdb()
    yield RedisInvocationStore(client)
    await client.aclose()
