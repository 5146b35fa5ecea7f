"""``adk-celery api`` artifact routes (google-adk's JSON) and the lists of invocations, over
real processes (redis-server, orchestrator, worker, API), as an HTTP client and an operator
at a shell see them."""

from __future__ import annotations

import base64
import json

import httpx
import pytest
import redis

from tests.apps import APP_SPECS
from tests.apps_artifacts import APP_SPECS as ARTIFACT_APP_SPECS
from tests.support.processes import stack_env, start_celery_process
from tests.test_api import start_api

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
    assert empty.status_code == 422 and empty.json()["detail"].startswith("artifact: ")
    assert get(f"{artifacts}/a.txt/versions/first").json() == {
        "detail": "version_id: must be a version number or 'latest'"}
    nested: list = []
    for _ in range(40):
        nested = [nested]
    deep = httpx.post(artifacts, headers=ALL, json={
        "filename": "a.txt", "artifact": {"text": "x"}, "customMetadata": {"k": nested}})
    assert deep.status_code == 422 and deep.json()["detail"].startswith("custom_metadata")
    assert get(artifacts).json() == []  # nothing refused was stored
    assert get(artifacts, headers=CHAT).status_code == 403
    assert get(artifacts, headers={}).status_code == 401
