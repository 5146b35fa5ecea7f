"""The operator commands of ``adk-celery`` against real processes: status, answer, cancel,
sessions, follow; and their errors: one line on stderr and exit status 2, never a traceback."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
import redis
from google.genai import types

from orchestrator.distributed.models import InvocationStatus
from orchestrator.distributed.streams import StreamItem
from orchestrator.events.event import Event
from tests.support import forked
from tests.support.processes import stack_env
from workers.cli import EventPrinter


def cli(env: dict[str, str], *argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return forked.run([sys.executable, "-m", "workers.cli", *argv], env=env, timeout=timeout)


@pytest.fixture(scope="module")
def env(celery_stack):
    return stack_env(celery_stack["url"], "")


def test_status_answer_and_follow_a_paused_invocation(celery_stack, env):
    client = celery_stack["client"]
    invocation_id = client.enqueue("approval", "ops", "pay 100")
    record = client.wait("approval", invocation_id, timeout=15)
    [call_id] = record.pending_calls

    shown = cli(env, "status", "approval", invocation_id)
    assert shown.returncode == 0, shown.stderr
    status = json.loads(shown.stdout)
    assert status["status"] == "paused"
    assert status["calls"] == [{"function_call_id": call_id, "name": "request_approval",
                                "where": "waiting for an answer"}]

    answered = cli(env, "answer", "approval", invocation_id, call_id, '{"approved": true}')
    assert (answered.returncode, answered.stdout.strip()) == (0, f"answered {call_id}")
    followed = cli(env, "follow", "approval", invocation_id, "--timeout", "15")
    assert followed.returncode == 0, followed.stderr
    assert "[completed]" in followed.stdout
    again = cli(env, "answer", "approval", invocation_id, call_id, '{"approved": false}')
    assert again.returncode == 2 and again.stderr.startswith("adk-celery: error: Invocation ")
    assert "Traceback" not in again.stderr


def test_cancel_and_sessions(celery_stack, env):
    client = celery_stack["client"]
    invocation_id = client.enqueue("approval", "ops-cancel", "pay 5")
    record = client.wait("approval", invocation_id, timeout=15)

    cancelled = cli(env, "cancel", "approval", invocation_id)
    assert (cancelled.returncode, cancelled.stdout) == (
        0, f"cancel requested for {invocation_id} (it was paused)\n"), cancelled.stderr
    assert client.wait("approval", invocation_id, timeout=15, until=InvocationStatus.FINISHED).status is (
        InvocationStatus.CANCELLED)
    # Finished: nothing to cancel, as the API's 409 says.
    again = cli(env, "cancel", "approval", invocation_id)
    assert (again.returncode, again.stdout, again.stderr) == (
        2, "", f"adk-celery: error: invocation {invocation_id!r} is cancelled; it cannot be "
               "cancelled.\n")
    listed = cli(env, "sessions", "approval", "ops-cancel")
    assert listed.returncode == 0
    assert [line.split("\t")[:2] for line in listed.stdout.splitlines()] == [
        [record.session_id, "ops-cancel"]]


def test_sessions_shows_the_names_of_the_state_keys(celery_stack, env):
    client = celery_stack["client"]
    few = client.create_session("chat", "ops-keys", state={"topic": "x", "city": "Oslo"})
    many = client.create_session("chat", "ops-keys", state={f"key_{n:02}": n for n in range(30)})
    bare = client.create_session("chat", "ops-keys")
    listed = cli(env, "sessions", "chat", "ops-keys")
    assert listed.returncode == 0, listed.stderr
    keys = {line.split("\t")[0]: line.split("\t")[3] for line in listed.stdout.splitlines()}
    assert keys[few.id] == "city, topic"
    assert keys[many.id] == "key_00, key_01, key_02, key_03, key_04, key_05, key_06, ... (+23 more)"
    assert keys[bare.id] == "(no state)"


def test_invocations_of_an_unknown_session_is_an_error(celery_stack, env):
    client = celery_stack["client"]
    session = client.create_session("chat", "ops-list")
    empty = cli(env, "invocations", "--app", "chat", "--user", "ops-list", "--session", session.id)
    assert (empty.returncode, empty.stdout, empty.stderr) == (0, "", "")  # no invocations yet
    for user, session_id in (("ops-list", "nosuch"), ("someone-else", session.id)):
        done = cli(env, "invocations", "--app", "chat", "--user", user, "--session", session_id)
        assert (done.returncode, done.stdout, done.stderr) == (
            2, "", f"adk-celery: error: session {session_id!r} of app 'chat', user {user!r} not "
                   "found.\n")


@pytest.mark.parametrize("argv", [("status", "approval", "e-nope"), ("follow", "approval", "e-nope"),
                                  ("cancel", "approval", "e-nope"),
                                  ("answer", "approval", "e-nope", "c1", "{}")])
def test_an_unknown_invocation_exits_2_at_once(env, argv):
    done = cli(env, *argv, timeout=30)
    assert done.returncode == 2
    assert done.stderr == "adk-celery: error: no invocation 'e-nope' of app 'approval'.\n"


def test_bad_input_and_setup_errors_are_one_line(env):
    no_url = {k: v for k, v in env.items() if k != "ADK_CELERY_REDIS_URL"}
    asked = [(env, ("status", "approval", "e-1", "--verbose")),
             (env, ("answer", "approval", "e-1", "c1", "{oops")),
             (env, ("status", "approval", "e 1")),
             (no_url, ("status", "approval", "e-1")),
             ({**env, "ADK_CELERY_REDIS_URL": "redis://127.0.0.1:1/0"}, ("status", "approval", "e-1"))]
    with ThreadPoolExecutor(len(asked)) as pool:  # one process each, side by side
        unknown, bad_json, bad_id, missing, down = pool.map(lambda a: cli(a[0], *a[1]), asked)
    assert unknown.returncode == 2 and "unrecognized arguments: --verbose" in unknown.stderr
    assert unknown.stderr.startswith("usage: adk-celery status ")  # the command's own usage
    assert bad_json.returncode == 2 and bad_json.stderr.startswith("adk-celery: error: response: not JSON")
    assert bad_id.returncode == 2 and "invocation_id: 'e 1' has characters outside" in bad_id.stderr
    assert missing.returncode == 2
    assert missing.stderr.startswith("adk-celery: error: ADK_CELERY_REDIS_URL is not set")
    assert down.returncode == 2 and down.stderr.startswith("adk-celery: error: cannot reach Redis")
    for done in (unknown, bad_json, bad_id, missing, down):
        assert "Traceback" not in done.stderr


@pytest.mark.parametrize("value", ["inf", "nan", "-1", "soon"])
def test_follow_timeout_must_be_a_finite_number_of_seconds(celery_stack, env, value):
    client = celery_stack["client"]
    invocation_id = client.enqueue("approval", "ops-timeout", "pay 3")
    client.wait("approval", invocation_id, timeout=15)
    done = cli(env, "follow", "approval", invocation_id, "--timeout", value)
    assert done.returncode == 2 and done.stderr.startswith("usage: adk-celery follow")
    assert done.stderr.splitlines()[-1] == (
        f"adk-celery follow: error: argument --timeout: '{value}' is not a finite number of "
        "seconds, 0 or more")


def test_an_answer_nested_too_deep_to_parse_is_refused_in_one_line(celery_stack, env):
    client = celery_stack["client"]
    invocation_id = client.enqueue("approval", "ops-deep", "pay 2")
    [call_id] = client.wait("approval", invocation_id, timeout=15).pending_calls
    deep = "[" * 20_000 + "]" * 20_000
    done = cli(env, "answer", "approval", invocation_id, call_id, deep)
    assert done.returncode == 2
    assert done.stderr == ("adk-celery: error: response: nests too deep (the limit is 32 levels, "
                           "ADK_CELERY_MAX_NESTING_DEPTH).\n")
    record = client.status("approval", invocation_id)  # nothing was stored
    assert (record.status, record.pending_calls) == (InvocationStatus.PAUSED, [call_id])


def test_enqueue_wait_exits_1_when_the_invocation_failed(env):
    done = cli(env, "enqueue", "chat", "u", "hi", "--wait", "--timeout", "15")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1])["status"] == "completed"
    # The invocation fails, and the exit status says so, as follow's does. (Without
    # ADK_CELERY_APPS the command checks no app name: the orchestrator fails one it does not
    # serve.)
    failed = cli(env, "enqueue", "not_served", "u", "hi", "--wait", "--timeout", "15")
    assert json.loads(failed.stdout.splitlines()[-1])["status"] == "failed"
    assert failed.returncode == 1, failed.stderr


def test_enqueue_wait_gives_up_after_its_timeout_and_says_so(env):
    # Nothing serves db 1: the invocation stays queued.
    unserved = env["ADK_CELERY_REDIS_URL"].rsplit("/", 1)[0] + "/1"
    with redis.Redis.from_url(unserved) as db:
        db.flushdb()
        done = cli({**env, "ADK_CELERY_REDIS_URL": unserved}, "enqueue", "chat", "u", "hello",
                   "--wait", "--timeout", "0.5", timeout=30)
        db.flushdb()
    invocation_id = done.stdout.strip()
    assert done.returncode == 2
    assert done.stderr == (
        f"adk-celery: error: Invocation {invocation_id!r} did not reach ['cancelled', 'completed', "
        "'failed', 'paused'] within 0.5 s. Last seen queued: no orchestrator has taken it: is "
        "`adk-celery orchestrator` running with this app?\n")


def test_a_follow_that_times_out_on_a_pause_says_how_to_answer(celery_stack, env):
    client = celery_stack["client"]
    invocation_id = client.enqueue("approval", "ops-paused", "pay 4")
    [call_id] = client.wait("approval", invocation_id, timeout=15).pending_calls
    done = cli(env, "follow", "approval", invocation_id, "--timeout", "0.5")
    assert done.returncode == 2
    assert done.stdout.splitlines()[-1] == "[paused]"
    assert done.stderr == (
        f"adk-celery: error: Invocation {invocation_id!r} did not reach the end of its follow "
        f"within 0.5 s. Last seen paused, waiting for an answer to {call_id}: answer with "
        f"`adk-celery answer approval {invocation_id} {call_id} RESPONSE`, or use --until-paused "
        "to stop at a pause.\n")


def test_a_closed_stdout_ends_the_command_quietly(env):
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before anything is written (`| head` done)
    try:
        done = forked.run([sys.executable, "-m", "workers.cli", "enqueue", "chat", "u", "hi",
                           "--wait", "--timeout", "15"], env=env, stdout=write_end, timeout=60)
    finally:
        os.close(write_end)
    assert (done.returncode, done.stderr) == (141, "")


def test_app_options_serve_apps_the_environment_does_not_name(redis_url):
    # --app reaches the processes as settings (never through the environment): the
    # orchestrator runs the agent and the worker its remote tool, with ADK_CELERY_APPS empty.
    from tests.support.backends import running_stack

    with running_stack(redis_url, 14, "--app", "tests.apps:lookup_app", apps="") as stack:
        client = stack["client"]
        inv = client.enqueue("lookup", "u", "look up Oslo")
        record = client.wait("lookup", inv, timeout=30, until=InvocationStatus.FINISHED)
        assert record.status is InvocationStatus.COMPLETED, record.error


FORGED = "hi\n[paused]\nwaiting for: c-fake\x1b]0;pwned\x07\x1b[2K\r\u202e"
"""A message posing as more lines of ``follow`` and carrying terminal control sequences."""
ESCAPED = "hi\\n[paused]\\nwaiting for: c-fake\\x1b]0;pwned\\x07\\x1b[2K\\r\\u202e"


def test_follow_prints_a_users_text_on_its_own_line_with_control_characters_escaped(
        celery_stack, env):
    client = celery_stack["client"]
    invocation_id = client.enqueue("chat", "mallory", FORGED)
    followed = cli(env, "follow", "chat", invocation_id, "--timeout", "15")
    assert followed.returncode == 0, followed.stderr
    assert not any(char in followed.stdout for char in "\x1b\x07\r\u202e")
    assert followed.stdout.splitlines() == [
        "[queued]", "[running]", f"user: {ESCAPED}", f"agent: reply to {ESCAPED}", "[completed]"]


def test_follow_escapes_streamed_chunks():
    out = io.StringIO()
    printer = EventPrinter(out)
    chunk = Event(invocation_id="e-1", author="agent", partial=True,
                  content=types.Content(role="model", parts=[types.Part(text=FORGED)]))
    printer.print(StreamItem.of_event(chunk))
    printer.end_line()
    assert out.getvalue() == f"agent ~ {ESCAPED}\n"
