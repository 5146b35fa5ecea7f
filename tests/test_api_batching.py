"""Commands of many API requests in one pipeline (workers/api/batching.py), on a real redis-server.

What requests ask for during one turn of the event loop goes to Redis together; each still
gets exactly its own replies, and an error in one's reply is raised to that one only.
"""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from workers.api.batching import TurnBatcher


@pytest.fixture
async def client(redis_url):
    redis = aioredis.Redis.from_url(redis_url, decode_responses=True)
    await redis.flushdb()
    try:
        yield redis
    finally:
        await redis.aclose()


@pytest.fixture
def pipelines(client, monkeypatch):
    """The number of pipelines sent through ``client``."""
    sent = [0]
    real = client.pipeline

    def counting(*args, **kwargs):
        sent[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(client, "pipeline", counting)
    return sent


async def test_requests_of_one_turn_share_one_pipeline_and_each_gets_its_own_replies(client, pipelines):
    for n in range(20):
        await client.rpush(f"list-{n}", *range(n + 1))
    batcher = TurnBatcher(client)

    async def ask(n: int) -> list[object]:
        return await batcher.run(lambda pipe: (pipe.llen(f"list-{n}"), pipe.lindex(f"list-{n}", 0)))

    replies = await asyncio.gather(*(ask(n) for n in range(20)))
    assert replies == [[n + 1, "0"] for n in range(20)]
    assert pipelines[0] == 1
    assert await ask(4) == [5, "0"]  # alone: a pipeline of its own commands
    assert pipelines[0] == 2


async def test_an_error_in_a_reply_is_raised_to_its_request_only(client):
    await client.set("a-string", "x")
    await client.rpush("a-list", "y")
    batcher = TurnBatcher(client)
    wrong, right = await asyncio.gather(
        batcher.run(lambda pipe: pipe.llen("a-string")),
        batcher.run(lambda pipe: pipe.llen("a-list")),
        return_exceptions=True)
    assert isinstance(wrong, ResponseError) and "WRONGTYPE" in str(wrong)
    assert right == [1]


async def test_a_request_that_left_does_not_disturb_the_others(client):
    await client.rpush("a-list", "y")
    batcher = TurnBatcher(client)
    gone = asyncio.ensure_future(batcher.run(lambda pipe: pipe.llen("a-list")))
    stays = asyncio.ensure_future(batcher.run(lambda pipe: pipe.lindex("a-list", 0)))
    await asyncio.sleep(0)
    gone.cancel()
    assert await stays == ["y"]
    assert gone.cancelled()


async def test_enqueues_of_one_turn_go_in_one_transaction_each_with_its_own_outcome(redis_url, client,
                                                                                  monkeypatch):
    from fastapi import HTTPException

    from config import Settings
    from orchestrator.backends.redis import keys as redis_keys
    from workers.api.backend import Backend

    backend = Backend(Settings(redis_url=redis_url, apps=""))
    try:
        services = await backend.services()
        await client.script_flush()  # a Redis that restarted: every request loads and sends again
        sent = []
        real = services.redis.pipeline

        def counting(*args, **kwargs):
            sent.append(kwargs.get("transaction"))
            return real(*args, **kwargs)

        monkeypatch.setattr(services.redis, "pipeline", counting)
        for turn in ("scripts flushed", "scripts loaded"):
            sent.clear()
            asked = [{"app_name": "chat", "user_id": f"u{n}", "new_message": f"hi {n}",
                      "invocation_id": f"e-{turn[8]}{n}"} for n in range(10)]
            missing = {"app_name": "chat", "user_id": "u", "session_id": "s-none", "new_message": "hi"}
            done = await asyncio.gather(*(backend.enqueue(a) for a in asked),
                                        backend.enqueue(missing, session_must_exist=True),
                                        return_exceptions=True)
            assert [(r.invocation_id, r.user_id, r.status.value) for r in done[:10]] == [
                (a["invocation_id"], a["user_id"], "queued") for a in asked], turn
            assert isinstance(done[10], HTTPException) and done[10].status_code == 404
            for record in done[:10]:
                assert await client.llen(redis_keys.session_queue("chat", record.user_id, record.session_id)) == 1
            assert await client.keys("*s-none*") == []
        assert sent == [True]  # with the scripts loaded: one transaction for the whole turn
    finally:
        await backend.aclose()
        backend.close()
