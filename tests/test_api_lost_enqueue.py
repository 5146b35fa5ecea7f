"""A run whose enqueue Redis stored but whose reply was lost: the 503 names its invocation.

Redis took the enqueue's transaction and then went away past the client's retries before its
reply came (the failpoint ``api.transaction.sent=error*1``, armed in this process, which runs
the API application through httpx's ASGI transport; an orchestrator and a worker process run
the invocations). The client never saw the id the server made: a 503 that only said "retry"
made it send the turn again as a new run, and the turn ran twice. The 503 now carries the
``invocationId`` it tried; sent again with it, the request gets that invocation, run once.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from config import Settings
from orchestrator import failpoints
from tests.apps import APP_SPECS
from tests.test_api_follows import guarded_client
from workers.api.app import create_app
from workers.enqueue import enqueue_scripts


@pytest.fixture
async def http(celery_stack: dict[str, Any]) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(Settings(redis_url=celery_stack["url"], apps=APP_SPECS))
    # The enqueue's scripts known to Redis: the transaction the failpoint follows stores the
    # run (a first one would find them missing, store nothing and be sent again).
    services = await app.state.backend.services()
    for source in enqueue_scripts(services.sessions, services.queue):
        await services.redis.script_load(source)
    async with guarded_client(app) as client:
        yield client


def _sse_events(body: str) -> list[dict[str, Any]]:
    return [json.loads(line[len("data: "):]) for line in body.splitlines() if line.startswith("data: ")]


@pytest.mark.parametrize("door", ["run", "run_sse", "enqueue"])
async def test_a_lost_enqueue_reply_names_the_invocation_and_sent_again_with_it_runs_once(http, door):
    sessions = "/apps/chat/users/u/sessions"
    session = (await http.post(sessions)).json()["id"]
    message = {"role": "user", "parts": [{"text": f"hello via {door}"}]}

    def send(**more: Any) -> Any:
        if door == "enqueue":
            return http.post(f"{sessions}/{session}/invocations", json={"newMessage": message, **more})
        return http.post(f"/{door}", json={"appName": "chat", "userId": "u", "sessionId": session,
                                           "newMessage": message, **more})

    failpoints.arm("api.transaction.sent=error*1")  # the transaction written, its reply lost
    try:
        lost = await send()
    finally:
        failpoints.disarm()
    assert lost.status_code == 503, lost.text
    assert lost.headers["retry-after"] == "1"
    told = lost.json()
    invocation = told["invocationId"]
    assert told["detail"].startswith("Redis unavailable, retry")
    assert f'"invocationId": "{invocation}"' in told["detail"]
    # Redis stored it: the invocation goes on regardless.
    assert (await http.get(f"/apps/chat/invocations/{invocation}")).status_code == 200

    again = await send(invocationId=invocation)
    if door == "run":
        assert again.status_code == 200, again.text
        assert again.json()[-1]["content"]["parts"][0]["text"] == f"reply to hello via {door}"
    elif door == "run_sse":
        assert again.status_code == 200, again.text
        assert _sse_events(again.text)[-1]["content"]["parts"][0]["text"] == f"reply to hello via {door}"
    else:
        assert again.status_code == 202, again.text
        assert again.json()["invocationId"] == invocation
        followed = await http.get(f"/apps/chat/invocations/{invocation}/stream")
        assert _sse_events(followed.text)[-1] == {"status": "completed"}

    # Run once: the session holds the one message and the one reply.
    events = (await http.get(f"{sessions}/{session}")).json()["events"]
    assert [(e["author"], e["invocationId"]) for e in events] == [
        ("user", invocation), ("agent", invocation)], events


@pytest.mark.parametrize("door", ["run", "run_sse"])
async def test_sent_again_with_the_id_of_a_run_that_failed_it_answers_that_failure_again(http, door):
    # What a client that sends again after the 503 gets if the run it had stored failed:
    # the run's failure as the first request would have told it, not a 422 "refused".
    sessions = "/apps/failing_branch/users/u/sessions"
    session = (await http.post(sessions)).json()["id"]
    body = {"appName": "failing_branch", "userId": "u", "sessionId": session,
            "newMessage": {"role": "user", "parts": [{"text": "go"}]}}
    first = await http.post(f"/{door}", json=body)
    invocation = (await http.get(f"/apps/failing_branch/users/u/sessions/{session}/invocations")
                  ).json()["invocations"][0]["invocationId"]
    again = await http.post(f"/{door}", json={**body, "invocationId": invocation})
    if door == "run":
        assert first.status_code == 500 and "branch model exploded" in first.json()["detail"], first.text
    else:
        assert first.status_code == 200 and "branch model exploded" in _sse_events(first.text)[-1]["error"]
    assert again.status_code == first.status_code
    if door == "run":
        assert again.json() == first.json()
    else:  # the same frames; the error frame's time is when it was sent
        shown = [_sse_events(reply.text) for reply in (first, again)]
        for frames in shown:
            frames[-1].get("error_details", {}).pop("timestamp", None)
        assert shown[1] == shown[0]
    listed = (await http.get(f"/apps/failing_branch/users/u/sessions/{session}/invocations")).json()
    assert [i["invocationId"] for i in listed["invocations"]] == [invocation]
