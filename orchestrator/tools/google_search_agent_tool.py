"""GoogleSearchAgentTool: google_search in a sub-agent, so it can sit beside other tools."""

from __future__ import annotations

from typing import Any

from orchestrator.agents.llm_agent import LlmAgent
from orchestrator.tools.agent_tool import AgentTool
from orchestrator.tools.google_search_tool import google_search

_INSTRUCTION = (
    "Answer the query you are given with Google Search, which is built into you. "
    "Do not call functions."
)


def create_google_search_agent(model: Any) -> LlmAgent:
    """An agent whose only tool is ``google_search``, on ``model`` (a name or a BaseLlm)."""
    return LlmAgent(
        name="google_search_agent",
        model=model,
        description="Searches Google and answers from what it finds.",
        instruction=_INSTRUCTION,
        tools=[google_search],
    )


class GoogleSearchAgentTool(AgentTool):
    """Calls a ``google_search`` agent as a tool.

    Gemini models before 3 refuse built-in search in a request that declares functions; an
    agent with ``GoogleSearchTool(bypass_multi_tools_limit=True)`` and other tools gets this
    tool instead (``LlmAgent.canonical_tools``). The search agent's grounding metadata goes
    on the calling agent's next answer (``propagate_grounding_metadata``).
    """

    def __init__(self, agent: LlmAgent) -> None:
        super().__init__(agent=agent, propagate_grounding_metadata=True)
