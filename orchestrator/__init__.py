"""adk-celery's ADK-compatible core: events, sessions, agents, flows, tools, models, runner.

Pure asyncio: nothing here imports Celery, ``workers`` or ``tools``. Redis appears only in
the Redis back-end (:mod:`orchestrator.backends.redis`). Every name below is imported on
first use (``from orchestrator import Agent`` or ``orchestrator.Agent``): importing one
module of the core (``orchestrator.errors``, ``orchestrator.distributed.models``) does not
import the rest, google-genai's client or redis-py.
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from orchestrator.agents.base_agent import BaseAgent, BaseAgentState
    from orchestrator.agents.context import CallbackContext, Context, ReadonlyContext, ToolContext
    from orchestrator.agents.invocation_context import InvocationContext
    from orchestrator.agents.llm_agent import Agent, LlmAgent
    from orchestrator.agents.loop_agent import LoopAgent
    from orchestrator.agents.parallel_agent import ParallelAgent
    from orchestrator.agents.run_config import RunConfig, StreamingMode
    from orchestrator.agents.sequential_agent import SequentialAgent
    from orchestrator.apps.app import App, ResumabilityConfig
    from orchestrator.artifacts.in_memory_artifact_service import InMemoryArtifactService
    from orchestrator.backends.redis.artifact_service import RedisArtifactService
    from orchestrator.backends.redis.session_service import RedisSessionService
    from orchestrator.events.event import Event
    from orchestrator.events.event_actions import EventActions
    from orchestrator.memory.in_memory_memory_service import InMemoryMemoryService
    from orchestrator.models.base_llm import BaseLlm
    from orchestrator.models.gemini import Gemini
    from orchestrator.models.llm_request import LlmRequest
    from orchestrator.models.llm_response import LlmResponse
    from orchestrator.runners import InMemoryRunner, Runner
    from orchestrator.sessions.in_memory_session_service import InMemorySessionService
    from orchestrator.sessions.session import Session
    from orchestrator.tools.agent_tool import AgentTool
    from orchestrator.tools.base_tool import BaseTool
    from orchestrator.tools.base_toolset import BaseToolset
    from orchestrator.tools.exit_loop_tool import exit_loop
    from orchestrator.tools.function_tool import FunctionTool
    from orchestrator.tools.long_running_tool import LongRunningFunctionTool
    from orchestrator.tools.tool_confirmation import ToolConfirmation

_EXPORTS = {
    "Agent": "orchestrator.agents.llm_agent",
    "AgentTool": "orchestrator.tools.agent_tool",
    "App": "orchestrator.apps.app",
    "BaseAgent": "orchestrator.agents.base_agent",
    "BaseAgentState": "orchestrator.agents.base_agent",
    "BaseLlm": "orchestrator.models.base_llm",
    "BaseTool": "orchestrator.tools.base_tool",
    "BaseToolset": "orchestrator.tools.base_toolset",
    "CallbackContext": "orchestrator.agents.context",
    "Context": "orchestrator.agents.context",
    "Event": "orchestrator.events.event",
    "EventActions": "orchestrator.events.event_actions",
    "FunctionTool": "orchestrator.tools.function_tool",
    "Gemini": "orchestrator.models.gemini",
    "InMemoryArtifactService": "orchestrator.artifacts.in_memory_artifact_service",
    "InMemoryMemoryService": "orchestrator.memory.in_memory_memory_service",
    "InMemoryRunner": "orchestrator.runners",
    "InMemorySessionService": "orchestrator.sessions.in_memory_session_service",
    "InvocationContext": "orchestrator.agents.invocation_context",
    "LlmAgent": "orchestrator.agents.llm_agent",
    "LlmRequest": "orchestrator.models.llm_request",
    "LlmResponse": "orchestrator.models.llm_response",
    "LongRunningFunctionTool": "orchestrator.tools.long_running_tool",
    "LoopAgent": "orchestrator.agents.loop_agent",
    "ParallelAgent": "orchestrator.agents.parallel_agent",
    "ReadonlyContext": "orchestrator.agents.context",
    "RedisArtifactService": "orchestrator.backends.redis.artifact_service",
    "RedisSessionService": "orchestrator.backends.redis.session_service",
    "ResumabilityConfig": "orchestrator.apps.app",
    "RunConfig": "orchestrator.agents.run_config",
    "Runner": "orchestrator.runners",
    "SequentialAgent": "orchestrator.agents.sequential_agent",
    "Session": "orchestrator.sessions.session",
    "StreamingMode": "orchestrator.agents.run_config",
    "ToolConfirmation": "orchestrator.tools.tool_confirmation",
    "ToolContext": "orchestrator.agents.context",
    "exit_loop": "orchestrator.tools.exit_loop_tool",
}
"""Each exported name and the module it lives in."""

__all__ = [
    "Agent",
    "AgentTool",
    "App",
    "BaseAgent",
    "BaseAgentState",
    "BaseLlm",
    "BaseTool",
    "BaseToolset",
    "CallbackContext",
    "Context",
    "Event",
    "EventActions",
    "FunctionTool",
    "Gemini",
    "InMemoryArtifactService",
    "InMemoryMemoryService",
    "InMemoryRunner",
    "InMemorySessionService",
    "InvocationContext",
    "LlmAgent",
    "LlmRequest",
    "LlmResponse",
    "LongRunningFunctionTool",
    "LoopAgent",
    "ParallelAgent",
    "ReadonlyContext",
    "RedisArtifactService",
    "RedisSessionService",
    "ResumabilityConfig",
    "RunConfig",
    "Runner",
    "SequentialAgent",
    "Session",
    "StreamingMode",
    "ToolConfirmation",
    "ToolContext",
    "exit_loop",
]


def __getattr__(name: str) -> Any:
    """An exported name, imported from its module on first use (then kept here)."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The module's own names and the exported ones, loaded or not."""
    return sorted({*globals(), *__all__})
