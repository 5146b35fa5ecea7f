"""A ``/run`` whose client goes away stops following its run, whichever door it came in by.

The API is served by uvicorn in this process, on a real socket, over a real redis-server; no
orchestrator runs, so an invocation stays queued and its ``/run`` would follow it for ever.
A raw socket sends the request and drops the connection, as a killed client does.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI

from config import Settings
from tests.apps import APP_SPECS
from tests.support.redis_server import free_port
from workers.api.app import create_app
from workers.api.direct_run import DirectRun

LETGO = 10.0
"""Longest wait for a follow to end once its client has gone."""


def _app(redis_url: str, *, direct: bool) -> FastAPI:
    app = create_app(Settings(redis_url=redis_url, apps=APP_SPECS))
    if not direct:  # FastAPI's route answers every /run
        app.user_middleware = [m for m in app.user_middleware if m.cls is not DirectRun]
    return app


async def _serve(app: FastAPI) -> AsyncIterator[str]:
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                           timeout_graceful_shutdown=1))
    task = asyncio.create_task(server.serve())
    while not server.started:
        assert not task.done(), task
        await asyncio.sleep(0.02)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task
        backend = app.state.backend
        await backend.aclose()
        backend.close()


@pytest.fixture
async def direct(redis_url: str, redis_client: Any) -> AsyncIterator[tuple[FastAPI, str]]:
    app = _app(redis_url, direct=True)
    async for address in _serve(app):
        yield app, address


@pytest.fixture
async def routed(redis_url: str, redis_client: Any) -> AsyncIterator[tuple[FastAPI, str]]:
    app = _app(redis_url, direct=False)
    async for address in _serve(app):
        yield app, address


def _followed(app: FastAPI) -> int:
    """How many invocation streams the server's reader follows now."""
    hub = app.state.backend._hub
    return 0 if hub is None else len(hub._watches)


async def _run_then_leave(app: FastAPI, address: str, content_type: str) -> None:
    """Send a /run that cannot end, wait until it follows its run, then drop the connection."""
    async with httpx.AsyncClient(base_url=f"http://{address}") as http:
        session = (await http.post("/apps/chat/users/u/sessions")).json()["id"]
    body = json.dumps({"appName": "chat", "userId": "u", "sessionId": session,
                       "newMessage": {"role": "user", "parts": [{"text": "hi"}]}}).encode()
    host, port = address.split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(f"POST /run HTTP/1.1\r\nHost: {address}\r\nContent-Type: {content_type}\r\n"
                 f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    await writer.drain()
    async with asyncio.timeout(LETGO):
        while _followed(app) == 0:
            await asyncio.sleep(0.02)
    writer.transport.abort()  # as a killed client: no more reads, no answer wanted
    async with asyncio.timeout(LETGO):
        while _followed(app):
            await asyncio.sleep(0.02)


async def test_the_fastapi_run_route_stops_following_when_its_client_goes(routed):
    await _run_then_leave(*routed, "application/json")


async def test_a_plus_json_run_stops_following_when_its_client_goes(direct):
    await _run_then_leave(*direct, "application/vnd.x+json")


async def test_direct_run_takes_every_json_type_fastapi_takes(direct):
    app, address = direct
    layer = app.middleware_stack
    while not isinstance(layer, DirectRun):
        layer = layer.app
    passed_on: list[str] = []
    inner = layer.app

    async def counted(scope: Any, receive: Any, send: Any) -> None:
        passed_on.append(dict(scope["headers"])[b"content-type"].decode())
        await inner(scope, receive, send)

    layer.app = counted
    body = json.dumps({"appName": "nope", "userId": "u", "sessionId": "s",
                       "newMessage": {"role": "user", "parts": [{"text": "hi"}]}})
    async with httpx.AsyncClient(base_url=f"http://{address}") as http:
        for content_type in ("application/json", "application/vnd.x+json",
                             "Application/Problem+JSON; charset=utf-8", "text/plain",
                             "application/jsonx"):
            reply = await http.post("/run", content=body, headers={"content-type": content_type})
            assert reply.status_code in (404, 422), (content_type, reply.text)
    assert passed_on == ["text/plain", "application/jsonx"]
