from orchestrator.agents.base_agent import BaseAgent, BaseAgentState
from orchestrator.agents.context import CallbackContext, Context, ReadonlyContext, ToolContext
from orchestrator.agents.invocation_context import InvocationContext
from orchestrator.agents.llm_agent import Agent, LlmAgent
from orchestrator.agents.run_config import RunConfig, StreamingMode

__all__ = [
    "Agent",
    "BaseAgent",
    "BaseAgentState",
    "CallbackContext",
    "Context",
    "InvocationContext",
    "LlmAgent",
    "ReadonlyContext",
    "RunConfig",
    "StreamingMode",
    "ToolContext",
]
