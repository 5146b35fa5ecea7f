"""Apps with plugins for the distributed tests; importable by orchestrator and worker processes.

``where_app``'s plugin writes, into the session state, the process id of each callback it
runs (state written by tool callbacks on a worker comes back in the call's state delta), and
stamps each event it sees with the process that committed it. So a test reads where each
callback ran from the committed log alone.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from google.genai import types

from orchestrator import App, Event, LlmAgent, LlmRequest, LongRunningFunctionTool, ToolContext
from orchestrator.models.fake import FunctionLlm
from orchestrator.plugins import BasePlugin, ReflectAndRetryToolPlugin


def _call(name: str, **args: Any) -> types.Part:
    return types.Part(function_call=types.FunctionCall(name=name, args=args))


def _answers(request: LlmRequest) -> list[types.FunctionResponse]:
    return [p.function_response for c in request.contents for p in c.parts or []
            if p.function_response]


def _last_user_word(request: LlmRequest) -> str:
    texts = [p.text for c in request.contents if c.role == "user" for p in c.parts or [] if p.text]
    return texts[-1].split()[-1] if texts else ""


class WherePlugin(BasePlugin):
    """Records in state which process ran its model and tool callbacks; answers some calls."""

    def __init__(self) -> None:
        super().__init__("where")

    async def before_model_callback(self, *, callback_context: Any, llm_request: Any) -> None:
        callback_context.state["model_callback_pid"] = os.getpid()

    async def before_tool_callback(
        self, *, tool: Any, tool_args: dict[str, Any], tool_context: ToolContext
    ) -> dict[str, Any] | None:
        tool_context.state["before_tool_pid"] = os.getpid()
        if tool_args.get("city") == "Atlantis":
            return {"city": "Atlantis", "blocked_by": self.name}
        return None

    async def after_tool_callback(
        self, *, tool: Any, tool_args: dict[str, Any], tool_context: ToolContext, result: Any
    ) -> dict[str, Any] | None:
        tool_context.state["after_tool_pid"] = os.getpid()
        return {**result, "checked_in": os.getpid()} if isinstance(result, dict) else None

    async def on_tool_error_callback(
        self, *, tool: Any, tool_args: dict[str, Any], tool_context: ToolContext, error: Exception
    ) -> dict[str, Any]:
        # One key per process: were the callback run twice (worker, then orchestrator), both
        # keys would be in the state.
        tool_context.state[f"tool_error_seen_in_{os.getpid()}"] = True
        if tool_args.get("city") == "Vesuvius":
            return None  # not recovered: the model reads the error
        return {"recovered": f"{type(error).__name__}: {error}"}

    async def on_event_callback(self, *, invocation_context: Any, event: Event) -> Event:
        return Event(custom_metadata={**(event.custom_metadata or {}),
                                      "on_event_pid": os.getpid()})

    async def close(self) -> None:
        # Tests that stop the processes ask for a marker of each process that closed it.
        folder = os.environ.get("PLUGIN_CLOSED_DIR")
        if folder:
            Path(folder, f"{self.name}-{os.getpid()}").touch()


def where_lookup(city: str, tool_context: ToolContext) -> dict[str, Any] | None:
    """Look a city up (long-running: runs on a worker); volcanoes fail, Limbo never answers."""
    tool_context.state["tool_pid"] = os.getpid()
    if city in ("Krakatoa", "Vesuvius"):
        raise RuntimeError("the volcano is erupting")
    if city == "Limbo":
        return None  # pending: the answer comes from outside
    return {"city": city, "found": True}


def _agent_before_tool(tool: Any, args: dict[str, Any], tool_context: ToolContext) -> None:
    # The agent's own callback runs where the plugin's ran, after it.
    tool_context.state["agent_before_tool_pid"] = os.getpid()
    tool_context.state["agent_saw_plugin_first"] = "before_tool_pid" in tool_context.state


def _where_model(request: LlmRequest) -> Any:
    answers = _answers(request)
    if not answers:
        return _call("where_lookup", city=_last_user_word(request))
    return f"answer: {answers[-1].response}"


where_app = App(
    name="where",
    root_agent=LlmAgent(
        name="agent", model=FunctionLlm(record_requests=False, fn=_where_model),
        tools=[LongRunningFunctionTool(where_lookup)], before_tool_callback=_agent_before_tool,
    ),
    plugins=[WherePlugin()],
)


# -- retry: ReflectAndRetryToolPlugin answering a failed remote call ------------------------

def picky(x: int) -> dict[str, Any]:
    """Accepts only positive numbers (long-running: runs on a worker)."""
    if x <= 0:
        raise ValueError(f"x must be positive, got {x}")
    return {"x": x, "accepted": True}


def _retry_model(request: LlmRequest) -> Any:
    answers = _answers(request)
    if not answers:
        return _call("picky", x=-1)
    last = answers[-1].response or {}
    if last.get("response_type"):
        return _call("picky", x=abs(int(last.get("retry_count", 1))) + 1)
    return f"accepted {last.get('x')}"


retry_app = App(
    name="retry",
    root_agent=LlmAgent(
        name="agent", model=FunctionLlm(record_requests=False, fn=_retry_model),
        tools=[LongRunningFunctionTool(picky)],
    ),
    plugins=[ReflectAndRetryToolPlugin(max_retries=2)],
)

# -- where_fan: ParallelAgent branches on workers, with a plugin --------------------------

class BranchWherePlugin(BasePlugin):
    """Records which process ran each agent's model callback; stamps events as WherePlugin."""

    def __init__(self) -> None:
        super().__init__("branch_where")

    async def before_model_callback(self, *, callback_context: Any, llm_request: Any) -> None:
        callback_context.state[f"model_pid_{callback_context.agent_name}"] = os.getpid()

    async def on_event_callback(self, *, invocation_context: Any, event: Event) -> Event:
        return Event(custom_metadata={"on_event_pid": os.getpid()})


def _where_fan_root() -> Any:
    from orchestrator import ParallelAgent, SequentialAgent

    def model(name: str) -> FunctionLlm:
        return FunctionLlm(record_requests=False, fn=lambda request: f"{name} done")

    fan = ParallelAgent(name="fan", sub_agents=[
        LlmAgent(name=n, model=model(n)) for n in ("a", "b")])
    return SequentialAgent(name="pipeline", sub_agents=[
        fan, LlmAgent(name="after", model=model("after"))])


def _where_fan_app() -> App:
    from orchestrator import ResumabilityConfig

    return App(name="where_fan", root_agent=_where_fan_root(), plugins=[BranchWherePlugin()],
               resumability_config=ResumabilityConfig(is_resumable=True))


where_fan_app = _where_fan_app()

PLUGIN_APPS = [where_app, retry_app, where_fan_app]
PLUGIN_APP_SPECS = ",".join(
    f"tests.apps_plugins:{name}" for name in ("where_app", "retry_app", "where_fan_app"))
