"""Plugins where the agent code runs: model callbacks and on_event on the orchestrator, the tool
callbacks of a remote tool on the worker that runs it.

Both backends (in process, and a real orchestrator and worker over Redis). ``where_app``'s
plugin writes the process id of each callback into the session state and stamps each
event with the process that committed it (tests/apps_plugins.py).
"""

from __future__ import annotations

import os

from orchestrator.distributed.models import InvocationStatus, ToolResult
from orchestrator.errors import RemoteToolError
from tests.support.backends import CeleryBackend, EmbeddedBackend, running_stack


def _state(events) -> dict:
    """The state the invocation's committed deltas add up to."""
    state: dict = {}
    for event in events:
        state.update(event.actions.state_delta)
    return state


def _pids(backend, request) -> tuple[int, int]:
    """(orchestrator pid, worker pid) of the backend."""
    if isinstance(backend, CeleryBackend):
        stack = backend.stack
        return stack["orchestrator"].pid, stack["worker"].pid
    return os.getpid(), os.getpid()


def _response(events, name: str = "where_lookup") -> dict:
    return next(r.response for e in events for r in e.get_function_responses() if r.name == name)


async def test_model_callbacks_on_the_orchestrator_tool_callbacks_on_the_worker(backend, request):
    orchestrator_pid, worker_pid = _pids(backend, request)
    inv = await backend.enqueue("where", "u", "look up Oslo")
    record = await backend.wait("where", inv, until=InvocationStatus.FINISHED)
    assert record.status is InvocationStatus.COMPLETED, record.error
    events = await backend.events("where", inv)
    state = _state(events)

    assert state["model_callback_pid"] == orchestrator_pid
    # The plugin's tool callbacks, the agent's own and the tool: one process, the worker's.
    assert state["tool_pid"] == worker_pid
    assert state["before_tool_pid"] == state["after_tool_pid"] == worker_pid
    assert state["agent_before_tool_pid"] == worker_pid
    assert state["agent_saw_plugin_first"] is True
    # The after-tool replacement made on the worker is the answer the model read.
    assert _response(events) == {"city": "Oslo", "found": True, "checked_in": worker_pid}
    assert events[-1].content.parts[0].text.startswith("answer: {'city': 'Oslo'")
    # on_event ran on the orchestrator for every event it committed (not the user's message).
    assert events[0].author == "user" and "on_event_pid" not in (events[0].custom_metadata or {})
    assert [e.custom_metadata["on_event_pid"] for e in events[1:]] == [orchestrator_pid] * (
        len(events) - 1)
    if isinstance(backend, CeleryBackend):
        assert orchestrator_pid != worker_pid


async def test_a_plugin_on_the_worker_answers_a_remote_call_without_the_tool(backend, request):
    _, worker_pid = _pids(backend, request)
    inv = await backend.enqueue("where", "u", "look up Atlantis")
    record = await backend.wait("where", inv, until=InvocationStatus.FINISHED)
    assert record.status is InvocationStatus.COMPLETED, record.error
    events = await backend.events("where", inv)
    state = _state(events)

    assert _response(events) == {"city": "Atlantis", "blocked_by": "where",
                                 "checked_in": worker_pid}
    assert "tool_pid" not in state and "agent_before_tool_pid" not in state
    assert state["before_tool_pid"] == state["after_tool_pid"] == worker_pid


async def test_a_remote_tools_exception_is_recovered_by_the_plugin_once_on_the_worker(
    backend, request
):
    orchestrator_pid, worker_pid = _pids(backend, request)
    inv = await backend.enqueue("where", "u", "look up Krakatoa")
    record = await backend.wait("where", inv, until=InvocationStatus.FINISHED)
    assert record.status is InvocationStatus.COMPLETED, record.error
    events = await backend.events("where", inv)
    state = _state(events)

    # The plugin saw the tool's own exception (not a stand-in), on the worker only.
    assert _response(events) == {"recovered": "RuntimeError: the volcano is erupting",
                                 "checked_in": worker_pid}
    assert [k for k in state if k.startswith("tool_error_seen_in_")] == [
        f"tool_error_seen_in_{worker_pid}"]
    assert state["after_tool_pid"] == worker_pid


async def test_an_error_no_callback_recovers_on_the_worker_is_not_offered_again(backend, request):
    _, worker_pid = _pids(backend, request)
    inv = await backend.enqueue("where", "u", "look up Vesuvius")
    record = await backend.wait("where", inv, until=InvocationStatus.FINISHED)
    assert record.status is InvocationStatus.COMPLETED, record.error
    events = await backend.events("where", inv)
    state = _state(events)

    # The model reads the error; the orchestrator did not run the error callbacks again.
    assert _response(events) == {"error": "RuntimeError: the volcano is erupting"}
    assert [k for k in state if k.startswith("tool_error_seen_in_")] == [
        f"tool_error_seen_in_{worker_pid}"]
    assert "after_tool_pid" not in state  # no after-tool callback for an unrecovered error


async def test_reflect_and_retry_answers_a_failed_remote_call_and_the_model_retries(backend):
    inv = await backend.enqueue("retry", "u", "go")
    record = await backend.wait("retry", inv, until=InvocationStatus.FINISHED)
    assert record.status is InvocationStatus.COMPLETED, record.error
    events = await backend.events("retry", inv)
    answers = [r.response for e in events for r in e.get_function_responses()]

    assert answers[0]["response_type"] == "ERROR_HANDLED_BY_REFLECT_AND_RETRY_PLUGIN"
    assert answers[0]["error_type"] == "ValueError" and answers[0]["retry_count"] == 1
    assert "x must be positive, got -1" in answers[0]["reflection_guidance"]
    assert answers[1] == {"x": 2, "accepted": True}
    assert events[-1].content.parts[0].text == "accepted 2"


async def test_branches_on_workers_run_their_model_callbacks_there(backend, request):
    orchestrator_pid, worker_pid = _pids(backend, request)
    inv = await backend.enqueue("where_fan", "u", "go")
    record = await backend.wait("where_fan", inv, until=InvocationStatus.FINISHED)
    assert record.status is InvocationStatus.COMPLETED, record.error
    events = await backend.events("where_fan", inv)
    state = _state(events)

    assert state["model_pid_a"] == state["model_pid_b"] == worker_pid
    assert state["model_pid_after"] == orchestrator_pid
    # A branch's events pass on_event once, when the orchestrator commits them.
    branch_events = [e for e in events if e.branch in ("fan.a", "fan.b")]
    assert {e.author for e in branch_events if e.content} == {"a", "b"}
    assert {e.custom_metadata["on_event_pid"] for e in events[1:]} == {orchestrator_pid}


async def test_an_error_made_outside_the_tool_goes_to_the_plugin_on_the_orchestrator():
    """A deadline or a lost job is answered with an error the worker's callbacks never saw."""
    backend = EmbeddedBackend()
    inv = await backend.enqueue("where", "u", "look up Limbo")
    record = await backend.wait("where", inv)
    assert record.status is InvocationStatus.PAUSED, record.error
    call_id = record.pending_calls[0]
    message = "Tool 'where_lookup' timed out: no answer within 1 s."
    backend.rt._wake(await backend.rt.service.deliver("where", inv, ToolResult(
        function_call_id=call_id, tool_name="where_lookup",
        response={"error": message}, error=message,
    )))
    record = await backend.wait("where", inv, until=InvocationStatus.FINISHED)
    assert record.status is InvocationStatus.COMPLETED, record.error
    events = await backend.events("where", inv)

    expected = f"{RemoteToolError.__name__}: {message}"
    assert _response(events) == {"recovered": expected}
    assert f"tool_error_seen_in_{os.getpid()}" in _state(events)


def test_each_process_closes_its_plugins_when_it_stops(redis_url, tmp_path):
    with running_stack(redis_url, 3, env={"PLUGIN_CLOSED_DIR": str(tmp_path)}) as stack:
        client, orchestrator, worker = stack["client"], stack["orchestrator"], stack["worker"]
        inv = client.enqueue("where", "u", "look up Oslo")
        record = client.wait("where", inv, timeout=30, until=InvocationStatus.FINISHED)
        assert record.status is InvocationStatus.COMPLETED, record.error
    closed = {p.name for p in tmp_path.iterdir()}
    assert {f"where-{orchestrator.pid}", f"where-{worker.pid}"} <= closed, closed
