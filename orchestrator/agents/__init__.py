from orchestrator.agents.base_agent import BaseAgent, BaseAgentState
from orchestrator.agents.context import CallbackContext, Context, ReadonlyContext, ToolContext
from orchestrator.agents.invocation_context import InvocationContext
from orchestrator.agents.llm_agent import Agent, LlmAgent
from orchestrator.agents.loop_agent import LoopAgent
from orchestrator.agents.parallel_agent import ParallelAgent
from orchestrator.agents.run_config import RunConfig, StreamingMode
from orchestrator.agents.sequential_agent import SequentialAgent

__all__ = [
    "Agent",
    "BaseAgent",
    "BaseAgentState",
    "CallbackContext",
    "Context",
    "InvocationContext",
    "LlmAgent",
    "LoopAgent",
    "ParallelAgent",
    "ReadonlyContext",
    "RunConfig",
    "SequentialAgent",
    "StreamingMode",
    "ToolContext",
]
