"""``adk-celery enqueue``, ``answer``, ``sessions`` and the rest on bad input and a bad Redis URL:
one line on stderr, exit status 2, nothing stored, never a traceback or a password; payloads
too long for a command line through stdin or a file; a hint when a follow stays queued.

Real ``adk-celery`` processes, a real redis-server (db 1: nothing serves it), and real
orchestrator and worker processes (``celery_stack``) for what must run.
"""

from __future__ import annotations

import argparse
import io
import json
import socket
import subprocess
import sys
import threading

import pytest
import redis

from config import Settings
from orchestrator.distributed.models import InvocationStatus
from tests.support import forked
from tests.support.processes import stack_env
from workers import cli_follow
from workers.client import Client

SECRET = "S3cretPw"


def cli(env: dict[str, str], *argv: str, stdin: str | None = None,
        timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return forked.run([sys.executable, "-m", "workers.cli", *argv], env=env, timeout=timeout,
                      input=stdin)


def one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    """The error line of a command that failed with exit status 2 and wrote nothing else."""
    assert (done.returncode, done.stdout) == (2, ""), (done.returncode, done.stdout, done.stderr)
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("adk-celery: error: "), done.stderr
    return done.stderr[len("adk-celery: error: "):-1]


@pytest.fixture
def unserved(redis_url):
    """(env, check): the environment of commands on db 1 (flushed, no orchestrator), and a client."""
    url = redis_url.rsplit("/", 1)[0] + "/1"
    check = redis.Redis.from_url(url, decode_responses=True)
    check.flushdb()
    try:
        yield stack_env(url, ""), check
    finally:
        check.flushdb()
        check.close()


# --- C, D, F: refused enqueues store nothing ------------------------------------------------------


def test_an_enqueue_for_a_missing_or_empty_session_exits_2_storing_nothing(unserved):
    env, check = unserved
    missing = cli(env, "enqueue", "chat", "u", "hi", "--session-id", "no-such", "--wait")
    assert one_error_line(missing) == ("session_id: no session 'no-such' of app 'chat', user 'u' "
                                       "(leave it out for a new session).")
    empty = cli(env, "enqueue", "chat", "u", "hi", "--session-id", "")
    assert one_error_line(empty).startswith("session_id: must not be empty")
    no_user = cli(env, "sessions", "chat", "")
    assert one_error_line(no_user) == "user_id: must not be empty."
    assert check.keys("*") == []


def test_an_app_the_environment_does_not_name_is_refused(unserved):
    env, check = unserved
    done = cli({**env, "ADK_CELERY_APPS": "tests.apps:chat_app,tests.apps:approval_app"},
               "enqueue", "tripplanner", "u1", "hi")
    assert one_error_line(done) == ("app_name: 'tripplanner' is not an app of this client "
                                    "(ADK_CELERY_APPS: approval, chat).")
    assert check.keys("*") == []  # it left a session and a failed record under that name
    broken = cli({**env, "ADK_CELERY_APPS": "tests.no_such_module:app"}, "enqueue", "chat", "u1", "hi")
    assert one_error_line(broken).startswith(
        "ADK_CELERY_APPS (Settings.apps): App spec 'tests.no_such_module:app': cannot import")


# --- J: options that mean nothing without --wait or --follow --------------------------------------


@pytest.mark.parametrize(("options", "said"), [
    (("--timeout", "5"), "--timeout needs --wait or --follow (without them enqueue does not wait)"),
    (("--until-paused",), "--until-paused needs --wait or --follow (without them enqueue does not "
                          "wait)"),
    (("--wait", "--follow"), "--wait and --follow: choose one (--follow prints the events as they "
                             "happen, --wait once it pauses or ends)"),
])
def test_enqueue_refuses_options_it_would_ignore(unserved, options, said):
    env, check = unserved
    done = cli(env, "enqueue", "chat", "u", "hi", *options)
    assert done.returncode == 2 and done.stderr.startswith("usage: adk-celery enqueue")
    assert done.stderr.splitlines()[-1] == f"adk-celery enqueue: error: {said}"
    assert check.keys("*") == []


# --- G: a Redis URL that is not right --------------------------------------------------------------


@pytest.fixture
def not_redis():
    """The port of a server that answers like an HTTP server, to anything."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:  # closed: the test is over
                return
            with connection:
                connection.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield listener.getsockname()[1]
    finally:
        listener.close()


def test_a_redis_url_that_is_not_right_is_one_line_without_its_password(redis_url, not_redis):
    env = stack_env(redis_url, "")
    host = redis_url.rsplit("/", 1)[0].removeprefix("redis://")
    for url, said in [
        (f"redis://{host}/99", "Redis error (ResponseError: DB index is out of range)"),
        (f"redis://:{SECRET}@127.0.0.1:{not_redis}/0", "Redis error (InvalidResponse: Protocol "
                                                        "error, got \"H\" as reply type byte)"),
    ]:
        for argv in (("status", "chat", "e-1"), ("enqueue", "chat", "u", "hi")):
            done = cli({**env, "ADK_CELERY_REDIS_URL": url}, *argv)
            assert one_error_line(done) == (
                f"{said}; is ADK_CELERY_REDIS_URL right (the host and port of a Redis server, its "
                "database number, user and password)?"), argv
            assert SECRET not in done.stderr


# --- J, K: payloads through stdin or a file; an answer that is not an object ----------------------


@pytest.fixture(scope="module")
def env(celery_stack):
    return stack_env(celery_stack["url"], "")


def test_an_answer_longer_than_a_command_line_is_read_from_a_file_or_stdin(celery_stack, env,
                                                                           tmp_path):
    client = celery_stack["client"]
    note = "n" * 200_000  # past the 128 KiB a single command-line argument may hold
    for source in ("file", "stdin"):
        invocation_id = client.enqueue("approval", f"ops-{source}", "pay 6")
        [call_id] = client.wait("approval", invocation_id, timeout=15).pending_calls
        response = json.dumps({"approved": True, "note": note})
        if source == "file":
            (tmp_path / "answer.json").write_text(response)
            done = cli(env, "answer", "approval", invocation_id, call_id, f"@{tmp_path}/answer.json")
        else:
            done = cli(env, "answer", "approval", invocation_id, call_id, "-", stdin=response)
        assert (done.returncode, done.stdout) == (0, f"answered {call_id}\n"), done.stderr
        record = client.wait("approval", invocation_id, timeout=15)
        assert record.status is InvocationStatus.COMPLETED, record
        [answer] = [r for e in client.events("approval", invocation_id)
                    for r in e.get_function_responses() if r.id == call_id]
        assert answer.response["note"] == note
    missing = cli(env, "answer", "approval", "e-1", "c1", f"@{tmp_path}/none.json")
    assert one_error_line(missing) == (f"response: cannot read '{tmp_path}/none.json' (No such "
                                       "file or directory).")


def test_a_message_is_read_from_stdin_or_a_file(env, tmp_path):
    (tmp_path / "message.txt").write_text("from a file\n")
    for argv, stdin, text in [(("-",), "from stdin\n", "from stdin"),
                              ((f"@{tmp_path}/message.txt",), None, "from a file")]:
        done = cli(env, "enqueue", "chat", "u", *argv, "--wait", "--timeout", "15", stdin=stdin)
        assert done.returncode == 0, done.stderr
        replies = [e["content"]["parts"][0]["text"] for e in map(json.loads, done.stdout.splitlines()[1:-1])]
        assert replies == [text, f"reply to {text}"]


def test_an_argument_read_from_an_endless_source_stops_at_the_payload_limit(env):
    # @/dev/zero took a gigabyte of memory in seconds: the whole input was read first.
    limit = 64 * 1024
    small = {**env, "ADK_CELERY_MAX_PAYLOAD_BYTES": str(limit)}
    for argv, stdin in ((("@/dev/zero",), None), (("-",), "x" * (limit + 1))):
        done = cli(small, "answer", "approval", "e-1", "c1", *argv, stdin=stdin)
        source = "'/dev/zero'" if stdin is None else "stdin"
        assert one_error_line(done) == (f"response: {source} holds more than {limit} bytes, the "
                                        "limit (ADK_CELERY_MAX_PAYLOAD_BYTES).")
    done = cli(small, "enqueue", "chat", "u", "@/dev/zero")
    assert one_error_line(done) == (f"MESSAGE: '/dev/zero' holds more than {limit} bytes, the "
                                    "limit (ADK_CELERY_MAX_PAYLOAD_BYTES).")


@pytest.mark.parametrize(("response", "said"), [
    ("null", "null"), ("[1]", "an array"), ('"yes"', "a string"), ("true", "true or false"),
])
def test_an_answer_that_is_not_an_object_says_so_in_json_words(env, response, said):
    done = cli(env, "answer", "approval", "e-1", "c1", response)
    assert one_error_line(done) == f"response: must be a JSON object, not {said}."


# --- J: a follow that stays queued says what that may mean -----------------------------------------


def test_a_follow_that_stays_queued_asks_whether_an_orchestrator_runs(unserved, capsys):
    env, _ = unserved
    client = Client(Settings(redis_url=env["ADK_CELERY_REDIS_URL"]))
    try:
        invocation_id = client.enqueue("chat", "u", "hi")
        out, err = io.StringIO(), io.StringIO()
        args = argparse.Namespace(app_name="chat", invocation_id=invocation_id, timeout=2.0,
                                  until_paused=False)
        # Nothing serves db 1: the follow times out (2 s), the hint came long before (at 0 s).
        assert cli_follow.follow(client, args, out, err=err, queued_hint_after=0) == 2
    finally:
        client.close()
    assert out.getvalue() == "[queued]\n"
    assert err.getvalue() == ("adk-celery: still queued after 0 s: is an orchestrator running for "
                              "app 'chat' (`adk-celery orchestrator` with it in ADK_CELERY_APPS)?\n")
    assert capsys.readouterr().err.startswith(f"adk-celery: error: Invocation {invocation_id!r} did "
                                              "not reach the end of its follow within 2.0 s.")


def test_a_follow_that_leaves_queued_says_nothing_of_it(celery_stack):
    client = celery_stack["client"]
    invocation_id = client.enqueue("chat", "u", "hi")
    client.wait("chat", invocation_id, timeout=15)
    out, err = io.StringIO(), io.StringIO()
    args = argparse.Namespace(app_name="chat", invocation_id=invocation_id, timeout=15.0,
                              until_paused=False)
    assert cli_follow.follow(client, args, out, err=err, queued_hint_after=0.5) == 0
    assert err.getvalue() == "" and out.getvalue().splitlines()[-1] == "[completed]"
