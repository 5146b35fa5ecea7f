"""The orchestrators' keeper of unfinished invocations: a wait longer than the record TTL is kept.

Every orchestrator runs one on its event loop (beside the job watchdog): every
:func:`keep_interval` seconds it renews the keys of invocations queued, running or paused
for more than half the TTL (:func:`~orchestrator.backends.redis.keep_alive.keep_unfinished_alive`).
Several orchestrators doing so at once renew the same keys twice, which changes nothing.
"""

from __future__ import annotations

import redis.asyncio as aioredis

from orchestrator.backends.redis.keep_alive import KEEP_BATCH, keep_unfinished_alive
from workers.periodic import Periodic

_MAX_INTERVAL = 600.0


def keep_interval(ttl_seconds: float) -> float:
    """How often the keeper looks: a quarter of the TTL, at most every 10 minutes.

    An invocation is renewed once it has waited for half the TTL, so it is renewed
    between half and three quarters of the TTL after its last renewal, never after it.
    """
    return max(0.25, min(ttl_seconds / 4, _MAX_INTERVAL))


class UnfinishedKeeper(Periodic):
    """Renews unfinished invocations' keys on the running loop until stopped."""

    what = "Renewing unfinished invocations"

    def __init__(self, client: aioredis.Redis, ttl_seconds: int) -> None:
        super().__init__(keep_interval(ttl_seconds))
        self._client = client
        self._ttl = ttl_seconds

    async def run_pass(self) -> None:
        """Renew every invocation due (Redis away: the next pass does; a quarter TTL is room)."""
        while await keep_unfinished_alive(self._client, self._ttl) >= KEEP_BATCH:
            pass  # a full batch may have left more due
