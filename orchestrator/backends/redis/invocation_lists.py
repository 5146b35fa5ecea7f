"""Reading the lists of invocations from Redis (see :mod:`orchestrator.distributed.invocation_lists`).

The lists are sorted sets written in the same script that saves an invocation's record
(``lua_functions.LUA_SAVE_RECORD``): one per session (``keys.session_invocations``,
scored by creation) and one per app and status (``keys.app_invocations``, scored by the
last save). A page reads the sets' entries after the cursor, then their records, and keeps
the records that still exist and still match (a record may change between the two reads;
it is then in the list of its new status).
"""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis

from orchestrator.backends.redis import keys
from orchestrator.distributed.invocation_lists import InvocationPage, InvocationQuery, Position
from orchestrator.distributed.models import InvocationRecord, InvocationStatus

_Source = tuple[str, InvocationStatus | None]
"""A sorted set to read, and the status its records must have (None: the query's)."""

_Candidate = tuple[Position, InvocationStatus | None]


def _sources(query: InvocationQuery) -> list[_Source]:
    if query.of_session:
        assert query.user_id is not None and query.session_id is not None
        return [(keys.session_invocations(query.app_name, query.user_id, query.session_id), None)]
    statuses = [query.status] if query.status is not None else list(InvocationStatus)
    return [(keys.app_invocations(query.app_name, status.value), status) for status in statuses]


async def list_invocations(client: aioredis.Redis, query: InvocationQuery) -> InvocationPage:
    """The page of invocations ``query`` asks for."""
    sources = _sources(query)
    wanted = query.limit + 1  # one more than the page: is there a next page?
    found: list[tuple[Position, InvocationRecord]] = []
    after = query.after
    while len(found) < wanted:
        count = wanted - len(found)
        batch = await _candidates(client, sources, after, count)
        records = await _records(client, query.app_name, [p.invocation_id for p, _ in batch])
        for (position, status), record in zip(batch, records, strict=True):
            if record is None or (status is not None and record.status is not status):
                continue  # expired, or moved to another status since the sets were read
            if query.status is None or record.status is query.status:
                found.append((position, record))
        if len(batch) < count:
            break  # every set is read to its end
        after = batch[-1][0]
    return query.page(found)


async def _candidates(client: aioredis.Redis, sources: list[_Source], after: Position | None,
                      count: int) -> list[_Candidate]:
    """The first ``count`` entries after ``after`` of all ``sources`` merged, newest first."""
    async with client.pipeline(transaction=True) as pipe:
        for key, _ in sources:
            if after is None:
                pipe.zrevrange(key, 0, count - 1, withscores=True)
            else:
                score = repr(after.score)
                pipe.zrangebyscore(key, score, score, withscores=True)  # ties, by id
                pipe.zrevrangebyscore(key, f"({score}", "-inf", start=0, num=count, withscores=True)
        replies = await pipe.execute()
    merged: dict[str, _Candidate] = {}
    per_source = 1 if after is None else 2
    for index, (_, status) in enumerate(sources):
        for reply in replies[index * per_source:(index + 1) * per_source]:
            for member, score in reply:
                position = Position(float(score), _text(member))
                if after is None or after.precedes(*position):
                    merged.setdefault(position.invocation_id, (position, status))
    return sorted(merged.values(), key=lambda candidate: candidate[0], reverse=True)[:count]


async def _records(client: aioredis.Redis, app_name: str,
                   invocation_ids: list[str]) -> list[InvocationRecord | None]:
    if not invocation_ids:
        return []
    async with client.pipeline(transaction=False) as pipe:
        for invocation_id in invocation_ids:
            pipe.hget(keys.invocation(app_name, invocation_id), "record")
        raw = await pipe.execute()
    return [InvocationRecord.model_validate_json(value) if value else None for value in raw]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
