"""A stopping API ends the follows it holds at once, cleanly, instead of cutting them.

uvicorn waits up to its graceful timeout (``ADK_CELERY_API_SHUTDOWN_SECONDS``) for open
requests, then cancels them: a ``/run`` or an SSE follow of an invocation that waits (here:
no orchestrator takes it) was cut off, and the API logged a traceback for each. Told at the
signal, a ``/run`` answers 503 naming its invocation (sent again with that id elsewhere, it
follows it) and an SSE follow ends with an error frame.
"""

from __future__ import annotations

import signal
import threading
import uuid
from typing import Any

import httpx
import redis

from orchestrator.backends.redis import keys
from tests.apps import APP_SPECS
from tests.support.polling import eventually
from tests.support.processes import stack_env
from tests.test_api import frames, start_api


def test_a_stopping_api_ends_a_waiting_run_and_an_sse_follow_cleanly(redis_url):
    url = redis_url.rsplit("/", 1)[0] + "/4"
    check = redis.Redis.from_url(url)
    check.flushdb()
    # No orchestrator: the run stays queued, its /run and its follow wait on it.
    api, base = start_api(stack_env(url, APP_SPECS, api_shutdown_seconds="60"))
    try:
        session = httpx.post(f"{base}/apps/chat/users/u/sessions").json()["id"]
        invocation_id = f"e-{uuid.uuid4()}"
        replies: dict[str, Any] = {}

        def run() -> None:
            replies["run"] = httpx.post(f"{base}/run", timeout=120, json={
                "appName": "chat", "userId": "u", "sessionId": session,
                "invocationId": invocation_id, "newMessage": {"role": "user", "parts": [{"text": "hi"}]}})

        def follow() -> None:
            with httpx.stream("GET", f"{base}/apps/chat/invocations/{invocation_id}/stream",
                              timeout=120) as stream:
                replies["first_line"] = threading.Event()
                body = []
                for line in stream.iter_lines():
                    body.append(line)
                    replies["first_line"].set()
                replies["follow"] = "\n".join(body)

        runner = threading.Thread(target=run)
        runner.start()
        eventually("the run queued", lambda: check.exists(keys.invocation("chat", invocation_id)))
        follower = threading.Thread(target=follow)
        follower.start()
        eventually("the follow under way", lambda: replies.get("first_line")
                   and replies["first_line"].is_set())

        api.proc.send_signal(signal.SIGTERM)
        runner.join(60)
        follower.join(60)
        assert api.proc.wait(60) in (0, -signal.SIGTERM)  # uvicorn re-raises the signal it got

        stopped = replies["run"]
        assert stopped.status_code == 503 and stopped.headers["retry-after"] == "1"
        assert stopped.json()["invocationId"] == invocation_id
        assert "stopping" in stopped.json()["detail"]
        ended = frames(httpx.Response(200, text=replies["follow"] + "\n\n"))
        assert ended[-1]["event"] == "error" and "stopping" in ended[-1]["data"]["error"]
        assert "Traceback" not in api.output() and "Exception in ASGI" not in api.output()
    finally:
        api.stop()
        check.close()
