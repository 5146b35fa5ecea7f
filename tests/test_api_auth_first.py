"""With tokens set, ``adk-celery api`` checks the token before anything else of a request.

A caller without a valid token gets 401, and one whose token does not open the app 403,
before its body or query is decoded or validated: a malformed body is not answered with a
422 that names the route's fields and echoes what was sent. A caller whose token opens the
app still gets the field-named 422. The public routes stay public; without tokens (this
machine's own clients only) a malformed body is a 422 as before.

Real ``adk-celery api`` processes over a real redis-server.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.apps import APP_SPECS
from tests.support.processes import stack_env
from tests.test_api import start_api
from workers.api import dev_ui

TOKENS = {"tok-chat": ["chat"], "tok-all": ["*"]}
CHAT = {"Authorization": "Bearer tok-chat"}
ALL = {"Authorization": "Bearer tok-all"}
MARK = "s3cret-input-mark"
"""Sent in every malformed request: a refusal must not show it back."""
UNAUTHENTICATED = {"detail": "a valid bearer token is required (Authorization: Bearer ...)"}

# (method, path, what is sent): a malformed body or query for each kind of route.
MALFORMED: list[tuple[str, str, dict[str, Any]]] = [
    ("POST", "/run", {"json": {"appName": "chat", "userId": MARK}}),
    ("POST", "/run", {"content": f"{{not json {MARK}".encode(),
                      "headers": {"content-type": "application/json"}}),
    ("POST", "/run_sse", {"json": {"appName": ["chat"], "sessionId": MARK}}),
    ("POST", "/apps/chat/users/u/sessions", {"json": {"state": MARK}}),
    ("PATCH", "/apps/chat/users/u/sessions/s", {"json": {"stateDelta": MARK}}),
    ("POST", "/apps/chat/users/u/sessions/s/invocations", {"json": {MARK: 1}}),
    ("POST", "/apps/chat/users/u/invocations", {"json": {"streaming": MARK}}),
    ("POST", "/apps/chat/invocations/i/answer", {"json": {"response": MARK}}),
    ("POST", "/apps/chat/users/u/sessions/s/artifacts", {"json": {"filename": MARK}}),
    ("GET", "/apps/chat/users/u/sessions/s/artifacts/a", {"params": {"version": MARK}}),
    ("GET", "/apps/chat/invocations/i/stream", {"params": {"until": MARK}}),
    ("GET", "/list-apps", {"params": {"detailed": MARK}}),
    ("GET", "/version", {"params": {"x": MARK}}),
    ("GET", "/metrics", {"params": {"x": MARK}}),
    ("GET", f"/no-such-route/{MARK}", {}),
]
NOT_VALID = [
    pytest.param({}, id="no-token"),
    pytest.param({"Authorization": "Bearer wrong"}, id="wrong-token"),
    pytest.param({"Authorization": "Basic tok-all"}, id="other-scheme"),
    pytest.param({"Authorization": "Bearer"}, id="no-token-after-scheme"),
]


@pytest.fixture(scope="module")
def locked(redis_url: str) -> Any:
    api, base = start_api(stack_env(redis_url, APP_SPECS, api_tokens=json.dumps(TOKENS)))
    yield base
    api.stop()


def _send(base: str, method: str, path: str, sent: dict[str, Any],
          token: dict[str, str]) -> httpx.Response:
    headers = {**sent.get("headers", {}), **token}
    return httpx.request(method, f"{base}{path}", **{**sent, "headers": headers}, timeout=30)


@pytest.mark.parametrize("token", NOT_VALID)
@pytest.mark.parametrize(("method", "path", "sent"), MALFORMED,
                         ids=[f"{m} {p}" for m, p, _ in MALFORMED])
def test_without_a_valid_token_a_malformed_request_is_a_401_that_shows_nothing_of_it(
        locked, token, method, path, sent):
    reply = _send(locked, method, path, sent, token)
    assert reply.status_code == 401, reply.text
    assert reply.json() == UNAUTHENTICATED
    assert reply.headers["www-authenticate"] == "Bearer"
    assert MARK not in reply.text


def test_a_token_for_another_app_is_a_403_before_the_body_is_checked(locked):
    for path, sent in [
        ("/apps/approval/users/u/sessions/s/invocations", {"json": {MARK: 1}}),
        ("/apps/approval/users/u/sessions", {"content": f"[{MARK}".encode(),
                                             "headers": {"content-type": "application/json"}}),
        ("/apps/approval/invocations/i/answer", {"json": {"response": MARK}}),
        ("/run", {"json": {"appName": "approval", "userId": MARK}}),  # no sessionId
        ("/run", {"json": {"app_name": "approval", "sessionId": MARK}}),
        ("/run_sse", {"json": {"appName": "approval", "newMessage": MARK}}),
    ]:
        reply = _send(locked, "POST", path, sent, CHAT)
        assert reply.status_code == 403, (path, reply.text)
        assert reply.json() == {"detail": "this token does not open app 'approval'"}
        assert MARK not in reply.text
    # A query is not checked either: the path names the app.
    reply = _send(locked, "GET", "/apps/approval/invocations/i/stream", {"params": {"until": MARK}},
                  CHAT)
    assert (reply.status_code, MARK in reply.text) == (403, False)


def test_a_run_body_that_names_no_app_is_the_same_422_for_a_token_for_some_apps_only(locked):
    """On /run the body names the app. A body that names none (not JSON, no appName, not a
    string) is the caller's mistake, not a token's limit: the same 422 naming the field as an
    unrestricted token gets (it was a 403), and nothing in it of the apps the token does not
    open. A body naming such an app is still the 403, however wrong the rest of it is."""
    served = httpx.get(f"{locked}/list-apps", headers=ALL, timeout=30).json()
    hidden = [name for name in served if name != "chat"]
    assert "approval" in hidden
    for path in ("/run", "/run_sse"):
        for content, fields in [
            (f"{{not json {MARK}", None),
            (json.dumps({"userId": MARK}), {("body", "appName"), ("body", "sessionId")}),
            (json.dumps({"appName": 5, "userId": "u", "sessionId": MARK}),
             {("body", "appName")}),
            (json.dumps([MARK]), {("body",)}),
        ]:
            sent = {"content": content.encode(), "timeout": 30}
            reply = httpx.post(f"{locked}{path}", **sent,
                               headers={**CHAT, "content-type": "application/json"})
            assert reply.status_code == 422, (path, content, reply.text)
            unrestricted = httpx.post(f"{locked}{path}", **sent,
                                      headers={**ALL, "content-type": "application/json"})
            assert reply.json() == unrestricted.json()
            detail = reply.json()["detail"]
            if fields is None:
                assert detail[0]["type"] == "json_invalid"
            else:
                assert {tuple(error["loc"]) for error in detail} == fields
            assert not [name for name in hidden if name in reply.text], reply.text
        closed = httpx.post(f"{locked}{path}", headers=CHAT, timeout=30,
                            json={"appName": "approval", "userId": 5, "stateDelta": MARK})
        assert closed.status_code == 403
        assert closed.json() == {"detail": "this token does not open app 'approval'"}


def test_a_token_that_opens_the_app_still_gets_the_422_naming_the_field(locked):
    run = httpx.post(f"{locked}/run", headers=CHAT, json={"appName": "chat", "userId": "u"})
    assert run.status_code == 422
    assert [error["loc"] for error in run.json()["detail"]] == [["body", "sessionId"]]
    # A body sent in pieces (no declared length) is played back whole to the route.
    pieces = (b'{"appName": "chat", ', b'"userId": "u"}')
    chunked = httpx.post(f"{locked}/run", headers={**CHAT, "content-type": "application/json"},
                         content=iter(pieces))
    assert chunked.status_code == 422 and chunked.json() == run.json()
    not_json = httpx.post(f"{locked}/run", content=b"{not json", headers={
        **ALL, "content-type": "application/json"})
    assert not_json.status_code == 422 and not_json.json()["detail"][0]["type"] == "json_invalid"
    sse = httpx.post(f"{locked}/run_sse", headers=ALL, json={"appName": "chat"})
    assert sse.status_code == 422
    assert {tuple(e["loc"]) for e in sse.json()["detail"]} == {("body", "userId"),
                                                               ("body", "sessionId")}
    enqueue = httpx.post(f"{locked}/apps/chat/users/u/sessions/s/invocations", headers=CHAT,
                         json={"bogus": 1})
    assert enqueue.status_code == 422 and enqueue.json()["detail"][0]["loc"] == ["body", "bogus"]
    listed = httpx.get(f"{locked}/list-apps", headers=CHAT, params={"detailed": "maybe"})
    assert listed.status_code == 422 and listed.json()["detail"][0]["loc"] == ["query", "detailed"]


def test_the_public_routes_need_no_token(locked):
    for path in ("/health", "/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json"):
        assert httpx.get(f"{locked}{path}").status_code == 200, path


def test_metrics_made_public_need_no_token_and_the_rest_still_does(redis_url):
    api, base = start_api(stack_env(redis_url, APP_SPECS, api_tokens=json.dumps(TOKENS),
                                    api_metrics_public="true"))
    try:
        assert httpx.get(f"{base}/metrics", timeout=30).status_code == 200
        assert httpx.get(f"{base}/version").status_code == 401
    finally:
        api.stop()


def test_the_dev_ui_files_need_no_token_and_its_app_routes_do(redis_url):
    if dev_ui.find_files() is None:
        pytest.skip("google-adk's web UI is not installed (pip install -e '.[devui]')")
    api, base = start_api(stack_env(redis_url, APP_SPECS, api_tokens=json.dumps(TOKENS)),
                          "--dev-ui")
    try:
        assert httpx.get(f"{base}/", follow_redirects=False).status_code == 307
        assert httpx.get(f"{base}/dev-ui/").status_code == 200
        assert httpx.get(f"{base}/dev-ui/config").status_code == 200
        assert httpx.get(f"{base}/config/telemetry").status_code == 200
        graph = httpx.get(f"{base}/dev/apps/chat/graph", params={"dark_mode": MARK})
        assert (graph.status_code, MARK in graph.text) == (401, False)
        other = httpx.get(f"{base}/dev/apps/approval/graph", headers=CHAT,
                          params={"dark_mode": MARK})
        assert (other.status_code, MARK in other.text) == (403, False)
        assert httpx.get(f"{base}/dev/apps/chat/graph", headers=CHAT).status_code == 200
    finally:
        api.stop()


def test_without_tokens_a_malformed_body_is_still_a_422_naming_the_field(redis_url):
    api, base = start_api(stack_env(redis_url, APP_SPECS))
    try:
        run = httpx.post(f"{base}/run", json={"appName": "chat", "userId": "u"})
        assert run.status_code == 422
        assert [error["loc"] for error in run.json()["detail"]] == [["body", "sessionId"]]
        assert httpx.get(f"{base}/list-apps").status_code == 200
    finally:
        api.stop()
