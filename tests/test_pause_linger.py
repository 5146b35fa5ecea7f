"""A run that pauses on workers' calls holds its session a little for their answers.

Over real redis-server, orchestrator and worker processes: with ``pause_linger_ms`` the
orchestrator keeps the session of a run that paused on a worker's call, and an answer that
comes meanwhile resumes the run at once, the pause never saved (the invocation goes from
``running`` to ``completed``). Anything else queued for the session meanwhile (another
message) gets the pause saved first and runs in turn, exactly as without the linger; calls
left to an answer from outside pause as before. The crash tests of a process killed while
lingering, or after going on with the answers, are in tests/test_crash_recovery.py.
"""

from __future__ import annotations

from collections import Counter

import pytest
import redis

from orchestrator.distributed.models import InvocationStatus
from tests.apps import APP_SPECS
from tests.apps_extra import APP_SPECS as EXTRA_APP_SPECS
from tests.apps_extra import gate_key
from tests.support.backends import running_stack

APPS = f"{APP_SPECS},{EXTRA_APP_SPECS}"


@pytest.fixture(scope="module")
def lingering(redis_url):
    """A stack whose orchestrator lingers far longer than any tool here takes."""
    with running_stack(redis_url, 7, apps=APPS, pause_linger_ms="30000") as stack:
        yield stack


@pytest.fixture(scope="module")
def lingering_briefly(redis_url):
    """A stack whose orchestrator holds a paused session for a second at most."""
    with running_stack(redis_url, 5, apps=APPS, pause_linger_ms="1000") as stack:
        yield stack


@pytest.fixture(scope="module")
def not_lingering(redis_url):
    with running_stack(redis_url, 6, apps=APPS, pause_linger_ms="0") as stack:
        yield stack


def _statuses(stack, app: str, inv: str) -> list[str]:
    client = redis.Redis.from_url(stack["url"], decode_responses=True)
    try:
        return [fields["status"] for _, fields in
                client.xrange(f"adk:invocation:{{{app}:{inv}}}:statuses")]
    finally:
        client.close()


def _answers(client, app: str, inv: str) -> Counter[str]:
    events = client.events(app, inv)
    calls = [c.id for e in events for c in e.get_function_calls()]
    answers = Counter(r.id for e in events for r in e.get_function_responses())
    assert calls and {cid: answers[cid] for cid in calls} == dict.fromkeys(calls, 1), events
    return answers


@pytest.mark.parametrize("app", ["lookup", "fanout", "parallel"])
def test_answers_that_come_while_the_session_is_held_resume_without_a_saved_pause(lingering, app):
    client = lingering["client"]
    inv = client.enqueue(app, "u", "find Oslo")
    record = client.wait(app, inv, timeout=30, until=InvocationStatus.FINISHED)
    assert record.status is InvocationStatus.COMPLETED and record.pending_calls == []
    assert _statuses(lingering, app, inv) == ["queued", "running", "completed"]
    _answers(client, app, inv)  # each call answered once, by the one resume


def test_without_the_linger_the_pause_is_saved(not_lingering):
    client = not_lingering["client"]
    inv = client.enqueue("lookup", "u", "find Oslo")
    record = client.wait("lookup", inv, timeout=30, until=InvocationStatus.FINISHED)
    assert record.status is InvocationStatus.COMPLETED
    assert _statuses(not_lingering, "lookup", inv) == ["queued", "running", "paused", "completed"]


def test_another_message_for_the_session_gets_the_pause_saved_and_runs_in_turn(lingering):
    client = lingering["client"]
    first = client.enqueue("gated", "u", "go first")
    session = client.status("gated", first).session_id
    # The first run's call is out (its tool blocks at its gate): it pauses, and lingers.
    for item in client.follow("gated", first, timeout=30, until=InvocationStatus.FINISHED):
        if item.event is not None and item.event.get_function_calls():
            break
    second = client.enqueue("gated", "u", "go second", session_id=session)
    # The second message ends the linger: the first invocation's pause is saved, then the
    # second runs, up to its own call (and lingers in turn).
    assert client.wait("gated", first, timeout=30).status is InvocationStatus.PAUSED
    for item in client.follow("gated", second, timeout=30, until=InvocationStatus.FINISHED):
        if item.event is not None and item.event.get_function_calls():
            break

    gates = redis.Redis.from_url(lingering["url"], decode_responses=True)
    try:
        # The first one's answer ends the second one's linger (its pause is saved), and the
        # first one goes on to its end.
        gates.rpush(gate_key(first), "test")
        done = client.wait("gated", first, timeout=30, until=InvocationStatus.FINISHED)
        assert client.status("gated", second).status is InvocationStatus.PAUSED
        gates.rpush(gate_key(second), "test")
        later = client.wait("gated", second, timeout=30, until=InvocationStatus.FINISHED)
    finally:
        gates.close()
    assert (done.status, later.status) == (InvocationStatus.COMPLETED, InvocationStatus.COMPLETED)
    assert _statuses(lingering, "gated", first) == ["queued", "running", "paused", "completed"]
    assert _statuses(lingering, "gated", second) == ["queued", "running", "paused", "completed"]
    for inv, label in ((first, "first"), (second, "second")):
        _answers(client, "gated", inv)
        final = client.events("gated", inv)[-1].content.parts[0].text
        assert final == f"gated {label} released=True by test"


def test_one_answer_of_two_resumes_nothing_and_the_pause_is_then_saved(lingering_briefly):
    lingering = lingering_briefly
    client = lingering["client"]
    inv = client.enqueue("half_gated", "u", "go")
    # One call answers at once, while the session is held; the other waits at its gate: the
    # answer alone resumes nothing, and once the linger is over (a second from the pause,
    # not from that answer) the pause, still waiting for the other, is saved.
    record = client.wait("half_gated", inv, timeout=30)
    assert record.status is InvocationStatus.PAUSED
    # Both stay open in the log until the step's last answer (one resume per step); the
    # gated one is the one still running.
    assert sorted(record.pending_tools.values()) == ["gated_step", "quick_step"]
    running = [call.name for call in client.calls("half_gated", inv) if call.where == "running"]
    assert running == ["gated_step"]
    gates = redis.Redis.from_url(lingering["url"], decode_responses=True)
    try:
        gates.rpush(gate_key(inv), "test")
    finally:
        gates.close()
    done = client.wait("half_gated", inv, timeout=30, until=InvocationStatus.FINISHED)
    assert done.status is InvocationStatus.COMPLETED
    assert client.events("half_gated", inv)[-1].content.parts[0].text == "both: gated_step, quick_step"
    _answers(client, "half_gated", inv)
