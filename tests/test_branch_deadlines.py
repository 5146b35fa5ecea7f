"""The tool calls a ParallelAgent branch makes inside its job on a worker have deadlines.

A branch on a worker runs as one job and its tools run in that job, where the watchdog that
answers a tool job at its deadline does not look. Each such call gets the deadline a tool
job of its tool would get (``adk_celery_timeout`` metadata, else the worker's
``tool_timeout_seconds``) and at it is answered with the watchdog's timeout error: the
branch's model reads it and goes on, and the invocation finishes. Real redis-server,
orchestrator and worker processes (tests/apps_deadlines.py).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from orchestrator.distributed.models import InvocationStatus
from tests.apps_deadlines import DEADLINE_APP_SPECS
from tests.support.backends import running_stack
from tests.support.events import simplify_all


@pytest.fixture(scope="module")
def metadata_stack(redis_url):
    """The hanging tools' own ``adk_celery_timeout`` (1 s) sets their deadlines."""
    with running_stack(redis_url, 9, apps=DEADLINE_APP_SPECS) as stack:
        yield stack


@pytest.fixture(scope="module")
def setting_stack(redis_url):
    """Every tool's deadline is the setting's (1 s)."""
    with running_stack(redis_url, 10, apps=DEADLINE_APP_SPECS, tool_timeout_seconds="1") as stack:
        yield stack


def _completed(stack: dict[str, Any], app: str) -> list[Any]:
    """The events of a new invocation of ``app`` once it completed."""
    client = stack["client"]
    inv = client.enqueue(app, "u", "go")
    record = client.wait(app, inv, timeout=20, until=InvocationStatus.FINISHED)
    assert record.status is InvocationStatus.COMPLETED, (record.status, record.error)
    return client.events(app, inv)


def _answers(events: list[Any], author: str) -> list[tuple[str | None, str | None, Any]]:
    """(branch, tool, response) of each function response of ``author``, in order."""
    return [(e.branch, r.name, r.response) for e in events if e.author == author
            for r in e.get_function_responses()]


def _check_one_answer_per_call_and_the_rest_intact(events: list[Any]) -> None:
    calls = Counter(c.id for e in events for c in e.get_function_calls())
    answers = Counter(r.id for e in events for r in e.get_function_responses())
    assert answers == calls and set(answers.values()) == {1}, (calls, answers)
    assert _answers(events, "fine") == [("fan.fine", "tally", {"word": "fine", "length": 4})]
    said = simplify_all(events)
    assert ("fine", "fine counted 4") in said and ("after", "after done") in said
    # Nothing the timed-out call wrote reached the session.
    assert not any(key.startswith("hung_") for e in events for key in e.actions.state_delta)


def test_an_async_tool_hanging_in_a_branch_job_is_cancelled_and_answered_at_its_deadline(
    metadata_stack,
):
    events = _completed(metadata_stack, "deadline_async")
    assert _answers(events, "slow") == [
        ("fan.slow", "hang_async", {"error": "Tool 'hang_async' timed out: no answer within 1 s."}),
        # The branch went on: the hung call was cancelled, its state write undone.
        ("fan.slow", "was_cancelled", {"cancelled": True, "hung_before": None}),
    ]
    _check_one_answer_per_call_and_the_rest_intact(events)


def test_a_timed_out_calls_write_into_a_list_read_from_state_is_undone(metadata_stack):
    client = metadata_stack["client"]
    session = client.create_session("deadline_async", "u", state={"seen": ["start"]})
    inv = client.enqueue("deadline_async", "u", "go", session_id=session.id)
    record = client.wait("deadline_async", inv, timeout=20, until=InvocationStatus.FINISHED)
    assert record.status is InvocationStatus.COMPLETED, (record.status, record.error)
    events = client.events("deadline_async", inv)
    # The hung call appended to the list in place: undone with its other writes.
    assert _answers(events, "slow")[-1] == (
        "fan.slow", "was_cancelled", {"cancelled": True, "hung_before": None, "seen": ["start"]})
    assert not any("seen" in e.actions.state_delta for e in events)


def test_a_sync_tool_hanging_in_a_branch_job_is_answered_at_its_deadline_and_its_late_result_dropped(
    metadata_stack,
):
    events = _completed(metadata_stack, "deadline_sync")
    assert _answers(events, "stuck") == [
        ("fan.stuck", "hang_sync", {"error": "Tool 'hang_sync' timed out: no answer within 1 s."}),
        # Released, its thread wrote the state and returned: neither counted.
        ("fan.stuck", "release", {"finished": True, "hung_before": None, "hung_late": None}),
    ]
    _check_one_answer_per_call_and_the_rest_intact(events)


def test_the_tool_timeout_setting_gives_the_calls_of_a_branch_job_their_deadline(setting_stack):
    events = _completed(setting_stack, "deadline_setting")
    assert _answers(events, "slow") == [
        ("fan.slow", "hang_async", {"error": "Tool 'hang_async' timed out: no answer within 1 s."}),
        ("fan.slow", "was_cancelled", {"cancelled": True, "hung_before": None}),
    ]
    _check_one_answer_per_call_and_the_rest_intact(events)


def test_a_tool_the_orchestrator_runs_in_process_keeps_no_deadline(setting_stack):
    """Only a branch's job on a worker gives its tools deadlines: the setting (1 s) does not
    cut a tool that the orchestrator runs itself (it takes 1.5 s)."""
    events = _completed(setting_stack, "deadline_free")
    assert _answers(events, "here") == [(None, "take_a_while", {"done": True})]
