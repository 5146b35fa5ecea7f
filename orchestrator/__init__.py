"""adk-celery's ADK-compatible core: events, sessions, agents, flows, tools, models, runner.

Pure asyncio: nothing here imports Celery, ``workers`` or ``tools``. Redis appears only in
the Redis back-end (:mod:`orchestrator.backends.redis`); its session and artifact services
are exported here but imported on first use, so ``import orchestrator`` does not import
redis-py.
"""

import importlib
from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from orchestrator.backends.redis.artifact_service import RedisArtifactService
    from orchestrator.backends.redis.session_service import RedisSessionService

_REDIS_SERVICES = {
    "RedisArtifactService": "orchestrator.backends.redis.artifact_service",
    "RedisSessionService": "orchestrator.backends.redis.session_service",
}
"""Exported names that live in the Redis back-end, and their modules."""


def __getattr__(name: str) -> Any:
    """``RedisSessionService`` and ``RedisArtifactService``, imported on first use."""
    module = _REDIS_SERVICES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


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
