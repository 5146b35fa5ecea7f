"""Following an invocation (``GET /apps/{app}/invocations/{id}/stream``) with ``Last-Event-ID``.

The API application runs in process (httpx's ASGI transport) over a real redis-server, with
an orchestrator and a worker process running the invocations.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from config import Settings
from tests.apps import APP_SPECS
from workers.api.app import create_app
from workers.api.watches import position_of

GUARD = 30.0
"""Longest wait for one answer: a follow that never ends fails instead of blocking the suite."""
FUTURE = "99999999999999-0"
"""An entry id no stream of today has reached."""


class _Guarded(httpx.ASGITransport):
    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return await asyncio.wait_for(super().handle_async_request(request), GUARD)


@contextlib.asynccontextmanager
async def guarded_client(app: Any) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the API application ``app`` run in process; its backend closed after."""
    async with httpx.AsyncClient(transport=_Guarded(app=app), base_url="http://127.0.0.1") as client:
        yield client
    backend = app.state.backend
    await backend.aclose()
    backend.close()


@pytest.fixture
async def http(celery_stack: dict[str, Any]) -> AsyncIterator[httpx.AsyncClient]:
    async with guarded_client(create_app(
            Settings(redis_url=celery_stack["url"], apps=APP_SPECS))) as client:
        yield client


def _frames(body: str) -> list[dict[str, Any]]:
    """Each SSE frame's fields (data as JSON)."""
    frames = []
    for block in body.split("\n\n"):
        if block.strip():
            frame = dict(line.split(": ", 1) for line in block.splitlines())
            frame["data"] = json.loads(frame["data"])
            frames.append(frame)
    return frames


async def test_an_id_past_the_end_of_a_live_stream_is_refused_not_followed_for_ever(http):
    enqueued = await http.post("/apps/approval/users/u/invocations", json={"newMessage": "pay"})
    assert enqueued.status_code == 202, enqueued.text
    invocation = enqueued.json()["invocationId"]
    stream = f"/apps/approval/invocations/{invocation}/stream"
    paused = _frames((await http.get(stream, params={"until": "paused"})).text)
    assert paused[-1]["data"] == {"status": "paused"}

    # Paused, so not over: it used to wait for entries past that id, its end dropped with them.
    refused = await asyncio.wait_for(http.get(stream, headers={"Last-Event-ID": FUTURE}), 10)
    assert refused.status_code == 422, refused.text
    assert refused.json()["detail"].startswith(f"Last-Event-ID: {FUTURE} is past the end")

    # An id the stream sent is followed on, to the end.
    follow = asyncio.create_task(http.get(stream, headers={"Last-Event-ID": paused[-1]["id"]}))
    status = (await http.get(f"/apps/approval/invocations/{invocation}")).json()
    answered = await http.post(f"/apps/approval/invocations/{invocation}/answer", json={
        "functionCallId": status["pendingCalls"][0], "response": {"approved": True}})
    assert answered.status_code == 202, answered.text
    rest = _frames((await follow).text)
    assert rest[-1]["data"] == {"status": "completed"}
    assert all(position_of(f["id"]) > position_of(paused[-1]["id"]) for f in rest)

    # Over: at or past the end, the follow ends at once with nothing more (as before).
    for position in (rest[-1]["id"], FUTURE):
        back = await http.get(stream, headers={"Last-Event-ID": position})
        assert (back.status_code, back.text) == (200, ""), position


def test_a_follow_right_after_an_answer_goes_on_to_what_the_answer_brings(celery_stack):
    # README's flow over HTTP: follow ?until=paused, answer, follow ?until=paused again.
    # Followed before the orchestrator took the answer (stopped here), the second follow used
    # to end at once with the pause the answer had just ended.
    import os
    import signal

    from tests.support.processes import stack_env
    from tests.test_api import start_api

    api, base = start_api(stack_env(celery_stack["url"], APP_SPECS))
    orchestrator = celery_stack["orchestrator"].proc.pid
    stopped = False
    try:
        with httpx.Client(base_url=base, timeout=GUARD) as http:
            enqueued = http.post("/apps/approval/users/u/invocations", json={"newMessage": "pay"})
            assert enqueued.status_code == 202, enqueued.text
            invocation = enqueued.json()["invocationId"]
            stream = f"/apps/approval/invocations/{invocation}/stream"
            paused = _frames(http.get(stream, params={"until": "paused"}).text)
            assert paused[-1]["data"] == {"status": "paused"}
            [call] = http.get(f"/apps/approval/invocations/{invocation}").json()["pendingCalls"]

            os.kill(orchestrator, signal.SIGSTOP)
            stopped = True
            answered = http.post(f"/apps/approval/invocations/{invocation}/answer", json={
                "functionCallId": call, "response": {"approved": True}})
            assert answered.status_code == 202, answered.text
            with http.stream("GET", stream, params={"until": "paused"}) as reply:
                lines = reply.iter_lines()
                # The replay reaches the pause: the follow has read its stream to the end
                # while the orchestrator could not take the answer.
                replayed = []
                for line in lines:
                    replayed.append(line)
                    if line == 'data: {"status":"paused"}':
                        break
                assert replayed[-1] == 'data: {"status":"paused"}', replayed
                os.kill(orchestrator, signal.SIGCONT)
                stopped = False
                rest = _frames("\n".join(lines).strip())
    finally:
        if stopped:
            os.kill(orchestrator, signal.SIGCONT)
        api.stop()
    assert rest and rest[-1]["data"] == {"status": "completed"}, rest
    assert [f["data"]["status"] for f in rest if f["event"] == "status"] == ["completed"], rest
    [reply_event] = [f["data"] for f in rest if f["event"] == "event"
                     and "text" in f["data"]["content"]["parts"][0]]
    assert reply_event["content"]["parts"][0]["text"] == "approval: {'approved': True}"
