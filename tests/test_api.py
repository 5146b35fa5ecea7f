"""``adk-celery api`` over real processes: ADK's routes as an ADK client calls them (plain
httpx), the invocation routes, and who may call what."""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import time
from typing import Any

import httpx
import pytest

from tests.support.processes import ManagedProcess, stack_env
from tests.support.redis_server import free_port

TOKENS = {"tok-chat": ["chat"], "tok-all": ["*"]}


def start_api(env: dict[str, str], *extra: str) -> tuple[ManagedProcess, str]:
    port = free_port()
    api = ManagedProcess("api", [sys.executable, "-m", "workers.cli", "api", "--port", str(port),
                                 *extra], env)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        if api.proc.poll() is not None:
            pytest.fail(f"api exited:\n{api.output()}")
        try:
            if httpx.get(f"{base}/health", timeout=1).status_code == 200:
                return api, base
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, api.output()
        time.sleep(0.05)


@pytest.fixture(scope="module")
def api(celery_stack):
    from tests.apps import APP_SPECS

    api, base = start_api(stack_env(celery_stack["url"], APP_SPECS))
    yield base
    api.stop()


@pytest.fixture(scope="module")
def locked_api(celery_stack):
    from tests.apps import APP_SPECS

    api, base = start_api(stack_env(celery_stack["url"], APP_SPECS, api_tokens=json.dumps(TOKENS),
                                    api_max_body_bytes="4096"))
    yield base
    api.stop()


def frames(response: httpx.Response) -> list[dict[str, Any]]:
    """Parse an SSE body: each frame's fields (id, event, data as JSON)."""
    parsed = []
    for block in response.text.split("\n\n"):
        if not block.strip():
            continue
        frame: dict[str, Any] = {}
        for line in block.splitlines():
            key, _, value = line.partition(": ")
            frame[key] = json.loads(value) if key == "data" else value
        parsed.append(frame)
    return parsed


def test_adk_routes_describe_the_apps(api):
    assert httpx.get(f"{api}/health").json() == {"status": "ok"}
    version = httpx.get(f"{api}/version").json()
    assert version["language"] == "python" and version["version"]
    apps = httpx.get(f"{api}/list-apps").json()
    assert "approval" in apps and apps == sorted(apps)
    info = httpx.get(f"{api}/apps/approval/app-info").json()
    assert info["rootAgentName"] == "agent" and info["name"] == "approval"
    assert httpx.get(f"{api}/apps/nope/app-info").status_code == 404


def test_sessions_as_adk_serves_them(api):
    base = f"{api}/apps/chat/users/alice/sessions"
    created = httpx.post(base, json={"sessionId": "s-api-1", "state": {"k": 1}})
    assert created.status_code == 200, created.text
    assert {k: created.json()[k] for k in ("id", "appName", "userId", "state", "events")} == {
        "id": "s-api-1", "appName": "chat", "userId": "alice", "state": {"k": 1}, "events": []}
    assert httpx.post(base, json={"sessionId": "s-api-1"}).status_code == 409
    assert httpx.post(base).json()["id"]  # no body: a new id
    listed = httpx.get(base).json()
    assert "s-api-1" in [s["id"] for s in listed] and all(s["events"] == [] for s in listed)
    patched = httpx.patch(f"{base}/s-api-1", json={"stateDelta": {"k": 2}}).json()
    assert patched["state"] == {"k": 2} and patched["events"][-1]["invocationId"].startswith("p-")
    assert httpx.patch(f"{base}/s-api-1", json={"stateDelta": {"app:x": 1}}).status_code == 422
    assert httpx.delete(f"{base}/s-api-1").status_code == 200
    missing = httpx.get(f"{base}/s-api-1")
    assert (missing.status_code, missing.json()) == (404, {"detail": "Session not found"})


def test_run_and_run_sse(api):
    session = httpx.post(f"{api}/apps/chat/users/bob/sessions").json()
    request = {"appName": "chat", "userId": "bob", "sessionId": session["id"],
               "newMessage": {"role": "user", "parts": [{"text": "hello"}]}}
    events = httpx.post(f"{api}/run", json=request, timeout=30).json()
    assert [e["author"] for e in events] == ["agent"]
    assert events[0]["content"]["role"] == "model" and events[0]["invocationId"].startswith("e-")
    streamed = frames(httpx.post(f"{api}/run_sse", json=request, timeout=30))
    assert [f["data"]["author"] for f in streamed] == ["agent"] and set(streamed[0]) == {"data"}
    missing = httpx.post(f"{api}/run", json={**request, "sessionId": "no-such"}, timeout=30)
    assert (missing.status_code, missing.json()) == (404, {"detail": "Session not found: no-such"})
    bad = httpx.post(f"{api}/run", json={**request, "newMessage": {"role": "user", "parts": [
        {"functionResponse": {"id": "x", "name": "y", "response": {}}}]}}, timeout=30)
    assert bad.status_code == 422 and "new_message.parts[0].function_response" in bad.text


def test_a_run_with_a_state_change_and_no_message_runs_the_agent_on_it(api):
    session = httpx.post(f"{api}/apps/chat/users/dave/sessions").json()
    run = httpx.post(f"{api}/run", timeout=30, json={
        "appName": "chat", "userId": "dave", "sessionId": session["id"], "stateDelta": {"k": 1}})
    assert run.status_code == 200, run.text
    assert [e["author"] for e in run.json()] == ["agent"]
    stored = httpx.get(f"{api}/apps/chat/users/dave/sessions/{session['id']}").json()
    assert stored["state"] == {"k": 1}
    assert stored["events"][0]["author"] == "user" and "content" not in stored["events"][0]
    assert stored["events"][0]["actions"]["stateDelta"] == {"k": 1}


def test_run_goes_on_while_workers_run_remote_tools(api):
    session = httpx.post(f"{api}/apps/lookup/users/erin/sessions").json()
    events = httpx.post(f"{api}/run", timeout=30, json={
        "appName": "lookup", "userId": "erin", "sessionId": session["id"],
        "newMessage": {"role": "user", "parts": [{"text": "look up Oslo"}]}}).json()
    shape = [next(iter(e["content"]["parts"][0])) for e in events]
    assert shape == ["functionCall", "functionResponse", "text"], events
    assert events[-1]["content"]["parts"][0]["text"].startswith("Oslo found by pid")


def test_an_adk_client_answers_a_long_running_call_and_follows_by_sse(api):
    """Plain httpx, as a client written against ADK's routes plus the answer route."""
    session = httpx.post(f"{api}/apps/approval/users/carol/sessions").json()
    events = httpx.post(f"{api}/run", timeout=30, json={
        "appName": "approval", "userId": "carol", "sessionId": session["id"],
        "newMessage": {"role": "user", "parts": [{"text": "pay 100"}]}}).json()
    call = events[-1]["content"]["parts"][0]["functionCall"]
    assert call["name"] == "request_approval" and events[-1]["longRunningToolIds"] == [call["id"]]
    invocation_id = events[-1]["invocationId"]
    status = httpx.get(f"{api}/apps/approval/invocations/{invocation_id}").json()
    assert status["status"] == "paused"
    assert status["calls"] == [{"functionCallId": call["id"], "name": "request_approval",
                                "where": "waiting for an answer"}]  # camelCase, as the record

    answered = httpx.post(f"{api}/apps/approval/invocations/{invocation_id}/answer",
                          json={"functionCallId": call["id"], "response": {"approved": True}})
    assert answered.status_code == 202, answered.text
    again = httpx.post(f"{api}/apps/approval/invocations/{invocation_id}/answer",
                       json={"functionCallId": call["id"], "response": {"approved": False}})
    assert again.status_code == 409

    stream_url = f"{api}/apps/approval/invocations/{invocation_id}/stream"
    followed = frames(httpx.get(stream_url, timeout=30))
    assert followed[-1] == {"id": followed[-1]["id"], "event": "status",
                            "data": {"status": "completed"}}
    texts = [f["data"]["content"]["parts"][0].get("text") for f in followed
             if f["event"] == "event" and f["data"]["author"] == "agent"]
    assert texts[-1] == "approval: {'approved': True}"
    # Reconnecting with Last-Event-ID resumes after that frame.
    resumed = frames(httpx.get(stream_url, headers={"Last-Event-ID": followed[-3]["id"]}, timeout=30))
    assert resumed == followed[-2:]


def test_enqueue_without_waiting_and_cancel(api):
    enqueued = httpx.post(f"{api}/apps/approval/users/dave/invocations",
                          json={"newMessage": "pay 7"})
    assert enqueued.status_code == 202
    invocation_id = enqueued.json()["invocationId"]
    deadline = time.monotonic() + 15
    while httpx.get(f"{api}/apps/approval/invocations/{invocation_id}").json()["status"] != "paused":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert httpx.post(f"{api}/apps/approval/invocations/{invocation_id}/cancel").status_code == 202
    followed = frames(httpx.get(f"{api}/apps/approval/invocations/{invocation_id}/stream", timeout=30))
    assert followed[-1]["data"] == {"status": "cancelled"}
    assert httpx.get(f"{api}/apps/approval/invocations/e-unknown").status_code == 404
    missing = httpx.post(f"{api}/apps/approval/users/dave/sessions/no-such/invocations",
                         json={"newMessage": "pay 7"})
    assert (missing.status_code, missing.json()) == (404, {"detail": "Session not found: no-such"})
    bad = httpx.post(f"{api}/apps/approval/users/bad%20user/invocations", json={"newMessage": "x"})
    assert bad.status_code == 422 and bad.json()["detail"].startswith("user_id: 'bad user'")


def test_an_enqueue_body_is_checked_whole_and_nothing_of_a_refused_one_is_kept(api):
    sessions_before = httpx.get(f"{api}/apps/chat/users/body/sessions").json()
    # Nothing to run: refused, no session made (it used to be accepted, then fail).
    empty = httpx.post(f"{api}/apps/chat/users/body/invocations", json={})
    assert empty.status_code == 422 and "new_message" in empty.text
    # A field the route does not know (a guessed name) is named, not dropped.
    guessed = httpx.post(f"{api}/apps/chat/users/body/invocations", json={"message": "hi"})
    assert guessed.status_code == 422 and "message" in guessed.text
    assert httpx.get(f"{api}/apps/chat/users/body/sessions").json() == sessions_before
    # customMetadata reaches the invocation, as the other doors' custom_metadata does.
    taken = httpx.post(f"{api}/apps/chat/users/body/invocations",
                       json={"newMessage": "hi", "customMetadata": {"ticket": 7}})
    assert taken.status_code == 202, taken.text
    invocation = taken.json()["invocationId"]
    events = httpx.get(f"{api}/apps/chat/invocations/{invocation}/events",
                       params={"wait": "true"}).json()
    assert events and all(e.get("customMetadata") == {"ticket": 7} for e in events), events


async def test_a_fresh_server_takes_a_burst_of_requests(celery_stack):
    """Many requests at once on a server that has made no Redis connection yet."""
    from tests.apps import APP_SPECS

    api, base = start_api(stack_env(celery_stack["url"], APP_SPECS))
    try:
        async with httpx.AsyncClient(base_url=base, timeout=60, limits=httpx.Limits(
                max_connections=150)) as http:
            replies = await asyncio.gather(*(
                http.post("/apps/chat/users/burst/invocations", json={"newMessage": f"hi {n}"})
                for n in range(150)))
    finally:
        api.stop()
    assert [r.status_code for r in replies] == [202] * 150, replies[0].text


def test_an_enqueue_sent_again_with_its_invocation_id_makes_no_second_session(api):
    body = {"newMessage": "hi", "invocationId": "e-sent-again"}
    first = httpx.post(f"{api}/apps/chat/users/rep/invocations", json=body)
    again = [httpx.post(f"{api}/apps/chat/users/rep/invocations", json=body) for _ in range(3)]
    assert first.status_code == 202 and {r.status_code for r in again} == {202}
    assert {r.json()["sessionId"] for r in again} == {first.json()["sessionId"]}
    other = httpx.post(f"{api}/apps/chat/users/intruder/invocations", json=body)
    assert other.status_code == 422 and "invocation_id" in other.text
    assert len(httpx.get(f"{api}/apps/chat/users/rep/sessions").json()) == 1
    assert httpx.get(f"{api}/apps/chat/users/intruder/sessions").json() == []


def test_the_access_log_can_be_turned_off(celery_stack):
    env = stack_env(celery_stack["url"], "")
    lines = {}
    for extra in ((), ("--no-access-log",)):
        api, base = start_api(env, *extra)
        try:
            assert httpx.get(f"{base}/version").status_code == 200
        finally:
            api.stop()
        lines[extra] = [line for line in api.all_lines() if '"GET /version HTTP/1.1" 200' in line]
    assert len(lines[()]) == 1 and lines[("--no-access-log",)] == []


def test_tokens_open_their_apps_only_and_bodies_are_bounded(locked_api):
    chat = {"Authorization": "Bearer tok-chat"}
    assert httpx.get(f"{locked_api}/list-apps").status_code == 401
    assert httpx.get(f"{locked_api}/list-apps", headers={"Authorization": "Bearer nope"}).status_code == 401
    assert httpx.get(f"{locked_api}/list-apps", headers=chat).json() == ["chat"]
    assert httpx.post(f"{locked_api}/apps/approval/users/u/sessions", headers=chat).status_code == 403
    assert httpx.post(f"{locked_api}/apps/chat/users/u/sessions", headers=chat).status_code == 200
    everything = httpx.get(f"{locked_api}/list-apps", headers={"Authorization": "Bearer tok-all"})
    assert "approval" in everything.json()
    big = httpx.post(f"{locked_api}/apps/chat/users/u/sessions", headers=chat,
                     json={"state": {"blob": "x" * 10_000}})
    assert big.status_code == 413 and "ADK_CELERY_API_MAX_BODY_BYTES" in big.text
    # Without a declared length (chunked), the limit is counted as the body comes.
    chunks = (b'{"state": {"blob": "', *[b"x" * 1000] * 10, b'"}}')
    for path in ("/apps/chat/users/u/sessions", "/run"):
        sent = httpx.post(f"{locked_api}{path}", headers={**chat, "content-type": "application/json"},
                          content=iter(chunks))
        assert sent.status_code == 413 and "ADK_CELERY_API_MAX_BODY_BYTES" in sent.text, sent.text
    small = httpx.post(f"{locked_api}/apps/chat/users/u/sessions", content=iter([b'{"state": ', b'{}}']),
                       headers={**chat, "content-type": "application/json"})
    assert small.status_code == 200
    assert httpx.get(f"{locked_api}/docs", headers=chat).status_code == 200
    assert httpx.get(f"{locked_api}/version").status_code == 401
    assert httpx.get(f"{locked_api}/version", headers=chat).status_code == 200
    assert httpx.get(f"{locked_api}/health").status_code == 200


def test_stream_positions_and_limits_out_of_range_are_refused_not_read(api):
    """An entry id Redis would refuse must not reach the read every follow of the process
    shares (it failed them all); digits that are not ASCII are no number here either."""
    invocation_id = httpx.post(f"{api}/apps/chat/users/pos/invocations",
                               json={"newMessage": "hi"}).json()["invocationId"]
    stream = f"{api}/apps/chat/invocations/{invocation_id}/stream"
    for position in ("99999999999999999999999-0", "18446744073709551616-0", b"\xb9-1", "1-"):
        refused = httpx.get(stream, headers=[("last-event-id", position)], timeout=10)
        assert refused.status_code == 422 and "Last-Event-ID" in refused.text, position
    ended = frames(httpx.get(stream, timeout=30))  # the whole follow, to its end
    assert ended[-1]["data"] == {"status": "completed"}
    for position in (ended[-1]["id"], "18446744073709551615-0"):  # at or past the end
        back = httpx.get(stream, headers={"Last-Event-ID": position}, timeout=10)
        assert back.status_code == 200 and frames(back) == []  # ends at once, nothing more
    listed = httpx.get(f"{api}/apps/chat/invocations", params={"limit": "\u00b2"})
    assert listed.status_code == 422 and "limit" in listed.text


def test_without_tokens_the_api_refuses_to_listen_beyond_loopback(celery_stack):
    env = stack_env(celery_stack["url"], "")
    api = ManagedProcess("api-open", [sys.executable, "-m", "workers.cli", "api", "--host",
                                      "0.0.0.0", "--port", str(free_port())], env)
    try:
        assert api.proc.wait(30) != 0
    finally:
        api.stop()
    assert "no ADK_CELERY_API_TOKENS set; refusing to listen on '0.0.0.0'" in api.output()


def _address_of_this_machine() -> str | None:
    """An address of this machine that is not loopback (the one its default route uses)."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # no packet is sent: this only picks a route
        except OSError:
            return None
        address = probe.getsockname()[0]
    return None if address.startswith("127.") or address == "0.0.0.0" else address


def test_without_tokens_only_this_machines_own_clients_are_answered(api, celery_stack):
    # Other sites' pages in a browser here, and names rebound to 127.0.0.1, are refused.
    port = api.rsplit(":", 1)[1]
    evil_site = httpx.get(f"{api}/list-apps", headers={"Origin": "https://evil.example"})
    assert evil_site.status_code == 403 and "another site" in evil_site.text
    rebound = httpx.post(f"{api}/run", headers={"Host": f"evil.example:{port}"},
                         json={"appName": "chat", "userId": "u", "sessionId": "s"})
    assert rebound.status_code == 403 and "not a loopback name" in rebound.text
    padded = httpx.get(f"{api}/list-apps", headers={"Host": f"127.0.0.1:{port}.evil.example"})
    assert padded.status_code == 403 and "not a loopback name" in padded.text
    # Two Host headers: the guard read the last, a proxy in front may read the first.
    with socket.create_connection(("127.0.0.1", int(port)), timeout=30) as raw:
        raw.sendall(f"GET /list-apps HTTP/1.1\r\nHost: evil.example:{port}\r\n"
                    f"Host: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n".encode())
        reply = b""
        while chunk := raw.recv(65536):
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 403") and b"more than one Host" in reply, reply[:300]
    assert httpx.get(f"{api}/list-apps", headers={"Origin": api}).status_code == 200
    # The application served another way, on every address: other machines are refused.
    address = _address_of_this_machine()
    if address is None:
        pytest.skip("this machine has no address but loopback")
    port = free_port()
    served = ManagedProcess("api-factory", [
        sys.executable, "-m", "uvicorn", "workers.api.app:create_app", "--factory",
        "--host", "0.0.0.0", "--port", str(port)], stack_env(celery_stack["url"], "tests.apps:chat_app"))
    try:
        served.wait_for_line(lambda line: "Application startup complete" in line)
        assert httpx.get(f"http://127.0.0.1:{port}/list-apps").json() == ["chat"]
        outside = httpx.get(f"http://{address}:{port}/list-apps",
                            headers={"Host": f"127.0.0.1:{port}"})
        assert outside.status_code == 403, outside.text
        assert "is not on this machine" in outside.text
    finally:
        served.stop()


def test_a_client_that_gives_up_on_a_run_does_not_keep_the_server_from_stopping(celery_stack):
    # No orchestrator serves this Redis database: the /run would follow its invocation for
    # ever. The client gives up; the server, told to stop, stops.
    import signal

    url = celery_stack["url"].rsplit("/", 1)[0] + "/9"
    api, base = start_api(stack_env(url, "tests.apps:chat_app", api_shutdown_seconds="30"))
    try:
        session = httpx.post(f"{base}/apps/chat/users/u/sessions").json()["id"]
        with pytest.raises(httpx.TimeoutException):
            httpx.post(f"{base}/run", timeout=1, json={
                "appName": "chat", "userId": "u", "sessionId": session,
                "newMessage": {"role": "user", "parts": [{"text": "anyone?"}]}})
        api.proc.send_signal(signal.SIGTERM)
        api.proc.wait(15)  # it stops, well before the 30 s it would allow open requests
    finally:
        api.stop()
