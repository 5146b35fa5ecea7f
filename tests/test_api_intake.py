"""What the API refuses at intake, naming the field, before anything reaches Redis.

The API application runs in process (httpx's ASGI transport) over a real redis-server; no
orchestrator or worker is needed: every case here is answered before a run would start.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from config import Settings
from tests.apps import APP_SPECS
from workers.api.app import create_app

GUARD = 30.0
"""Longest wait for one answer: a request that hangs fails instead of blocking the suite."""


class _Guarded(httpx.ASGITransport):
    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return await asyncio.wait_for(super().handle_async_request(request), GUARD)


@pytest.fixture
async def http(redis_url: str, redis_client: Any) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(Settings(redis_url=redis_url, apps=APP_SPECS))
    async with httpx.AsyncClient(transport=_Guarded(app=app), base_url="http://127.0.0.1") as client:
        yield client
    backend = app.state.backend
    await backend.aclose()
    backend.close()


async def _keys(redis_client: Any) -> set[str]:
    return set(await redis_client.keys("*"))


def _content(*parts: dict[str, Any]) -> dict[str, Any]:
    return {"role": "user", "parts": list(parts)}


# Bodies ``/run`` refuses with a 422 (FastAPI's, or its intake's), and the field each names.
MALFORMED: list[tuple[str, str]] = [
    ('{"newMessage": 5}', "new_message"),
    ('{"newMessage": [1]}', "new_message"),
    ('{"newMessage": {"role": "user", "parts": [{"text": 1}]}}', "new_message"),
    ('{"newMessage": "hi", "stateDelta": {"app:k": 1}}', "state_delta.app:k"),
    ('{"newMessage": "hi", "customMetadata": {"a": NaN}}', "custom_metadata.a"),
    ('{"newMessage": {"role": "user", "parts": [{"functionCall": {"name": "f", "args": {}}}]}}',
     "new_message.parts[0].function_call"),
]


async def test_enqueue_routes_refuse_what_run_refuses_and_keep_nothing(http, redis_client):
    created = await http.post("/apps/chat/users/u/sessions")
    assert created.status_code == 200, created.text
    session = created.json()["id"]
    before = await _keys(redis_client)
    for path in (f"/apps/chat/users/u/sessions/{session}/invocations",
                 "/apps/chat/users/u/invocations"):
        for body, field in MALFORMED:
            reply = await http.post(path, content=body,
                                    headers={"content-type": "application/json"})
            assert reply.status_code == 422, (path, body, reply.text)
            assert field in reply.json()["detail"], (path, body, reply.text)
            # The field and what is wrong with it, not a Python class name first.
            assert not str(reply.json()["detail"]).startswith(("PayloadError", "RequestError"))
    # No failed record, no session made for the second route, nothing queued.
    assert await _keys(redis_client) == before
    assert [s["id"] for s in (await http.get("/apps/chat/users/u/sessions")).json()] == [session]
    # The same bodies, well formed, are taken.
    taken = await http.post("/apps/chat/users/u/invocations", json={"newMessage": "hi"})
    assert taken.status_code == 202 and taken.json()["status"] == "queued", taken.text


async def test_run_refuses_with_a_422_and_keeps_nothing(http, redis_client):
    # /run stored the refused request as a failed invocation (kept 7 days, listed among the
    # app's failed ones) while answering it 422: any caller could fill Redis with refusals.
    created = await http.post("/apps/chat/users/u/sessions")
    assert created.status_code == 200, created.text
    session = created.json()["id"]
    before = await _keys(redis_client)
    for path in ("/run", "/run_sse"):
        for body, field in MALFORMED:
            if "customMetadata" in body:
                continue  # not a field of ADK's RunAgentRequest: /run ignores it
            fields = {"appName": "chat", "userId": "u", "sessionId": session}
            merged = "{" + ", ".join(f'"{k}": "{v}"' for k, v in fields.items()) + ", " + body[1:]
            # /run's message is a Content, as in ADK (the enqueue routes take text too).
            merged = merged.replace('"newMessage": "hi"', '"newMessage": {"parts": [{"text": "hi"}]}')
            reply = await http.post(path, content=merged,
                                    headers={"content-type": "application/json"})
            assert reply.status_code == 422, (path, body, reply.text)
            named = str(reply.json()["detail"])  # FastAPI's own 422s name the camelCase key
            head, _, rest = field.partition(".")
            camel = head.split("_")[0] + "".join(w.title() for w in head.split("_")[1:])
            assert field in named or camel in named, (path, body, reply.text)
    assert await _keys(redis_client) == before


async def test_artifact_versions_past_64_bits_are_not_found_as_in_adk(http):
    # google-adk's api_server parses any integer and finds no such version: 404. Redis'
    # list indexes stop at 2**63 - 1 and refused the read (a 500).
    where = "/apps/chat/users/u/sessions/s/artifacts"
    saved = await http.post(where, json={"filename": "f", "artifact": {"text": "hello"}})
    assert saved.status_code == 200, saved.text
    for huge in (2**63, 2**64, -(2**63) - 1):
        for path, params, detail in (
                (f"{where}/f", {"version": str(huge)}, "Artifact not found"),
                (f"{where}/f/versions/{huge}", None, "Artifact not found"),
                (f"{where}/f/versions/{huge}/metadata", None, "Artifact version not found")):
            reply = await http.get(path, params=params)
            assert (reply.status_code, reply.json()) == (404, {"detail": detail}), (path, params)
    last = 2**63 - 1  # the largest index Redis takes: looked up, and not there
    assert (await http.get(f"{where}/f/versions/{last}")).status_code == 404
    assert (await http.get(f"{where}/f/versions/0")).json() == {"text": "hello"}


async def test_artifacts_with_lone_surrogates_are_refused_naming_the_field(http, redis_client):
    where = "/apps/chat/users/u/sessions/s/artifacts"
    saved = await http.post(where, json={"filename": "f", "artifact": {"text": "hello"}})
    assert saved.status_code == 200, saved.text
    before = await _keys(redis_client)
    for body, field in (
            ('{"filename": "f", "artifact": {"text": "\\ud800"}}', "artifact.text"),
            ('{"filename": "f\\ud800", "artifact": {"text": "ok"}}', "filename"),
            ('{"filename": "f", "artifact": {"text": "ok"}, "customMetadata": {"k": "\\udfff"}}',
             "custom_metadata.k")):
        reply = await http.post(where, content=body, headers={"content-type": "application/json"})
        assert reply.status_code == 422, (body, reply.text)
        assert reply.json()["detail"].startswith(f"{field}: "), (body, reply.text)
    assert await _keys(redis_client) == before
    assert (await http.get(f"{where}/f/versions")).json() == [0]
    assert (await http.get(where)).json() == ["f"]


async def test_run_sse_refuses_an_empty_invocation_id_as_run_does(http, redis_client):
    session = (await http.post("/apps/chat/users/u/sessions")).json()["id"]
    before = await _keys(redis_client)
    body = {"appName": "chat", "userId": "u", "sessionId": session, "invocationId": "",
            "newMessage": _content({"text": "hi"})}
    for route in ("/run", "/run_sse"):
        reply = await http.post(route, json=body)
        assert (reply.status_code, reply.json()) == (
            422, {"detail": "invocation_id: must not be empty."}), (route, reply.text)
    assert await _keys(redis_client) == before


async def test_a_body_that_is_not_utf8_is_a_422_and_never_logged(http, redis_client, caplog):
    # FastAPI's own 422 decoded such a body to echo it: a 500, its log holding the body.
    session = (await http.post("/apps/chat/users/u/sessions")).json()["id"]
    before = await _keys(redis_client)
    body = b"\xffcard=4111111111111111 SECRET-BODY"
    for method, path in (
            ("PATCH", f"/apps/chat/users/u/sessions/{session}"),
            ("POST", "/apps/chat/users/u/sessions"),
            ("POST", f"/apps/chat/users/u/sessions/{session}/invocations"),
            ("POST", "/apps/chat/invocations/e-1/answer"),
            ("POST", "/run")):
        reply = await http.request(method, path, content=body,
                                   headers={"content-type": "application/octet-stream"})
        assert reply.status_code == 422, (path, reply.text)
        [problem] = reply.json()["detail"]
        assert problem["loc"] == ["body"] and problem["input"] == f"<{len(body)} bytes, not UTF-8 text>"
    assert not any("SECRET-BODY" in record.getMessage() or "SECRET-BODY" in (record.exc_text or "")
                   for record in caplog.records)
    assert await _keys(redis_client) == before


async def test_a_circular_artifact_reference_is_a_400_naming_it(http):
    where = "/apps/chat/users/u/sessions/s/artifacts"
    itself = "artifact://apps/chat/users/u/sessions/s/artifacts/loop.txt/versions/0"
    saved = await http.post(where, json={"filename": "loop.txt",
                                         "artifact": {"fileData": {"fileUri": itself}}})
    assert saved.status_code == 200, saved.text
    reply = await http.get(f"{where}/loop.txt")
    assert reply.status_code == 400, reply.text
    assert "Circular artifact reference" in reply.json()["detail"]


async def test_session_state_over_the_payload_limit_is_refused_naming_it(http, redis_client):
    # An enqueue refused such a state_delta; creating a session or patching its state took it.
    session = (await http.post("/apps/chat/users/u/sessions")).json()["id"]
    before = await _keys(redis_client)
    big = {"big": "x" * (1024 * 1024 + 1)}
    for method, path, body in (
            ("PATCH", f"/apps/chat/users/u/sessions/{session}", {"stateDelta": big}),
            ("POST", "/apps/chat/users/u/sessions", {"state": big}),
            ("POST", "/apps/chat/users/u/sessions/s2", big)):
        reply = await http.request(method, path, json=body)
        assert reply.status_code == 422, (path, reply.text[:200])
        assert reply.json()["detail"].startswith("state_delta: is "), (path, reply.text[:200])
        assert "over the limit of 1048576 bytes" in reply.json()["detail"]
    assert await _keys(redis_client) == before


async def test_answering_an_unknown_invocation_is_a_404_as_its_other_routes(http):
    for route in ("answer", "cancel"):
        body = {"functionCallId": "c", "response": {}} if route == "answer" else None
        reply = await http.post(f"/apps/chat/invocations/e-nope/{route}", json=body)
        assert reply.status_code == 404, (route, reply.text)
