"""The orchestrators' keeper of paused invocations: a pause longer than the record TTL is kept.

Every orchestrator runs one on its event loop (beside the job watchdog): every
:func:`keep_interval` seconds it renews the keys of invocations paused for more than half
the TTL (:func:`~orchestrator.backends.redis.keep_alive.keep_paused_alive`). Several
orchestrators doing so at once renew the same keys twice, which changes nothing.
"""

from __future__ import annotations

import asyncio
import logging

import redis.asyncio as aioredis

from orchestrator.backends.redis.keep_alive import KEEP_BATCH, keep_paused_alive
from orchestrator.errors import is_infrastructure_error

logger = logging.getLogger(__name__)

_MAX_INTERVAL = 600.0


def keep_interval(ttl_seconds: float) -> float:
    """How often the keeper looks: a quarter of the TTL, at most every 10 minutes.

    An invocation is renewed once it has been paused for half the TTL, so it is renewed
    between half and three quarters of the TTL after its last renewal, never after it.
    """
    return max(0.25, min(ttl_seconds / 4, _MAX_INTERVAL))


class PausedKeeper:
    """Renews paused invocations' keys on the running loop until stopped."""

    def __init__(self, client: aioredis.Redis, ttl_seconds: int) -> None:
        self._client = client
        self._ttl = ttl_seconds
        self._interval = keep_interval(ttl_seconds)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start looking (on the running loop)."""
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        """Stop looking."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            try:
                while await keep_paused_alive(self._client, self._ttl) >= KEEP_BATCH:
                    pass  # a full batch may have left more due
            except Exception as error:
                if not is_infrastructure_error(error):
                    logger.exception("Renewing paused invocations failed")
                else:  # Redis away: the next look renews them (a quarter TTL is room enough)
                    logger.warning("Renewing paused invocations failed (%s); retrying", error)
