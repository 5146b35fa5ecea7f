"""Any service can enqueue an invocation with plain Celery ``send_task`` and JSON kwargs.

The sender is a separate Python process that imports only ``celery`` (it checks that
``orchestrator``, ``workers`` and ``google`` were never imported); the test follows the
invocations with :class:`workers.client.Client`. Real processes on Redis db 4, with a small
``ADK_CELERY_MAX_PAYLOAD_BYTES`` so an oversized message is cheap to build.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import redis

from config import Settings
from orchestrator.distributed.models import InvocationStatus
from tests.apps import APP_SPECS
from tests.support.events import simplify_all
from tests.support.processes import ROOT, stack_env, start_celery_process

MAX_PAYLOAD = 4096
QUEUE = "adk.invocations"
SCRIPT = ROOT / "tests" / "support" / "send_task_client.py"


@pytest.fixture(scope="module")
def plain_stack(redis_url):
    """Redis db 4, one orchestrator and one worker with a 4 KiB payload limit."""
    url = redis_url.rsplit("/", 1)[0] + "/4"
    redis.Redis.from_url(url).flushdb()
    env = stack_env(url, APP_SPECS, lease_retry_seconds="0.2", max_payload_bytes=str(MAX_PAYLOAD))
    orchestrator = start_celery_process("orchestrator", "plain-orch", env)
    try:
        worker = start_celery_process("worker", "plain-work", env)
    except BaseException:
        orchestrator.stop()
        raise
    from workers.client import Client

    client = Client(Settings(redis_url=url, apps=APP_SPECS, lease_retry_seconds=0.2,
                             max_payload_bytes=MAX_PAYLOAD))
    try:
        yield {"client": client, "url": url}
    finally:
        client.close()
        orchestrator.stop()
        worker.stop()


def send_plain(url: str, messages: list[dict[str, Any]], tmp_path: Path) -> list[dict[str, Any]]:
    """Run the celery-only sender in its own isolated interpreter; return the task results."""
    spec = {"redis_url": url, "queue": QUEUE, "timeout": 15, "messages": messages}
    # -I: no PYTHONPATH, no script directory on sys.path; cwd outside the project.
    done = subprocess.run(
        [sys.executable, "-I", str(SCRIPT), json.dumps(spec)],
        cwd=tmp_path, capture_output=True, text=True, timeout=30,
    )
    assert done.returncode == 0, f"sender failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    assert lines[-1] == {"modules_checked": True}, lines
    assert len(lines) == len(messages) + 1, lines
    return lines[:-1]


def test_plain_send_task_starts_an_invocation_the_client_can_follow(plain_stack, tmp_path):
    client = plain_stack["client"]
    content = {"role": "user", "parts": [{"text": "look up Paris"}]}
    [lookup, chat] = send_plain(plain_stack["url"], [
        {"app_name": "lookup", "user_id": "svc", "new_message": content},
        {"app_name": "chat", "user_id": "svc", "new_message": "hello there",
         "invocation_id": "e-plain-chat-1", "state_delta": {"source": "plain"}},
    ], tmp_path)
    assert set(lookup) == {"invocation_id", "session_id"}, lookup
    assert chat["invocation_id"] == "e-plain-chat-1"

    record = client.wait("lookup", lookup["invocation_id"], timeout=15, until=InvocationStatus.FINISHED)
    assert record.status is InvocationStatus.COMPLETED, record.error
    assert record.session_id == lookup["session_id"]
    shape = simplify_all(client.events("lookup", lookup["invocation_id"]))
    assert shape[0] == ("user", "look up Paris")
    assert shape[1] == ("agent", ("call", "slow_lookup", {"city": "Paris"}))
    assert shape[2][1][:2] == ("response", "slow_lookup")
    assert shape[3][1].startswith("Paris found by pid ")

    record = client.wait("chat", "e-plain-chat-1", timeout=15, until=InvocationStatus.FINISHED)
    assert record.status is InvocationStatus.COMPLETED, record.error
    events = client.events("chat", "e-plain-chat-1")
    assert simplify_all(events) == [("user", "hello there"), ("agent", "reply to hello there")]
    assert events[0].actions.state_delta == {"source": "plain"}


def test_malformed_plain_messages_fail_the_invocation_and_append_nothing(plain_stack, tmp_path):
    client = plain_stack["client"]
    session = client.create_session("chat", "svc")
    [ok] = send_plain(plain_stack["url"], [
        {"app_name": "chat", "user_id": "svc", "session_id": session.id, "new_message": "first"},
    ], tmp_path)
    assert client.wait("chat", ok["invocation_id"], timeout=15, until=InvocationStatus.FINISHED).status is (
        InvocationStatus.COMPLETED)

    def session_events() -> list[Any]:
        stored = client._runtime.run(client._services().sessions.get_session(
            app_name="chat", user_id="svc", session_id=session.id))
        return [e.id for e in stored.events]

    before = session_events()
    assert len(before) == 2

    bad = {
        "wrong type": ({"new_message": 42}, "new_message: must be text or a Content object, not int"),
        "list": ({"new_message": ["a", "b"]}, "new_message: must be text or a Content object, not list"),
        "bad content": ({"new_message": {"role": "user", "parts": "oops"}},
                        "new_message: is not a valid Content"),
        "no parts": ({"new_message": {"role": "user", "parts": []}}, "new_message: has no parts"),
        "bad delta": ({"new_message": "hi", "state_delta": ["x"]}, "state_delta: must be a JSON object"),
        "oversized": ({"new_message": "x" * (MAX_PAYLOAD + 100)},
                      f"over the limit of {MAX_PAYLOAD} bytes (ADK_CELERY_MAX_PAYLOAD_BYTES)"),
        "oversized delta": ({"new_message": "hi", "state_delta": {"blob": "y" * MAX_PAYLOAD}},
                            f"over the limit of {MAX_PAYLOAD} bytes"),
    }
    results = send_plain(plain_stack["url"], [
        {"app_name": "chat", "user_id": "svc", "session_id": session.id, **kwargs}
        for kwargs, _ in bad.values()
    ], tmp_path)
    for (case, (_, expected)), result in zip(bad.items(), results, strict=True):
        assert set(result) == {"invocation_id", "session_id"}, (case, result)
        record = client.wait("chat", result["invocation_id"], timeout=15, until=InvocationStatus.FINISHED)
        assert record.status is InvocationStatus.FAILED, (case, record)
        assert expected in (record.error or ""), (case, record.error)
        assert record.error.startswith("PayloadError: "), (case, record.error)
        assert client.events("chat", result["invocation_id"]) == [], case
    assert session_events() == before  # nothing appended to the session

    # A later good message to the same session still works (the session was not wedged).
    [after] = send_plain(plain_stack["url"], [
        {"app_name": "chat", "user_id": "svc", "session_id": session.id, "new_message": "second"},
    ], tmp_path)
    assert client.wait("chat", after["invocation_id"], timeout=15, until=InvocationStatus.FINISHED).status is (
        InvocationStatus.COMPLETED)
    assert len(session_events()) == 4


def test_plain_message_without_app_or_user_is_rejected_with_a_reason(plain_stack, tmp_path):
    [no_app, no_user] = send_plain(plain_stack["url"], [
        {"user_id": "svc", "new_message": "hi"},
        {"app_name": "chat", "user_id": "", "new_message": "hi"},
    ], tmp_path)
    assert no_app == {"error": "app_name: is required."}
    assert no_user == {"error": "user_id: must not be empty."}


def test_a_plain_message_holding_a_kombu_type_envelope_is_refused_naming_the_field(
    plain_stack, tmp_path,
):
    """Stock Celery's "json" decoder would turn such an object into another value (a date) or
    fail on it: the message is refused, its sender told which field, and nothing is stored."""
    client = plain_stack["client"]
    cases = {
        "e-plain-envelope-date": {"state_delta": {"note": {"__type__": "date", "__value__": "2020-01-01"}}},
        "e-plain-envelope-money": {"state_delta": {"note": {"__type__": "money", "__value__": "12 EUR"}}},
        "e-plain-envelope-message": {"new_message": {"role": "user", "parts": [
            {"text": "hi"}, {"text": "x", "thought_signature": {"__type__": "base64", "__value__": "eA=="}}]}},
    }
    results = send_plain(plain_stack["url"], [
        {"app_name": "chat", "user_id": "svc", "new_message": "hello", "invocation_id": inv, **fields}
        for inv, fields in cases.items()
    ], tmp_path)
    expected = ["kwargs.state_delta.note", "kwargs.state_delta.note",
                "kwargs.new_message.parts[1].thought_signature"]
    for inv, where, result in zip(cases, expected, results, strict=True):
        assert set(result) == {"failed"}, (inv, result)
        assert f"Message refused: {where} is an object shaped like kombu's type envelope" in (
            result["failed"]), (inv, result)
        assert client.status("chat", inv) is None, inv

    # The same sender's plain messages without such an object still start invocations.
    [ok] = send_plain(plain_stack["url"], [
        {"app_name": "chat", "user_id": "svc", "new_message": "hello",
         "state_delta": {"note": {"__type__": "date"}}},
    ], tmp_path)
    record = client.wait("chat", ok["invocation_id"], timeout=15, until=InvocationStatus.FINISHED)
    assert record.status is InvocationStatus.COMPLETED, record.error
