"""Redis out of reach under the API: 503 ``Redis unavailable, retry``, never a 500.

The API application runs in process (httpx's ASGI transport) over a redis-server of this
test's own, which it stops under open requests and streams. No orchestrator runs: the
invocations stay queued, so their follows are open when Redis goes. A run already accepted
is not told to retry: it is followed on (``tests/test_api_run_outage.py`` restarts Redis
under runs of real processes).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from config import Settings
from tests.apps import APP_SPECS
from tests.support.redis_server import RedisServer
from workers.api.app import create_app

GUARD = 60.0
"""Longest wait for one answer (the client retries a command for some 10 s before it gives up)."""
UNAVAILABLE = {"detail": "Redis unavailable, retry"}


class _Guarded(httpx.ASGITransport):
    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return await asyncio.wait_for(super().handle_async_request(request), GUARD)


@pytest.fixture
def server() -> Any:
    redis = RedisServer()
    redis.start()
    yield redis
    redis.close()


@pytest.fixture
async def http(server: RedisServer) -> AsyncIterator[tuple[Any, httpx.AsyncClient]]:
    app = create_app(Settings(redis_url=server.url, apps=APP_SPECS))
    async with httpx.AsyncClient(transport=_Guarded(app=app), base_url="http://127.0.0.1") as client:
        yield app, client
    backend = app.state.backend
    await backend.aclose()
    backend.close()


def _data(body: str) -> list[tuple[str | None, Any]]:
    """(event name, data) of each SSE frame."""
    frames = []
    for block in body.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "data" in fields:
            frames.append((fields.get("event"), json.loads(fields["data"])))
    return frames


async def test_routes_answer_503_follows_end_with_an_error_frame_and_accepted_runs_go_on(
        http, server, caplog):
    app, client = http
    sessions = "/apps/chat/users/u/sessions"
    session = (await client.post(sessions)).json()["id"]
    queued = await client.post(f"{sessions}/{session}/invocations", json={"newMessage": "hi"})
    invocation = queued.json()["invocationId"]
    run = {"appName": "chat", "userId": "u", "sessionId": session,
           "newMessage": {"role": "user", "parts": [{"text": "hi"}]}}
    follow = asyncio.create_task(client.get(f"/apps/chat/invocations/{invocation}/stream"))
    run_sse = asyncio.create_task(client.post("/run_sse", json=run))
    hub = app.state.backend._hub
    while hub is None or len(hub._watches) < 2:  # both streams followed
        await asyncio.sleep(0.02)
        hub = app.state.backend._hub

    caplog.set_level(logging.WARNING)
    server.stop()
    requests = [
        client.get(f"{sessions}/{session}"),
        client.post(sessions),
        client.get(f"/apps/chat/invocations/{invocation}"),
    ]
    enqueues = [  # Redis may have stored them: each 503 names the id to send again with
        client.post(f"{sessions}/{session}/invocations", json={"newMessage": "hi"}),
        client.post("/run", json=run),  # DirectRun's
        client.post("/run", json=run, headers={"content-type": "application/vnd.x+json"}),
        client.post("/run_sse", json=run),
    ]
    replies = await asyncio.gather(*requests, *enqueues)
    for reply in replies[:len(requests)]:
        assert (reply.status_code, reply.json()) == (503, UNAVAILABLE), reply.request.url
    for reply in replies[len(requests):]:
        told = reply.json()
        assert reply.status_code == 503 and told.keys() == {"detail", "invocationId"}, told
        assert told["detail"].startswith(UNAVAILABLE["detail"]), told
        assert f'"invocationId": "{told["invocationId"]}"' in told["detail"], told
    for reply in replies:
        assert reply.headers["retry-after"] == "1"

    followed = await follow
    assert followed.status_code == 200
    assert _data(followed.text)[-1] == ("error", {"error": "Redis unavailable, retry"})
    # The reader told every follower at once: the run it accepted is followed on, its
    # client not told to send it again (the invocation would run twice).
    assert not run_sse.done()
    run_sse.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await run_sse

    # One line each, no traceback.
    assert not [r for r in caplog.records if r.exc_info]
    messages = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("GET /apps/chat/invocations/") and
               "Redis unavailable (ConnectionError" in m for m in messages)
    assert any(m.startswith("Run e-") and "the run was accepted: following it on" in m
               for m in messages), messages
