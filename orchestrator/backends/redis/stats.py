"""What the whole deployment looks like right now, read from Redis in one round trip (metrics).

Everything here is kept up to date by the scripts that do the work, at no extra round trip:
the index of live invocations by status and the ``finished:<status>`` and ``takeovers``
counters (``keys.invocations_in``, ``keys.stats``, written by the record-saving
and lease-taking scripts), the job watch index, the wake stream and the Celery queues. A
reader (the HTTP API's ``/metrics``) calls :func:`read_cluster_stats` when it is scraped.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis

from orchestrator.backends.redis import keys
from orchestrator.backends.redis.wakeups import GROUP
from orchestrator.distributed.models import InvocationStatus

PRIORITY_SEPARATOR = "\x06\x16"
"""kombu's Redis transport keeps a queue's messages of priority ``p`` > 0 in ``name + SEP + p``."""
PRIORITY_STEPS = (0, 3, 6, 9)
"""kombu's default priority steps (0: the list named as the queue)."""


def queue_lists(queue: str) -> list[str]:
    """The Redis lists kombu keeps a queue's messages in, one per priority step."""
    return [queue if step == 0 else f"{queue}{PRIORITY_SEPARATOR}{step}" for step in PRIORITY_STEPS]

STUCK_STATUSES = InvocationStatus.LIVE - {InvocationStatus.PAUSED}
"""Live statuses an invocation should not keep for long (a paused one may wait for days)."""
_LIVE = [status.value for status in InvocationStatus if status in InvocationStatus.LIVE]
"""The live statuses' names, in the enum's order (the order of the metrics' lines)."""


@dataclass
class ClusterStats:
    """A snapshot of the deployment, for gauges."""

    invocations: dict[str, int] = field(default_factory=dict)
    """Invocations now queued, running or paused."""
    stuck_invocations: dict[str, int] = field(default_factory=dict)
    """Of those queued or running, how many have not changed status for ``stuck_after`` s."""
    finished: dict[str, int] = field(default_factory=dict)
    """Invocations that ended, by finished status, since the counters began."""
    takeovers: int = 0
    """Sessions taken over with a previous holder's work still in progress."""
    queue_lengths: dict[str, int] = field(default_factory=dict)
    """Messages waiting in each Celery queue."""
    wakeups_waiting: int = 0
    """Wake-ups no orchestrator has read yet (the invocation queue's backlog)."""
    wakeups_claimed: int = 0
    """Wake-ups an orchestrator read and has not finished (its sessions are being drained)."""
    calls_out: int = 0
    """Remote calls whose job is out and unanswered (the watchdog's index)."""
    stuck_calls: int = 0
    """Of those, how many are overdue for a watchdog look by more than ``stuck_after`` s."""


async def read_cluster_stats(
    client: aioredis.Redis, *, invocations_queue: str, queues: list[str], record_ttl: float,
    stuck_after: float, now: float | None = None,
) -> ClusterStats:
    """Read a :class:`ClusterStats` (one pipeline); also drops expired index entries.

    ``queues``: the Celery queues to measure. ``record_ttl``: how long records live (an
    index entry older than that is a record that expired). ``now``: epoch seconds.
    """
    now = time.time() if now is None else now
    expired_before = now - record_ttl
    stuck_before = now - stuck_after
    wake = keys.wake_stream(invocations_queue)
    watch = keys.job_watch(invocations_queue)
    async with client.pipeline(transaction=False) as pipe:
        for status in _LIVE:
            index = keys.invocations_in(status)
            pipe.zremrangebyscore(index, "-inf", f"({expired_before}")
            pipe.zcard(index)
            pipe.zcount(index, "-inf", f"({stuck_before}")
        pipe.hgetall(keys.stats())
        for queue in queues:
            for key in queue_lists(queue):
                pipe.llen(key)
        pipe.xlen(wake)
        pipe.zcard(watch)
        pipe.zcount(watch, "-inf", f"({stuck_before}")
        pipe.xinfo_groups(wake)  # last: the one that may fail (no stream yet)
        *replies, groups = await pipe.execute(raise_on_error=False)
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    stats = ClusterStats()
    position = 0
    for status in _LIVE:
        _, count, stale = replies[position:position + 3]
        position += 3
        stats.invocations[status] = int(count)
        if status in STUCK_STATUSES:
            stats.stuck_invocations[status] = int(stale)
    counters = _decoded(replies[position])
    position += 1
    stats.finished = {name.removeprefix("finished:"): int(value) for name, value in counters.items()
                      if name.startswith("finished:")}
    stats.takeovers = int(counters.get("takeovers", 0))
    for queue in queues:
        stats.queue_lengths[queue] = sum(replies[position:position + len(PRIORITY_STEPS)])
        position += len(PRIORITY_STEPS)
    wake_length, stats.calls_out, stats.stuck_calls = replies[position:position + 3]
    if not isinstance(groups, Exception):  # no stream yet: nothing waits
        for group in groups or []:
            info = _decoded(group)
            if info.get("name") == GROUP:
                stats.wakeups_claimed = int(info.get("pending") or 0)
    stats.wakeups_waiting = max(0, int(wake_length) - stats.wakeups_claimed)
    return stats


def _decoded(raw: Any) -> dict[str, Any]:
    return {(k.decode() if isinstance(k, bytes) else str(k)):
            (v.decode() if isinstance(v, bytes) else v) for k, v in (raw or {}).items()}
