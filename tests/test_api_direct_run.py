"""``POST /run`` through :class:`workers.api.direct_run.DirectRun` answers as the FastAPI route.

Every request goes to two copies of the API application over the same real redis-server,
orchestrator and worker: one as served (``DirectRun`` in front of ``/run``), one with that
middleware taken out (FastAPI's route answers everything). Status codes, the headers a
client reads and the JSON bodies (ids and times masked) must be equal, for runs that end,
pause, answer a pause or fail, and for each refusal: validation, identifiers, unknown app or
session, tokens, body size, method, content type. A last test shows which requests
``DirectRun`` answers itself and which it passes on.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from config import Settings
from tests.apps import APP_SPECS
from tests.golden.api_steps import Masker
from workers.api.app import create_app
from workers.api.direct_run import DirectRun

TOKENS = {"tok-all": ["*"], "tok-chat": ["chat"]}
ALL = {"Authorization": "Bearer tok-all"}
LIMIT = 4096
USER = "u"
GUARD = 30.0
"""Longest wait for one answer: a request that hangs fails instead of blocking the suite."""


class _Guarded(httpx.ASGITransport):
    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return await asyncio.wait_for(super().handle_async_request(request), GUARD)


class Twin:
    """One API application; ``direct`` says whether DirectRun is in front of ``/run``."""

    def __init__(self, url: str, *, direct: bool) -> None:
        self.app = create_app(Settings(redis_url=url, apps=APP_SPECS, api_tokens=json.dumps(TOKENS),
                                       api_max_body_bytes=str(LIMIT)))
        if not direct:
            self.app.user_middleware = [m for m in self.app.user_middleware if m.cls is not DirectRun]
        self.http = httpx.AsyncClient(transport=_Guarded(app=self.app), base_url="http://127.0.0.1")
        self.masker = Masker()

    async def session(self, app: str) -> str:
        reply = await self.http.post(f"/apps/{app}/users/{USER}/sessions", headers=ALL)
        assert reply.status_code == 200, reply.text
        return str(reply.json()["id"])

    async def aclose(self) -> None:
        await self.http.aclose()
        backend = self.app.state.backend
        await backend.aclose()
        backend.close()


@pytest.fixture
async def twins(celery_stack) -> AsyncIterator[tuple[Twin, Twin]]:
    direct, routed = Twin(celery_stack["url"], direct=True), Twin(celery_stack["url"], direct=False)
    yield direct, routed
    await direct.aclose()
    await routed.aclose()


def seen(twin: Twin, reply: httpx.Response) -> dict[str, Any]:
    """What a client reads of a reply: status, the headers that matter, the body (masked)."""
    try:
        body: Any = twin.masker.mask(reply.json())
    except ValueError:
        body = reply.text
    headers = {name: reply.headers.get(name) for name in
               ("content-type", "www-authenticate", "allow", "location")}
    return {"status": reply.status_code, "headers": headers, "body": body}


async def same(twins: tuple[Twin, Twin], method: str, path: str = "/run",
               **request: Any) -> dict[str, Any]:
    """Send one request to both; assert they answer alike; return what the client saw."""
    direct, routed = twins
    answers = [seen(twin, await twin.http.request(method, path, **request)) for twin in twins]
    assert answers[0] == answers[1]
    return answers[0]


def run_body(app: str, session: str, text: str = "go", **extra: Any) -> dict[str, Any]:
    return {"appName": app, "userId": USER, "sessionId": session,
            "newMessage": {"role": "user", "parts": [{"text": text}]}, **extra}


async def both_runs(twins: tuple[Twin, Twin], app: str, text: str,
                    **extra: Any) -> tuple[list[dict[str, Any]], list[str]]:
    """A run on a new session of each twin; the (equal) answer, and each twin's session."""
    sessions = [await twin.session(app) for twin in twins]
    answers = []
    for twin, session in zip(twins, sessions, strict=True):
        reply = await twin.http.post("/run", headers=ALL, json=run_body(app, session, text, **extra))
        answers.append(seen(twin, reply))
    assert answers[0] == answers[1]
    assert answers[0]["status"] == 200 and answers[0]["headers"]["content-type"] == "application/json"
    return answers[0]["body"], sessions


async def test_runs_that_end_pause_answer_and_fail_answer_alike(twins):
    events, _ = await both_runs(twins, "chat", "hello")
    assert [e["content"]["parts"][0]["text"] for e in events] == ["reply to hello"]
    events, _ = await both_runs(twins, "lookup", "find Oslo")
    assert [e["author"] for e in events] == ["agent"] * 3
    events, _ = await both_runs(twins, "chat", "snake", state_delta={"k": 1}, streaming=False)
    assert events[-1]["content"]["parts"][0]["text"] == "reply to snake"

    # A pause for an outside answer ends the run; a function-response message answers it.
    paused, sessions = await both_runs(twins, "approval", "pay")
    assert paused[-1]["longRunningToolIds"]
    for twin, session in zip(twins, sessions, strict=True):
        call = (await twin.http.post("/run", headers=ALL, json=run_body("approval", session)))
        assert call.status_code == 200 and call.json()[-1]["longRunningToolIds"]
    answers = []
    for twin, session in zip(twins, sessions, strict=True):
        status = await twin.http.get(f"/apps/approval/users/{USER}/sessions/{session}", headers=ALL)
        call_id = status.json()["events"][-1]["content"]["parts"][0]["functionCall"]["id"]
        message = {"role": "user", "parts": [{"functionResponse": {
            "id": call_id, "name": "request_approval", "response": {"approved": True}}}]}
        answers.append(seen(twin, await twin.http.post("/run", headers=ALL, json={
            "appName": "approval", "userId": USER, "sessionId": session, "newMessage": message})))
    assert answers[0] == answers[1] and answers[0]["status"] == 200
    assert answers[0]["body"][-1]["content"]["parts"][0]["text"].startswith("approval:")

    sessions = [await twin.session("failing_branch") for twin in twins]
    failed = [seen(twin, await twin.http.post("/run", headers=ALL, json=run_body("failing_branch", s)))
              for twin, s in zip(twins, sessions, strict=True)]
    assert failed[0] == failed[1] and failed[0]["status"] == 500 and failed[0]["body"]["detail"]


async def test_bodies_that_do_not_validate_get_fastapis_field_named_422s(twins):
    direct, _ = twins
    session = await direct.session("chat")
    missing = await same(twins, "POST", headers=ALL, json={"appName": "chat"})
    assert missing["status"] == 422
    assert [e["loc"] for e in missing["body"]["detail"]] == [["body", "userId"], ["body", "sessionId"]]
    wrong_type = await same(twins, "POST", headers=ALL,
                            json=run_body("chat", session, stateDelta="not an object"))
    assert wrong_type["status"] == 422 and wrong_type["body"]["detail"][0]["loc"] == ["body", "stateDelta"]
    for raw in (b"{not json", b"[]", b"null", b"", "{\"appName\": \"\u00e9\"".encode()):
        answer = await same(twins, "POST", headers={**ALL, "content-type": "application/json"},
                            content=raw)
        assert answer["status"] == 422
    for content_type in ("text/plain", "application/x-www-form-urlencoded", None):
        headers = {**ALL, **({"content-type": content_type} if content_type else {})}
        answer = await same(twins, "POST", headers=headers,
                            content=json.dumps(run_body("chat", session)).encode())
        assert answer["status"] == 422


async def test_refusals_of_the_run_itself_are_the_routes(twins):
    direct, _ = twins
    session = await direct.session("chat")
    cases = {
        "unknown app": (ALL, run_body("nope", session), 404),
        "bad identifier": (ALL, {**run_body("chat", session), "userId": "has space"}, 422),
        "bad invocation id": (ALL, run_body("chat", session, invocationId="no/slash"), 422),
        "missing session": (ALL, run_body("chat", "s-missing"), 404),
        "malformed message": (ALL, {**run_body("chat", session), "newMessage": {"parts": "x"}}, 422),
        "no token": ({}, run_body("chat", session), 401),
        "unknown token": ({"Authorization": "Bearer nope"}, run_body("chat", session), 401),
        "token for another app": ({"Authorization": "Bearer tok-chat"},
                                  run_body("approval", session), 403),
    }
    for name, (headers, body, status) in cases.items():
        answer = await same(twins, "POST", headers=headers, json=body)
        assert answer["status"] == status, (name, answer)
        assert isinstance(answer["body"]["detail"], str), (name, answer)
    refused = await same(twins, "POST", json=run_body("chat", session))
    assert refused["headers"]["www-authenticate"] == "Bearer"


async def test_size_limit_method_and_path_are_as_before(twins):
    direct, _ = twins
    session = await direct.session("chat")
    big = run_body("chat", session, stateDelta={"blob": "x" * (2 * LIMIT)})
    declared = await same(twins, "POST", headers=ALL, json=big)
    assert declared["status"] == 413 and "ADK_CELERY_API_MAX_BODY_BYTES" in declared["body"]["detail"]

    def chunks(body: bytes, size: int) -> Any:
        async def stream() -> AsyncIterator[bytes]:
            for start in range(0, len(body), size):
                yield body[start:start + size]
        return stream()

    # Without a declared length (chunked), read in pieces: a run, and a body over the limit.
    statuses = []
    for body in (run_body("chat", session, "in pieces"), big):
        raw = json.dumps(body).encode()
        answers = [seen(twin, await twin.http.post("/run", content=chunks(raw, 1000), headers={
            **ALL, "content-type": "application/json"})) for twin in twins]
        assert answers[0] == answers[1]
        statuses.append(answers[0]["status"])
    assert statuses == [200, 413]
    assert (await same(twins, "GET", headers=ALL))["status"] == 405
    assert (await same(twins, "POST", "/run/", headers=ALL, json=run_body("chat", session)))["status"] == 307
    schema = [(await twin.http.get("/openapi.json")).json()["paths"]["/run"] for twin in twins]
    assert schema[0] == schema[1] and "post" in schema[0]


async def test_direct_run_answers_plain_runs_itself_and_passes_the_rest_on(twins):
    direct, _ = twins
    session = await direct.session("chat")
    await direct.http.get("/health")  # the middleware stack is built at the first request
    layer = direct.app.middleware_stack
    while not isinstance(layer, DirectRun):
        layer = layer.app
    passed_on: list[str] = []
    inner = layer.app

    async def counted(scope: Any, receive: Any, send: Any) -> None:
        passed_on.append(f"{scope['method']} {scope['path']}")
        await inner(scope, receive, send)

    layer.app = counted
    assert (await direct.http.post("/run", headers=ALL, json=run_body("chat", session))).status_code == 200
    assert (await direct.http.post("/run", headers=ALL, json=run_body("nope", session))).status_code == 404
    assert (await direct.http.post("/run", headers={**ALL, "content-type": "application/json; charset=utf-8"},
                                   content=json.dumps(run_body("chat", session)).encode())).status_code == 200
    assert passed_on == []
    await direct.http.post("/run", headers=ALL, json={"appName": "chat"})
    await direct.http.post("/run", headers={**ALL, "content-type": "text/plain"}, content=b"{}")
    await direct.http.post("/run_sse", headers=ALL, json=run_body("nope", session))
    assert passed_on == ["POST /run", "POST /run", "POST /run_sse"]


def test_the_run_route_has_no_dependencies_that_direct_run_would_pass_by():
    # DirectRun calls the route's function itself: a dependency added to the route or to its
    # router (a check, a rate limit) would not run for the requests it answers.
    from workers.api import adk_routes

    route = next(r for r in adk_routes.router.routes if getattr(r, "path", None) == "/run")
    assert not adk_routes.router.dependencies and not route.dependencies
    assert {param.name for param in route.dependant.body_params} == {"body"}
    assert not route.dependant.dependencies and not route.dependant.query_params

