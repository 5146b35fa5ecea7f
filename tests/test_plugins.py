"""Plugins in process: the manager's rules, how runners take plugins, and what the golden
comparison with google-adk (tests/golden/plugin_scenarios.py) does not show.
"""

from __future__ import annotations

import asyncio
import contextlib
import warnings
from typing import Any

import pytest
from google.genai import types
from pydantic import ValidationError

from orchestrator import AgentTool, App, InMemoryRunner, LlmAgent, LongRunningFunctionTool, Runner
from orchestrator.distributed.embedded import EmbeddedRuntime
from orchestrator.distributed.models import InvocationStatus
from orchestrator.distributed.registry import AppRegistry
from orchestrator.models.fake import ScriptedLlm
from orchestrator.plugins import BasePlugin, PluginManager
from orchestrator.sessions.in_memory_session_service import InMemorySessionService
from tests.support.events import call, simplify_all, user_text


class Recorder(BasePlugin):
    """Records (plugin, callback) pairs into a shared list; ``answers`` maps callback -> value."""

    def __init__(self, name: str, log: list[tuple[str, str]], **answers: Any) -> None:
        super().__init__(name)
        self.log = log
        self.answers = answers
        self.closed = False

    def _hit(self, callback: str) -> Any:
        self.log.append((self.name, callback))
        answer = self.answers.get(callback)
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def on_user_message_callback(self, **kwargs: Any) -> Any:
        return self._hit("on_user_message")

    async def before_run_callback(self, **kwargs: Any) -> Any:
        return self._hit("before_run")

    async def after_run_callback(self, **kwargs: Any) -> None:
        self._hit("after_run")

    async def on_run_error_callback(self, **kwargs: Any) -> None:
        self._hit("on_run_error")

    async def on_agent_error_callback(self, **kwargs: Any) -> None:
        self._hit("on_agent_error")

    async def before_model_callback(self, **kwargs: Any) -> Any:
        return self._hit("before_model")

    async def on_tool_error_callback(self, *, error: Exception, **kwargs: Any) -> Any:
        self.log.append((self.name, f"on_tool_error:{type(error).__name__}"))
        return None

    async def close(self) -> None:
        self.closed = True


async def _run(runner: Runner, text: str = "hi", **kwargs: Any) -> list[Any]:
    session = await runner.session_service.create_session(app_name=runner.app_name, user_id="u")
    return [e async for e in runner.run_async(
        user_id="u", session_id=session.id, new_message=user_text(text), **kwargs)]


# -- the manager ----------------------------------------------------------------------------


def test_two_plugins_of_one_name_are_refused():
    with pytest.raises(ValueError, match="Plugin with name 'same' already registered"):
        PluginManager([Recorder("same", []), Recorder("same", [])])


def test_only_plugins_can_be_registered_and_the_app_names_the_field():
    with pytest.raises(TypeError, match="not a BasePlugin"):
        PluginManager(["not a plugin"])  # type: ignore[list-item]
    with pytest.raises(ValidationError, match="plugins.0"):
        App(name="app", root_agent=LlmAgent(name="a"), plugins=[object()])


async def test_a_plugin_that_raises_stops_the_chain_with_a_runtime_error_naming_it():
    log: list[tuple[str, str]] = []
    manager = PluginManager([Recorder("bad", log, before_run=KeyError("boom")),
                             Recorder("next", log)])
    with pytest.raises(RuntimeError, match="Error in plugin 'bad' during 'before_run_callback'") as info:
        await manager.run_before_run_callback(invocation_context=None)  # type: ignore[arg-type]
    assert isinstance(info.value.__cause__, KeyError)
    assert log == [("bad", "before_run")]
    assert manager.get_plugin("next") is not None and manager.get_plugin("nobody") is None


async def test_error_notifications_reach_every_plugin_even_after_one_raises():
    log: list[tuple[str, str]] = []
    manager = PluginManager([Recorder("bad", log, on_run_error=KeyError("boom")),
                             Recorder("next", log)])
    await manager.run_on_run_error_callback(invocation_context=None, error=ValueError())  # type: ignore[arg-type]
    assert log == [("bad", "on_run_error"), ("next", "on_run_error")]


async def test_close_closes_every_plugin_and_reports_failures_and_timeouts_together():
    class Stuck(BasePlugin):
        async def close(self) -> None:
            await asyncio.Event().wait()

    class Broken(BasePlugin):
        async def close(self) -> None:
            raise OSError("socket")

    fine = Recorder("fine", [])
    manager = PluginManager([Stuck("stuck"), Broken("broken"), fine], close_timeout=0.05)
    with pytest.raises(RuntimeError, match="'stuck': TimeoutError, 'broken': OSError"):
        await manager.close()
    assert fine.closed


# -- runners --------------------------------------------------------------------------------


def test_plugins_go_on_the_app_not_beside_it():
    app = App(name="app", root_agent=LlmAgent(name="a"))
    with pytest.raises(ValueError, match="plugins should not be provided"):
        Runner(app=app, plugins=[Recorder("p", [])], session_service=InMemorySessionService())


async def test_runner_plugins_argument_still_works_with_a_deprecation_warning():
    log: list[tuple[str, str]] = []
    agent = LlmAgent(name="a", model=ScriptedLlm(responses=["hello"]))
    with pytest.warns(DeprecationWarning, match="plugins` argument is deprecated"):
        runner = Runner(app_name="app", agent=agent, plugins=[Recorder("p", log)],
                        session_service=InMemorySessionService())
    await _run(runner)
    assert ("p", "before_model") in log
    assert runner.plugin_manager.get_plugin("p") is not None


async def test_runner_close_closes_the_plugins():
    plugin = Recorder("p", [])
    runner = InMemoryRunner(app=App(name="app", root_agent=LlmAgent(name="a"), plugins=[plugin]))
    await runner.close()
    assert plugin.closed


async def test_tools_and_callbacks_reach_the_plugin_manager_through_the_context():
    seen: list[Any] = []

    def peek(tool_context: Any) -> str:
        """Look at the plugins."""
        seen.append(tool_context._invocation_context.plugin_manager)
        return "ok"

    agent = LlmAgent(name="a", model=ScriptedLlm(responses=[call("peek"), "done"]), tools=[peek])
    runner = InMemoryRunner(app=App(name="app", root_agent=agent, plugins=[Recorder("p", [])]))
    await _run(runner)
    assert seen == [runner.plugin_manager]


async def test_after_run_runs_when_the_caller_stops_reading_early():
    log: list[tuple[str, str]] = []
    agent = LlmAgent(name="a", model=ScriptedLlm(responses=[call("echo", x=1), "done"]),
                     tools=[lambda x: x])
    runner = InMemoryRunner(app=App(name="app", root_agent=agent, plugins=[Recorder("p", log)]))
    session = await runner.session_service.create_session(app_name="app", user_id="u")
    events = runner.run_async(user_id="u", session_id=session.id, new_message=user_text("hi"))
    async with contextlib.aclosing(events):
        await anext(events)  # the first event only
    assert log[-1] == ("p", "after_run")
    assert ("p", "on_run_error") not in log


async def test_a_cancelled_parallel_call_tells_the_error_callbacks_and_stays_cancelled():
    log: list[tuple[str, str]] = []
    agent_saw: list[str] = []
    started = asyncio.Event()

    async def slow() -> str:
        """Waits for ever."""
        started.set()
        await asyncio.Event().wait()
        return "never"

    async def failing() -> str:
        """Fails once the other call started."""
        await started.wait()
        raise ValueError("failing on purpose")

    def agent_error(tool: Any, args: Any, tool_context: Any, error: BaseException) -> None:
        agent_saw.append(f"{tool.name}:{type(error).__name__}")

    agent = LlmAgent(name="a", model=ScriptedLlm(responses=[[call("slow"), call("failing")]]),
                     tools=[slow, failing], on_tool_error_callback=agent_error)
    runner = InMemoryRunner(app=App(name="app", root_agent=agent, plugins=[Recorder("p", log)]))
    with pytest.raises(ValueError, match="failing on purpose"):
        await _run(runner)
    assert ("p", "on_tool_error:CancelledError") in log and ("p", "on_tool_error:ValueError") in log
    assert sorted(agent_saw) == ["failing:ValueError", "slow:CancelledError"]


async def test_an_agent_tool_can_run_without_the_callers_plugins():
    log: list[tuple[str, str]] = []
    child = LlmAgent(name="helper", model=ScriptedLlm(responses=["helped"]))
    tool = AgentTool(child, include_plugins=False)
    agent = LlmAgent(name="a", model=ScriptedLlm(responses=[call("helper", request="x"), "done"]),
                     tools=[tool])
    runner = InMemoryRunner(app=App(name="app", root_agent=agent, plugins=[Recorder("p", log)]))
    await _run(runner)
    # Only the caller's runs: one model call per step, none for the child.
    assert log.count(("p", "before_model")) == 2 and log.count(("p", "before_run")) == 1


# -- distributed runs in process: each run of an invocation is a run for the plugins ------------


class UserAnswerEditor(Recorder):
    """Records runs and rewrites a user's answer to a pending call."""

    async def on_user_message_callback(self, *, user_message: types.Content, **kwargs: Any) -> Any:
        self._hit("on_user_message")
        response = next((p.function_response for p in user_message.parts or []
                         if p.function_response), None)
        if response is None:
            return None
        edited = response.model_copy(update={"response": {**response.response, "edited": True}})
        return types.Content(role="user", parts=[types.Part(function_response=edited)])


async def test_an_answer_from_outside_is_a_new_run_through_on_user_message():
    log: list[tuple[str, str]] = []

    def approve(amount: int) -> None:
        """Ask a human."""
        return None

    agent = LlmAgent(name="a", model=ScriptedLlm(responses=[call("approve", amount=3), "paid"]),
                     tools=[LongRunningFunctionTool(approve)])
    app = App(name="approvals", root_agent=agent, plugins=[UserAnswerEditor("editor", log)])
    rt = EmbeddedRuntime(AppRegistry([app]))
    inv = await rt.enqueue(app_name="approvals", user_id="u", new_message="pay 3")
    record = await rt.wait("approvals", inv)
    assert record.status is InvocationStatus.PAUSED
    await rt.answer("approvals", inv, record.pending_calls[0], {"approved": True})
    record = await rt.wait("approvals", inv, until={InvocationStatus.COMPLETED,
                                                    InvocationStatus.FAILED})
    assert record.status is InvocationStatus.COMPLETED, record.error
    events = await rt.events("approvals", inv)

    answer = next(e for e in events if e.get_function_responses())
    assert answer.author == "user"
    assert answer.get_function_responses()[0].response == {"approved": True, "edited": True}
    assert simplify_all(events)[-1] == ("a", "paid")
    assert log == [("editor", "on_user_message"), ("editor", "before_run"),
                   ("editor", "before_model"), ("editor", "after_run"),
                   ("editor", "on_user_message"), ("editor", "before_run"),
                   ("editor", "before_model"), ("editor", "after_run")]


def test_plugins_module_exports_the_shipped_plugins():
    import orchestrator.plugins as plugins

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for name in plugins.__all__:
            assert getattr(plugins, name) is not None
    with pytest.raises(AttributeError):
        plugins.NoSuchPlugin  # noqa: B018
