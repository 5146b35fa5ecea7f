"""A tool that calls ``sys.exit`` (or raises KeyboardInterrupt, GeneratorExit) is answered with
its error, once; the worker that ran it runs the next job.

A tool wrapping argparse or click exits on bad input. Caught only as an ``Exception``, that
ended the worker's event loop thread (asyncio re-raises SystemExit out of the loop) and every
later job waited on it for ever; a GeneratorExit reached Celery's pool code, which never
acknowledged the message nor freed the slot. Real processes: an orchestrator, a worker of
each pool, a client.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any
from unittest import mock

import pytest
import redis
from google.genai import types

from config import Settings
from orchestrator import App, FunctionTool, LlmAgent, LongRunningFunctionTool, Runner
from orchestrator.distributed.embedded import EmbeddedRuntime
from orchestrator.distributed.models import InvocationStatus
from orchestrator.distributed.registry import AppRegistry
from orchestrator.errors import ToolExitError
from orchestrator.flows.contents import RUN_BRANCH
from orchestrator.models.fake import FunctionLlm
from orchestrator.sessions.in_memory_session_service import InMemorySessionService
from tests.apps import function_responses
from tests.apps_careless import (
    APP_SPECS,
    _model,
    branch_not_json_app,
    runs_key,
    state_object,
)
from tests.support.processes import ManagedProcess, stack_env, start_celery_process
from workers.loop import LoopExitError, LoopThread, LoopThreadDeadError

FAST_WATCH = {"job_heartbeat_seconds": "0.3", "job_lost_after_seconds": "1",
              "watchdog_interval_seconds": "0.2", "lease_retry_seconds": "0.2"}


@dataclass
class Stack:
    check: redis.Redis
    orchestrator: ManagedProcess
    worker: ManagedProcess
    client: Any

    def run(self, app: str, message: str) -> tuple[Any, list[types.FunctionResponse], list[str]]:
        """The finished invocation's record, its function responses, and its tool runs."""
        inv = self.client.enqueue(app, "u", message)
        record = self.client.wait(app, inv, timeout=20, until=InvocationStatus.FINISHED)
        responses = [r for e in self.client.events(app, inv) for r in e.get_function_responses()]
        return record, responses, self.check.lrange(runs_key(inv), 0, -1)


@contextlib.contextmanager
def _stack(redis_url: str, *worker_args: str, concurrency: int = 1) -> Iterator[Stack]:
    url = redis_url.rsplit("/", 1)[0] + "/14"
    check = redis.Redis.from_url(url, decode_responses=True)
    check.flushdb()
    env = stack_env(url, APP_SPECS, **FAST_WATCH)
    from workers.client import Client

    with ExitStack() as stack:
        stack.callback(check.close)
        orchestrator = start_celery_process("orchestrator", "careless-orch", env)
        stack.callback(orchestrator.stop)
        worker = start_celery_process("worker", "careless-work", env, *worker_args,
                                      concurrency=concurrency)
        stack.callback(worker.stop)
        client = Client(Settings(redis_url=url, apps=APP_SPECS, lease_retry_seconds=0.2))
        stack.callback(client.close)
        yield Stack(check, orchestrator, worker, client)


def _answered_once_with(stack: Stack, tool: str, error: str) -> None:
    record, responses, runs = stack.run("careless", f"call {tool}")
    assert record.status is InvocationStatus.COMPLETED, (record.error, stack.worker.output())
    assert [r.response for r in responses] == [{"error": error}]
    assert [run.split()[::3] for run in runs] == [[tool, "1"]]  # ran once, on attempt 1


def _still_runs_the_next_job(stack: Stack) -> None:
    record, responses, runs = stack.run("careless", "call plain")
    assert record.status is InvocationStatus.COMPLETED, (record.error, stack.worker.output())
    assert [r.response["ok"] for r in responses] == [True]
    assert len(runs) == 1


def test_a_tool_that_exits_is_answered_with_its_error_once_and_its_worker_goes_on(redis_url):
    # One slot (threads pool, the default): a slot or loop lost to a tool is the whole worker.
    with _stack(redis_url) as stack:
        for tool, error in [("raise_sysexit", "SystemExit: 3"), ("araise_sysexit", "SystemExit: 3"),
                            ("raise_kbint", "KeyboardInterrupt"),
                            ("raise_genexit", "GeneratorExit")]:
            _answered_once_with(stack, tool, error)
        _still_runs_the_next_job(stack)
        assert not any("dispatching attempt" in line for line in stack.orchestrator.lines)


@pytest.mark.parametrize("pool", ["solo", "prefork"])
def test_a_tool_that_exits_on_a_solo_or_prefork_worker_neither_ends_it_nor_runs_again(
        redis_url, pool):
    with _stack(redis_url, "--pool", pool) as stack:
        _answered_once_with(stack, "raise_sysexit", "SystemExit: 3")
        _still_runs_the_next_job(stack)
        assert stack.worker.proc.poll() is None


def test_a_branch_whose_tool_exits_fails_the_invocation_as_in_process(redis_url):
    with _stack(redis_url, concurrency=2) as stack:
        inv = stack.client.enqueue("careless_branches", "u", "go")
        record = stack.client.wait("careless_branches", inv, timeout=20,
                                   until=InvocationStatus.FINISHED)
        # As a tool's exception in a branch, unrecovered, fails the invocation in process.
        assert record.status is InvocationStatus.FAILED
        assert "SystemExit: 3" in (record.error or "")
        events = stack.client.events("careless_branches", inv)
        assert [e.error_code for e in events if e.error_code] == ["SystemExit"]
        runs = [run.split()[0] for run in stack.check.lrange(runs_key(inv), 0, -1)]
        assert runs.count("raise_sysexit") == 1 and runs.count("plain") <= 1, runs
        _still_runs_the_next_job(stack)


# --- results and state writes that are not JSON --------------------------------------------


def test_a_result_or_state_write_that_is_not_json_is_answered_once_with_what_and_where(redis_url):
    # Taken for its worker's death before: the tool ran 3 times and the model read that its
    # worker died.
    with _stack(redis_url) as stack:
        for tool, where in [("ret_object", "response.value: a Opaque is not JSON"),
                            ("ret_nan", "response.value: nan is not a JSON number"),
                            ("state_object", "state_delta.thing: a Opaque is not JSON")]:
            record, responses, runs = stack.run("careless", f"call {tool}")
            assert record.status is InvocationStatus.COMPLETED, (record.error,
                                                                 stack.worker.output())
            [answer] = [r.response["error"] for r in responses]
            assert answer.startswith(f"The result of tool {tool!r} is not JSON: {where}")
            assert [run.split()[::3] for run in runs] == [[tool, "1"]]  # ran once
        _still_runs_the_next_job(stack)
        assert not any("dispatching attempt" in line for line in stack.orchestrator.lines)


async def test_in_process_a_remote_result_that_is_not_json_is_the_same_error_answer():
    agent = LlmAgent(name="agent", model=FunctionLlm(fn=_model, record_requests=False),
                     tools=[LongRunningFunctionTool(state_object)])
    runtime = EmbeddedRuntime(AppRegistry([App(name="careless", root_agent=agent)]))
    with mock.patch("tests.apps_careless._record"):
        inv = await runtime.enqueue(app_name="careless", user_id="u", new_message="call state_object")
        record = await runtime.wait("careless", inv, timeout=5, until=InvocationStatus.FINISHED)
    assert record.status is InvocationStatus.COMPLETED, record.error
    [answer] = [r.response for e in await runtime.events("careless", inv)
                for r in e.get_function_responses()]
    assert answer["error"].startswith(
        "The result of tool 'state_object' is not JSON: state_delta.thing: a Opaque is not JSON")


NOT_JSON = {"ret_object": "response.value: a Opaque is not JSON",
            "ret_nan": "response.value: nan is not a JSON number",
            "state_object": "state_delta.thing: a Opaque is not JSON"}


def _branch_answers(events: list[Any]) -> dict[str, Any]:
    return {r.name: r.response for e in events for r in e.get_function_responses()
            if r.name != RUN_BRANCH}


def _answered_as_a_tool_job(answers: dict[str, Any]) -> None:
    assert answers.pop("plain")["ok"] is True
    assert set(answers) == set(NOT_JSON), answers
    for tool, where in NOT_JSON.items():
        assert answers[tool]["error"].startswith(
            f"The result of tool {tool!r} is not JSON: {where}"), answers[tool]


def test_a_branch_whose_tool_returns_what_is_not_json_is_answered_once_as_a_tool_job(redis_url):
    # The branch's events failed to store after its heartbeats stopped: taken for its
    # worker's death, the branch ran again until its attempts ran out, and the model read
    # that its worker died. The branch's tool call is answered as a tool job's is now.
    with _stack(redis_url, concurrency=2) as stack:
        inv = stack.client.enqueue("careless_json_branches", "u", "go")
        record = stack.client.wait("careless_json_branches", inv, timeout=20,
                                   until=InvocationStatus.FINISHED)
        assert record.status is InvocationStatus.COMPLETED, (record.error,
                                                             stack.worker.output())
        events = stack.client.events("careless_json_branches", inv)
        _answered_as_a_tool_job(_branch_answers(events))
        runs = sorted(run.split()[0] for run in stack.check.lrange(runs_key(inv), 0, -1))
        assert runs == sorted(["plain", *NOT_JSON]), runs  # each ran once
        assert not any("dispatching attempt" in line for line in stack.orchestrator.lines)
        [session] = stack.client.list_sessions("careless_json_branches", "u")
        assert "thing" not in session.state  # the write that is not JSON is dropped
        _still_runs_the_next_job(stack)


async def test_in_process_a_branch_whose_tool_returns_what_is_not_json_is_the_same_answer():
    runtime = EmbeddedRuntime(AppRegistry([branch_not_json_app]))
    with mock.patch("tests.apps_careless._record"):
        inv = await runtime.enqueue(app_name="careless_json_branches", user_id="u",
                                    new_message="go")
        record = await runtime.wait("careless_json_branches", inv, timeout=5,
                                    until=InvocationStatus.FINISHED)
    assert record.status is InvocationStatus.COMPLETED, record.error
    _answered_as_a_tool_job(_branch_answers(await runtime.events("careless_json_branches", inv)))


# --- in process: the same tools, the same rule ---------------------------------------------


def _exiting(tool_context) -> dict[str, Any]:
    raise SystemExit(3)


async def _exiting_async(tool_context) -> dict[str, Any]:
    raise SystemExit(3)


def _kbint_async_factory():
    async def interrupted(tool_context) -> dict[str, Any]:
        raise KeyboardInterrupt
    return interrupted


def _agent(tool: Any, **callbacks: Any) -> LlmAgent:
    def model(request):
        if not function_responses(request):
            return types.Part(function_call=types.FunctionCall(name=tool.__name__, args={}))
        return f"answer: {function_responses(request)[-1].response!r}"
    return LlmAgent(name="agent", model=FunctionLlm(fn=model, record_requests=False),
                    tools=[FunctionTool(tool)], **callbacks)


async def _run(agent: LlmAgent) -> list[Any]:
    runner = Runner(app_name="a", agent=agent, session_service=InMemorySessionService())
    session = await runner.session_service.create_session(app_name="a", user_id="u")
    return [e async for e in runner.run_async(
        user_id="u", session_id=session.id,
        new_message=types.Content(role="user", parts=[types.Part(text="go")]))]


@pytest.mark.parametrize("tool", [_exiting, _exiting_async])
async def test_in_process_a_tool_that_exits_fails_the_run_as_any_tool_error(tool):
    events: list[Any] = []
    with pytest.raises(ToolExitError, match="SystemExit: 3") as raised:
        runner = Runner(app_name="a", agent=_agent(tool), session_service=InMemorySessionService())
        session = await runner.session_service.create_session(app_name="a", user_id="u")
        async for event in runner.run_async(
                user_id="u", session_id=session.id,
                new_message=types.Content(role="user", parts=[types.Part(text="go")])):
            events.append(event)
    assert isinstance(raised.value.error, SystemExit)
    assert [(e.error_code, e.error_message) for e in events if e.error_code] == [("SystemExit", "3")]


async def test_in_process_an_error_callback_recovers_a_tool_that_exits():
    seen: list[BaseException] = []

    def recover(tool, args, tool_context, error):
        seen.append(error)
        return {"error": str(error)}

    events = await _run(_agent(_exiting, on_tool_error_callback=recover))
    answers = [r.response for e in events for r in e.get_function_responses()]
    assert answers == [{"error": "SystemExit: 3"}]
    assert [type(e) for e in seen] == [ToolExitError]


def test_in_process_a_keyboard_interrupt_on_the_main_thread_still_stops_the_run():
    # It may be the user's Ctrl-C: Python delivers signals to the main thread only.
    assert threading.current_thread() is threading.main_thread()
    with pytest.raises(KeyboardInterrupt):
        asyncio.run(_run(_agent(_kbint_async_factory())))


# --- the loop thread every job of a worker runs on -----------------------------------------


@pytest.mark.parametrize("use_uvloop", [True, False])
def test_the_loop_thread_outlives_what_is_raised_on_it(use_uvloop):
    thread = LoopThread(use_uvloop=use_uvloop)
    try:
        async def exits() -> None:
            raise SystemExit(3)

        async def generator_exit() -> None:
            raise GeneratorExit

        with pytest.raises(LoopExitError, match="SystemExit: 3"):
            thread.run(exits(), timeout=10)
        with pytest.raises(LoopExitError, match="GeneratorExit"):
            thread.run(generator_exit(), timeout=10)
        # A stray task (not run through run()) that exits: asyncio raises it out of the loop.
        stray = asyncio.run_coroutine_threadsafe(_start_stray(exits), thread.loop)
        stray.result(5)
        assert thread.run(_after_stray(), timeout=10) == "still running"
        assert thread.alive
    finally:
        thread.stop()


async def _start_stray(exits: Any) -> None:
    task = asyncio.ensure_future(exits())
    await asyncio.wait({task})
    assert isinstance(task.exception(), SystemExit)


async def _after_stray() -> str:
    await asyncio.sleep(0.01)
    return "still running"


def test_running_on_a_dead_loop_thread_fails_at_once():
    thread = LoopThread(use_uvloop=False)

    async def stop_the_loop() -> None:
        asyncio.get_running_loop().stop()  # the thread ends; this coroutine never finishes
        await asyncio.Event().wait()

    with pytest.raises(LoopThreadDeadError):  # found dead while waiting, not waited for ever
        thread.run(stop_the_loop(), timeout=30)
    with pytest.raises(LoopThreadDeadError):  # and at once afterwards
        thread.run(asyncio.sleep(0), timeout=10)


async def test_in_process_a_branch_event_that_is_not_json_fails_the_branch_once_naming_it():
    # Not a tool's answer (an agent callback's state write): no call to answer with an
    # error, so the branch fails, as a branch's error does, with what and where.
    from orchestrator.agents.parallel_agent import ParallelAgent
    from orchestrator.apps.app import ResumabilityConfig
    from tests.apps_careless import Opaque

    starts: list[str] = []

    def careless_callback(callback_context):
        starts.append(callback_context.agent_name)
        callback_context.state["thing"] = Opaque()

    branch = LlmAgent(name="b_careless", model=FunctionLlm(fn=lambda r: "hi", record_requests=False),
                      before_agent_callback=careless_callback)
    app = App(name="careless_event", root_agent=ParallelAgent(name="fan", sub_agents=[branch]),
              resumability_config=ResumabilityConfig(is_resumable=True))
    runtime = EmbeddedRuntime(AppRegistry([app]))
    inv = await runtime.enqueue(app_name="careless_event", user_id="u", new_message="go")
    record = await runtime.wait("careless_event", inv, timeout=5, until=InvocationStatus.FINISHED)
    assert record.status is InvocationStatus.FAILED
    assert "Event 0 of branch 'b_careless' (by 'b_careless') is not JSON" in (record.error or "")
    assert "is not JSON: event.actions.stateDelta.thing: a Opaque is not JSON" in (
        record.error or ""), record.error
    assert starts == ["b_careless"]  # once
