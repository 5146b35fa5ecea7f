"""Checks of an app against where its tools run, made once before an orchestrator serves it.

A call routed to workers pauses the invocation until its answer comes back; the answer then
goes to the agent that made the call. In a resumable app the workflow agents around it
(SequentialAgent, LoopAgent, ParallelAgent) go on from their checkpoints too. In a
non-resumable app they cannot: as google-adk does for a long-running tool, the invocation
ends with that agent. For a long-running tool that is what its author expects. For a plain
tool sent to workers (``tool_queues``, or ``custom_metadata={"adk_celery_queue": ...}``) it
is not: in process the workflow would go on, and distributed its later steps would silently
not run. Such an app is refused at start-up with what to change.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from orchestrator.agents.base_agent import BaseAgent
from orchestrator.agents.llm_agent import LlmAgent
from orchestrator.agents.loop_agent import LoopAgent
from orchestrator.agents.parallel_agent import ParallelAgent
from orchestrator.agents.sequential_agent import SequentialAgent
from orchestrator.apps.app import App
from orchestrator.errors import AppConfigError
from orchestrator.tools.base_tool import BaseTool
from orchestrator.tools.base_toolset import BaseToolset
from orchestrator.tools.function_tool import FunctionTool

_WORKFLOWS = (SequentialAgent, LoopAgent, ParallelAgent)


def check_remote_tools(app: App, route: Callable[[BaseTool], str | None]) -> None:
    """Refuse a non-resumable app with a plain tool on workers inside a workflow agent.

    ``route``: where a tool runs (a queue name, or None: in the orchestrator). Tools listed
    by a toolset are only known per invocation and are not checked here.
    """
    if app.resumability_config is not None and app.resumability_config.is_resumable:
        return
    for workflow, agent in _inside_workflows(app.root_agent, None):
        for tool in _static_tools(agent):
            queue = route(tool)
            if queue is not None and not tool.is_long_running:
                raise AppConfigError(
                    f"App {app.name!r}: tool {tool.name!r} of agent {agent.name!r} runs on "
                    f"workers (queue {queue!r}) inside {type(workflow).__name__} "
                    f"{workflow.name!r}, and the app is not resumable: after the tool's "
                    "answer only that agent would go on, the steps after it would not run. "
                    "Make the app resumable (App(resumability_config=ResumabilityConfig("
                    "is_resumable=True))), or run the tool in the orchestrator (take it out "
                    "of ADK_CELERY_TOOL_QUEUES and its adk_celery_queue metadata).")


def _inside_workflows(
    agent: BaseAgent, workflow: BaseAgent | None
) -> Iterator[tuple[BaseAgent, LlmAgent]]:
    """Each LlmAgent below a workflow agent, with the innermost such workflow."""
    if isinstance(agent, LlmAgent) and workflow is not None:
        yield workflow, agent
    inner = agent if isinstance(agent, _WORKFLOWS) else workflow
    for sub in agent.sub_agents:
        yield from _inside_workflows(sub, inner)


def _static_tools(agent: LlmAgent) -> Iterator[BaseTool]:
    """The agent's tools given as functions or tools (toolsets list theirs per invocation)."""
    for tool in agent.tools:
        if isinstance(tool, BaseTool):
            yield tool
        elif callable(tool) and not isinstance(tool, BaseToolset):
            yield FunctionTool(tool)
