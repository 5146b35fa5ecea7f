"""A wake consumer's look at its own pending list: wake-ups delivered to it that no drain follows.

The project's Redis clients send a command again when the connection drops after Redis ran it
and before its reply came back (:mod:`.connection`). An ``XREADGROUP ... >`` run twice that way
delivers its entries to the consumer (they are pending on it) and the second run never
returns them; an ``XAUTOCLAIM`` run twice claims its entries to the consumer and the second
run finds them no longer idle. Either way the consumer holds entries it does not know of, and
only ``XAUTOCLAIM`` would take them up again, once idle for the lease's time to live.

:func:`claim_unfollowed` finds them: ``XPENDING`` for this consumer (a read that changes
nothing) lists its entries, those the consumer follows or gave up on are left out, and the
rest are claimed again by ``XCLAIM`` to the same consumer, which returns their fields. The
consumer calls it every :data:`LOOK_SECONDS` and after a failed read, never per wake-up.

Neither an entry acknowledged meanwhile nor one claimed by another orchestrator meanwhile is
taken in: ``XCLAIM`` skips an entry no longer pending, and its ``min-idle-time`` (the least
idle time ``XPENDING`` reported) skips one whose idle time another claim reset.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

import redis.asyncio as aioredis

LOOK_SECONDS = 1.0
"""How often a consumer looks at its own pending list (and at once after a failed read)."""

_PAGE = 100
"""Pending entries listed per ``XPENDING`` round trip."""


async def claim_unfollowed(
    client: aioredis.Redis,
    stream: str,
    group: str,
    consumer: str,
    followed: Callable[[], Collection[str]],
    given_up: set[str],
) -> list[tuple[str, dict[str, str]]]:
    """Claim again the entries pending on ``consumer`` it neither follows nor gave up on.

    ``followed`` gives the ids the consumer's drains answer for; it is called once the whole
    pending list is read, so a drain that ended meanwhile (its entries acknowledged) is not
    counted. ``given_up`` (entries a drain left pending after a bug: the reclaim after idle
    time takes those up) is pruned to the ids still pending on the consumer. Returns the
    claimed entries with their fields.
    """
    listed: dict[str, int] = {}
    start = "-"
    while True:
        page = await client.xpending_range(stream, group, start, "+", _PAGE,
                                           consumername=consumer)
        listed.update((row["message_id"], int(row["time_since_delivered"])) for row in page)
        if len(page) < _PAGE:
            break
        start = "(" + page[-1]["message_id"]
    given_up.intersection_update(listed)
    known = followed()
    orphans = [entry_id for entry_id in listed if entry_id not in known
               and entry_id not in given_up]
    if not orphans:
        return []
    least_idle = min(listed[entry_id] for entry_id in orphans)
    claimed = await client.xclaim(stream, group, consumer, least_idle, orphans)
    # Redis 6.2 answers an entry deleted while pending with a nil (never done here: entries
    # are acknowledged before they are deleted); 7.0 drops it from the pending list.
    return [(entry_id, fields) for entry_id, fields in claimed if entry_id and fields]
