"""The services' Redis client: commands packed by hiredis, bytes identical to redis-py's own."""

from __future__ import annotations

import pytest
from redis.exceptions import DataError

from orchestrator.backends.redis.connection import connect


async def test_values_reach_redis_exactly_as_redis_py_would_send_them(redis_client, redis_url):
    fast = connect(redis_url)
    try:
        values = ["plain", "é ünïcödé ✓", "", "with space", 7, -3, 0.1, 1e20, 1.5e-07, b"raw\x00bytes"]
        for i, value in enumerate(values):
            await fast.set(f"fast:{i}", value)
            await redis_client.set(f"ref:{i}", value)  # redis-py's pure-Python packing
        for i in range(len(values)):
            assert await redis_client.get(f"fast:{i}") == await redis_client.get(f"ref:{i}")
        # A script with many keys and arguments (how appends are sent) round-trips too.
        echoed = await fast.eval("return {KEYS[3], ARGV[2], #ARGV}", 3, "a", "b", "c", "x", "ÿ", 5)
        assert echoed == ["c", "ÿ", 3]
        with pytest.raises(DataError):  # as redis-py: booleans are refused, nothing is sent
            await fast.set("flag", True)  # type: ignore[arg-type]
    finally:
        await fast.aclose()


async def test_the_client_packs_with_hiredis_when_it_is_installed(redis_url):
    from redis.utils import HIREDIS_AVAILABLE

    client = connect(redis_url)
    try:
        await client.ping()
        name = client.connection_pool.connection_class.__name__
        assert name.startswith("HiredisPacking") is HIREDIS_AVAILABLE
    finally:
        await client.aclose()
