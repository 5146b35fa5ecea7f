"""``adk-celery api`` artifact routes (google-adk's JSON) and the lists of invocations, over
real processes (redis-server, orchestrator, worker, API), as an HTTP client and an operator
at a shell see them."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
import redis

from tests.apps import APP_SPECS
from tests.apps_artifacts import APP_SPECS as ARTIFACT_APP_SPECS
from tests.support import forked
from tests.support.processes import stack_env, start_celery_process
from tests.test_api import frames, start_api

TOKENS = {"tok-all": ["*"], "tok-chat": ["chat"]}
ALL = {"Authorization": "Bearer tok-all"}
CHAT = {"Authorization": "Bearer tok-chat"}


@pytest.fixture(scope="module")
def stack(redis_url):
    url = redis_url.rsplit("/", 1)[0] + "/13"
    redis.Redis.from_url(url).flushdb()
    env = stack_env(url, f"{APP_SPECS},{ARTIFACT_APP_SPECS}", lease_retry_seconds="0.2")
    processes = [start_celery_process("orchestrator", "orch-lists", env),
                 start_celery_process("worker", "work-lists", env)]
    api, base = start_api({**env, "ADK_CELERY_API_TOKENS": json.dumps(TOKENS)})
    processes.append(api)
    try:
        yield {"base": base, "env": env}
    finally:
        for process in processes:
            process.stop()


def new_session(base: str, app: str, user: str) -> str:
    created = httpx.post(f"{base}/apps/{app}/users/{user}/sessions", headers=ALL)
    assert created.status_code == 200, created.text
    return created.json()["id"]


def run(base: str, app: str, user: str, session_id: str, text: str) -> list[dict]:
    response = httpx.post(f"{base}/run", headers=ALL, timeout=30, json={
        "appName": app, "userId": user, "sessionId": session_id,
        "newMessage": {"role": "user", "parts": [{"text": text}]}})
    assert response.status_code == 200, response.text
    return response.json()


def get(url: str, headers: dict[str, str] = ALL, **params: object) -> httpx.Response:
    return httpx.get(url, headers=headers, params=params, timeout=30)


# --- artifacts ------------------------------------------------------------------------------


def test_artifacts_a_tool_saved_on_a_worker_are_served_as_adk_serves_them(stack):
    base = stack["base"]
    session_id = new_session(base, "reports", "ann")
    events = run(base, "reports", "ann", session_id, "Q3 sales")
    assert events[-1]["content"]["parts"][0]["text"] == "saved version 0"
    artifacts = f"{base}/apps/reports/users/ann/sessions/{session_id}/artifacts"

    assert get(artifacts).json() == ["report.txt", "user:notes.txt"]
    assert get(f"{artifacts}/report.txt").json() == {"text": "report: Q3 sales"}
    assert get(f"{artifacts}/user:notes.txt").json() == {"text": "kept for every session"}

    pdf = base64.urlsafe_b64encode(b"%PDF-1.7 \xff").decode()
    saved = httpx.post(artifacts, headers=ALL, json={
        "filename": "report.txt", "artifact": {"inlineData": {"data": pdf, "mimeType": "application/pdf"}},
        "customMetadata": {"by": "api"}})
    assert saved.status_code == 200, saved.text
    version = saved.json()
    assert {k: version[k] for k in ("version", "customMetadata", "mimeType")} == {
        "version": 1, "customMetadata": {"by": "api"}, "mimeType": "application/pdf"}
    assert version["canonicalUri"].endswith(f"/sessions/{session_id}/artifacts/report.txt/versions/1")

    assert get(f"{artifacts}/report.txt/versions").json() == [0, 1]
    assert get(f"{artifacts}/report.txt", version=0).json() == {"text": "report: Q3 sales"}
    latest = {"inlineData": {"data": pdf, "mimeType": "application/pdf"}}
    assert get(f"{artifacts}/report.txt").json() == latest
    assert get(f"{artifacts}/report.txt/versions/1").json() == latest
    assert get(f"{artifacts}/report.txt/versions/latest").json() == latest
    metadata = get(f"{artifacts}/report.txt/versions/metadata").json()
    assert [(m["version"], m["mimeType"]) for m in metadata] == [(0, "text/plain"), (1, "application/pdf")]
    assert get(f"{artifacts}/report.txt/versions/0/metadata").json() == metadata[0]

    deleted = httpx.delete(f"{artifacts}/report.txt", headers=ALL)
    assert (deleted.status_code, deleted.json()) == (200, None)
    assert get(artifacts).json() == ["user:notes.txt"]
    assert get(f"{artifacts}/report.txt/versions").json() == []


def test_unknown_artifacts_and_bad_requests_answer_as_adk(stack):
    base = stack["base"]
    session_id = new_session(base, "reports", "ben")
    artifacts = f"{base}/apps/reports/users/ben/sessions/{session_id}/artifacts"
    not_found = {"detail": "Artifact not found"}
    for url, params in ((f"{artifacts}/nope.txt", {}), (f"{artifacts}/nope.txt", {"version": 3}),
                        (f"{artifacts}/nope.txt/versions/0", {}),
                        (f"{base}/apps/reports/users/ben/sessions/no-such/artifacts/x", {})):
        missing = get(url, **params)
        assert (missing.status_code, missing.json()) == (404, not_found), url
    no_version = get(f"{artifacts}/nope.txt/versions/latest/metadata")
    assert (no_version.status_code, no_version.json()) == (404, {"detail": "Artifact version not found"})
    assert get(f"{base}/apps/reports/users/ben/sessions/no-such/artifacts").json() == []

    empty = httpx.post(artifacts, headers=ALL, json={"filename": "a.txt", "artifact": {}})
    assert empty.status_code == 400 and empty.json()["detail"].startswith(
        "Not supported artifact type.")
    assert get(f"{artifacts}/a.txt/versions/first").json() == {
        "detail": "Invalid version ID"}
    nested: list = []
    for _ in range(40):
        nested = [nested]
    deep = httpx.post(artifacts, headers=ALL, json={
        "filename": "a.txt", "artifact": {"text": "x"}, "customMetadata": {"k": nested}})
    assert deep.status_code == 422 and deep.json()["detail"].startswith("custom_metadata")
    assert get(artifacts).json() == []  # nothing refused was stored
    assert get(artifacts, headers=CHAT).status_code == 403
    assert get(artifacts, headers={}).status_code == 401


# --- lists of invocations -------------------------------------------------------------------


def test_a_sessions_invocations_newest_first_page_by_page(stack):
    base = stack["base"]
    session_id = new_session(base, "chat", "cid")
    ids = [run(base, "chat", "cid", session_id, f"message {i}")[0]["invocationId"] for i in range(3)]
    listed = f"{base}/apps/chat/users/cid/sessions/{session_id}/invocations"

    page = get(listed).json()
    assert [i["invocationId"] for i in page["invocations"]] == ids[::-1]
    assert {i["status"] for i in page["invocations"]} == {"completed"} and page["nextCursor"] is None
    assert set(page["invocations"][0]) >= {"invocationId", "appName", "userId", "sessionId", "status",
                                           "error", "pendingCalls", "createdAt", "updatedAt"}
    first = get(listed, limit=2).json()
    second = get(listed, limit=2, cursor=first["nextCursor"]).json()
    assert [i["invocationId"] for i in first["invocations"] + second["invocations"]] == ids[::-1]
    assert second["nextCursor"] is None
    assert get(listed, status="paused").json() == {"invocations": [], "nextCursor": None}

    missing = get(f"{base}/apps/chat/users/cid/sessions/no-such/invocations")
    assert (missing.status_code, missing.json()) == (404, {"detail": "Session not found"})
    assert get(listed, headers=CHAT).status_code == 200
    assert get(f"{base}/apps/chat/invocations", headers=CHAT).status_code == 200


def test_an_apps_invocations_by_status_follow_them_through_pause_answer_and_cancel(stack):
    base = stack["base"]
    session_id = new_session(base, "approval", "dee")
    paused = [run(base, "approval", "dee", session_id, f"pay {n}")[-1] for n in (1, 2)]
    answered, cancelled = (event["invocationId"] for event in paused)

    def ids(status: str) -> list[str]:
        return [i["invocationId"] for i in get(f"{base}/apps/approval/invocations", status=status)
                .json()["invocations"]]

    assert ids("paused")[:2] == [cancelled, answered]
    call_id = paused[0]["content"]["parts"][0]["functionCall"]["id"]
    assert httpx.post(f"{base}/apps/approval/invocations/{answered}/answer", headers=ALL,
                      json={"functionCallId": call_id, "response": {"approved": True}}).status_code == 202
    assert httpx.post(f"{base}/apps/approval/invocations/{cancelled}/cancel", headers=ALL).status_code == 202
    for invocation_id, end in ((answered, "completed"), (cancelled, "cancelled")):
        followed = frames(get(f"{base}/apps/approval/invocations/{invocation_id}/stream"))
        assert followed[-1]["data"] == {"status": end}

    assert answered not in ids("paused") and cancelled not in ids("paused")
    assert answered in ids("completed") and cancelled in ids("cancelled")
    assert ids("completed")[0] == answered  # latest updated first
    everything = [i["invocationId"] for i in get(f"{base}/apps/approval/invocations").json()["invocations"]]
    assert everything.count(answered) == everything.count(cancelled) == 1
    session = get(f"{base}/apps/approval/users/dee/sessions/{session_id}/invocations").json()
    assert [(i["invocationId"], i["status"]) for i in session["invocations"]] == [
        (cancelled, "cancelled"), (answered, "completed")]


def test_bad_list_requests_are_422_naming_the_field_and_tokens_see_their_apps(stack):
    base = stack["base"]
    app_list = f"{base}/apps/approval/invocations"
    for params, field in (({"status": "sleeping"}, "status: must be one of queued, running"),
                          ({"limit": "0"}, "limit: must be a whole number"),
                          ({"limit": "many"}, "limit: must be a whole number"),
                          ({"cursor": "not-a-cursor"}, "cursor: is not a cursor")):
        refused = get(app_list, **params)
        assert refused.status_code == 422 and refused.json()["detail"].startswith(field), params
    assert get(app_list, headers=CHAT).status_code == 403
    assert get(f"{base}/apps/nope/invocations").status_code == 404


# --- the operator's command -----------------------------------------------------------------


def cli(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return forked.run([sys.executable, "-m", "workers.cli", *argv], env=env, timeout=60)


def test_adk_celery_invocations_lists_pages_and_refuses_bad_input(stack):
    base, env = stack["base"], stack["env"]
    session_id = new_session(base, "approval", "eve")
    waiting = [run(base, "approval", "eve", session_id, f"pay {n}")[-1]["invocationId"] for n in (3, 4)]

    by_session = cli(env, "invocations", "--app", "approval", "--user", "eve", "--session", session_id)
    assert by_session.returncode == 0, by_session.stderr
    rows = [line.split("\t") for line in by_session.stdout.splitlines()]
    assert [row[:4] for row in rows] == [[i, "paused", "eve", session_id] for i in waiting[::-1]]

    first = cli(env, "invocations", "--app", "approval", "--status", "paused", "--limit", "1")
    assert first.returncode == 0 and first.stdout.split("\t")[0] == waiting[1]
    assert first.stderr.startswith("adk-celery: more invocations: --cursor ")
    cursor = first.stderr.split("--cursor ")[1].strip()
    second = cli(env, "invocations", "--app", "approval", "--status", "paused", "--limit", "1",
                 "--cursor", cursor, "--json")
    assert second.returncode == 0, second.stderr
    shown = json.loads(second.stdout)
    assert [i["invocation_id"] for i in shown["invocations"]] == [waiting[0]]
    assert shown["invocations"][0]["status"] == "paused" and "new_message" not in shown["invocations"][0]

    usage = ((("--app", "approval", "--verbose"), "unrecognized arguments: --verbose"),
             (("--app", "approval", "--status", "sleeping"), "invalid choice: 'sleeping'"),
             (("--status", "paused"), "the following arguments are required: --app"))
    one_line = ((("--session", session_id), "adk-celery: error: --user and --session go together"),
                (("--cursor", "x"), "adk-celery: error: cursor: is not a cursor"),
                (("--limit", "0"), "adk-celery: error: limit: must be a whole number"))
    with ThreadPoolExecutor(4) as pool:  # one process each, side by side
        refusals = list(pool.map(lambda argv: cli(env, "invocations", *argv),
                                 [argv for argv, _ in usage]
                                 + [("--app", "approval", *argv) for argv, _ in one_line]))
        down = pool.submit(cli, {**env, "ADK_CELERY_REDIS_URL": "redis://127.0.0.1:1/0"},
                           "invocations", "--app", "approval").result()
    for (_, said), refused in zip(usage, refusals[:3], strict=True):
        assert refused.returncode == 2 and refused.stderr.startswith("usage: adk-celery"), refused.stderr
        assert said in refused.stderr
    for (_, said), refused in zip(one_line, refusals[3:], strict=True):
        assert refused.returncode == 2 and refused.stderr.startswith(said), refused.stderr
        assert len(refused.stderr.splitlines()) == 1
    assert down.returncode == 2 and down.stderr.startswith("adk-celery: error: cannot reach Redis")
