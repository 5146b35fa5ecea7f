"""Commands of the asyncio Redis clients packed by hiredis, in C (a latency trick).

redis-py's asyncio connections build every command in Python even when hiredis is
installed (its synchronous ones use hiredis's packer); an append script's fifty-odd
arguments cost more to pack than Redis takes to run the script. :func:`pack_with_hiredis`
gives a client's connections the synchronous client's hiredis packer, so the bytes sent are
the same, built in C.

It leans on redis-py internals (a connection's ``pack_command``, ``HiredisRespSerializer``):
kept in this one module, switched off by ``ADK_CELERY_REDIS_HIREDIS_PACKING=false``, and
skipped (the client packs as redis-py does) when those internals are not there as this was
written against (:func:`internals_present`; ``tests/test_library_internals.py`` fails loudly
then). Its gain is measured by ``bench/library_tricks.py``.
"""

from __future__ import annotations

import inspect
from functools import cache
from typing import Any

import redis.asyncio as aioredis
from redis.connection import HiredisRespSerializer
from redis.utils import HIREDIS_AVAILABLE


@cache
def internals_present() -> bool:
    """True if hiredis is installed and redis-py has the internals this module uses."""
    pack = getattr(HiredisRespSerializer, "pack", None)
    command = getattr(aioredis.connection.AbstractConnection, "pack_command", None)
    return HIREDIS_AVAILABLE and callable(pack) and callable(command) and (
        "args" in inspect.signature(command).parameters)


def pack_with_hiredis(client: aioredis.Redis) -> None:
    """Have ``client``'s connections pack commands with hiredis (if that is possible)."""
    if internals_present():
        pool = client.connection_pool
        pool.connection_class = hiredis_packing(pool.connection_class)


@cache
def hiredis_packing(connection_class: type) -> type:
    """``connection_class`` (TCP, TLS or Unix socket) with hiredis's command packer."""

    class HiredisPacking(connection_class):  # type: ignore[misc, valid-type]
        _packer = HiredisRespSerializer()

        def pack_command(self, *args: Any) -> list[bytes]:
            return self._packer.pack(*args)

    HiredisPacking.__name__ = HiredisPacking.__qualname__ = f"HiredisPacking{connection_class.__name__}"
    return HiredisPacking
