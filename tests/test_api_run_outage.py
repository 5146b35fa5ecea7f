"""A run the API accepted is followed through a Redis restart, never answered "retry".

Real processes: an AOF redis-server (nothing acknowledged is lost across its restart), an
orchestrator, a worker and ``adk-celery api``. Three runs are under way, each with its
tool running on the worker (waiting for a file of the test's, not for Redis): a ``/run``, a
``/run_sse``, and a ``/run`` that resumes a paused invocation with its answer (with its
``invocationId``). Redis then goes away for longer than the API's stream reader rides out
(the API says so in its log: its followers' reads failed) and comes back on the same port
and data. Each door must answer what the run did, as if nothing happened: 200 with the
completed events (the SSE stream without an error frame). An answer that told the client to
send again (503 ``retry``) would make it run the turn twice: the invocation it was about
goes on regardless. Each session has its one message and its one answer.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.apps_outage import APP_SPECS
from tests.support.processes import ManagedProcess, stack_env, start_celery_process
from tests.support.redis_server import RedisServer, find_redis_server, free_port

WAIT_SECONDS = 60.0
"""Bound on each step that waits for a process (a start, a tool starting, a reply)."""

pytestmark = pytest.mark.skipif(find_redis_server() is None, reason="redis-server is not installed")


@pytest.fixture
def server() -> Iterator[RedisServer]:
    handle = RedisServer(aof=True)
    handle.start()
    try:
        yield handle
    finally:
        handle.close()


def _start_api(env: dict[str, str]) -> tuple[ManagedProcess, str]:
    port = free_port()
    api = ManagedProcess("api", [sys.executable, "-m", "workers.cli", "api", "--port", str(port)], env)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + WAIT_SECONDS
    while True:
        assert api.proc.poll() is None, api.output()
        try:
            if httpx.get(f"{base}/health", timeout=1).status_code == 200:
                return api, base
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, api.output()
        time.sleep(0.05)


def _wait_for_file(path: Path, *processes: ManagedProcess) -> None:
    """Until the worker's tool says it started (it writes the file)."""
    deadline = time.monotonic() + WAIT_SECONDS
    while not path.exists():
        assert time.monotonic() < deadline, "\n\n".join(
            f"--- {p.name}:\n{p.output()}" for p in processes)
        time.sleep(0.02)


def _frames(body: str) -> list[dict[str, Any]]:
    return [json.loads(line[len("data: "):]) for line in body.splitlines() if line.startswith("data: ")]


def _text(event: dict[str, Any]) -> str | None:
    parts = (event.get("content") or {}).get("parts") or [{}]
    return parts[0].get("text")


def _told(reply: httpx.Response) -> tuple[int, str | None, list[Any], str | None]:
    """A door's answer: its status, Retry-After, error frames, and the last event's text."""
    if reply.headers.get("content-type", "").startswith("text/event-stream"):
        frames = _frames(reply.text)
        errors = [frame for frame in frames if "error" in frame]
        return reply.status_code, reply.headers.get("retry-after"), errors, _text(frames[-1])
    body = reply.json()
    last = _text(body[-1]) if isinstance(body, list) and body else json.dumps(body)
    return reply.status_code, reply.headers.get("retry-after"), [], last


def _message(text: str) -> dict[str, Any]:
    return {"role": "user", "parts": [{"text": text}]}


def test_runs_under_way_are_followed_through_a_redis_restart(server: RedisServer, tmp_path: Path) -> None:
    env = stack_env(server.url, APP_SPECS, lease_retry_seconds="0.2")
    with ExitStack() as stack:
        processes = []
        for kind in ("orchestrator", "worker"):
            process = start_celery_process(kind, f"outage-{kind}", env)
            stack.callback(process.kill)
            processes.append(process)
        api, base = _start_api(env)
        stack.callback(api.kill)
        processes.append(api)
        http = httpx.Client(base_url=base, timeout=WAIT_SECONDS * 2)
        stack.callback(http.close)

        def new_session() -> str:
            return http.post("/apps/released/users/u/sessions").json()["id"]

        def request(session: str, message: dict[str, Any], **more: Any) -> dict[str, Any]:
            return {"appName": "released", "userId": "u", "sessionId": session,
                    "newMessage": message, **more}

        gates = {door: tmp_path / door for door in ("run", "run_sse", "resume")}
        sessions = {door: new_session() for door in gates}
        # The resumed run: paused on a call answered from outside, then answered by /run.
        paused = http.post("/run", json=request(sessions["resume"], _message(f"ask {gates['resume']}")))
        assert paused.status_code == 200, paused.text
        asked = paused.json()[-1]
        call = asked["content"]["parts"][0]["functionCall"]
        answer = {"role": "user", "parts": [{"functionResponse": {
            "id": call["id"], "name": "ask_human", "response": {"go": True}}}]}

        replies: dict[str, httpx.Response] = {}
        sends = {
            "run": lambda: http.post("/run", json=request(sessions["run"], _message(f"file {gates['run']}"))),
            "run_sse": lambda: http.post("/run_sse", json=request(sessions["run_sse"],
                                                                  _message(f"file {gates['run_sse']}"))),
            "resume": lambda: http.post("/run", json=request(sessions["resume"], answer,
                                                             invocationId=asked["invocationId"])),
        }

        def send(door: str) -> None:
            replies[door] = sends[door]()

        threads = [threading.Thread(target=send, args=(door,), daemon=True) for door in sends]
        for thread in threads:
            thread.start()
        for gate in gates.values():  # every tool runs: every run is accepted and followed
            _wait_for_file(Path(f"{gate}.started"), *processes)

        server.stop()  # SHUTDOWN NOSAVE: the AOF (appendfsync always) has every write
        # Down until the API's stream reader has given up its retries: its followers were told.
        api.wait_for_line(lambda line: "Live stream reader: Redis unavailable" in line,
                          timeout=WAIT_SECONDS)
        server.start()  # the same port and data directory
        for gate in gates.values():
            gate.write_text("go")
        for thread in threads:
            thread.join(WAIT_SECONDS * 2)
        assert replies.keys() == sends.keys(), api.output()

        # What each client was told: the completed run, never "retry".
        told = {door: _told(reply) for door, reply in replies.items()}
        assert told == {door: (200, None, [], f"{door} released=True") for door in sends}, api.output()
        resumed = replies["resume"].json()
        assert {event["invocationId"] for event in resumed} == {asked["invocationId"]}

        # One message, one answer each: nothing ran twice.
        for door, session in sessions.items():
            stored = http.get(f"/apps/released/users/u/sessions/{session}").json()["events"]
            messages = [e for e in stored if e["author"] == "user" and _text(e)]
            answers = [_text(e) for e in stored if e["author"] != "user" and _text(e)]
            assert len(messages) == 1, (door, stored)
            assert answers == [f"{door} released=True"], (door, stored)
            listed = http.get(f"/apps/released/users/u/sessions/{session}/invocations").json()
            assert [i["status"] for i in listed["invocations"]] == ["completed"], (door, listed)
