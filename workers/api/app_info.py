"""An app as google-adk's ``/apps/{app}/app-info`` and ``/list-apps?detailed=true`` show it.

``AppInfo``'s JSON: the app's name, its root agent's name and description, and (app-info
only) every LlmAgent of the tree by name with its instruction, its tools' function
declarations (as the model sees them) and the names of its LlmAgent sub-agents.
"""

from __future__ import annotations

from typing import Any

from google.genai import types

from orchestrator.agents.llm_agent import LlmAgent
from orchestrator.apps.app import App


class NotAnLlmAgentError(ValueError):
    """The app's root agent is not an LlmAgent: app-info describes LlmAgent trees only."""


def summary(name: str, app: App) -> dict[str, Any]:
    """The app without its agents (an entry of ``/list-apps?detailed=true``)."""
    root = app.root_agent
    return {"name": name, "rootAgentName": root.name, "description": root.description or "",
            "language": "python", "isComputerUse": False, "agents": None}


async def app_info(name: str, app: App) -> dict[str, Any]:
    """The app with its LlmAgents; NotAnLlmAgentError for another kind of root."""
    root = app.root_agent
    if not isinstance(root, LlmAgent):
        raise NotAnLlmAgentError("Root agent is not an LlmAgent")
    agents: dict[str, Any] = {}
    await _describe(root, agents)
    shown = summary(name, app)
    shown["agents"] = agents
    return shown


async def _describe(agent: LlmAgent, agents: dict[str, Any]) -> None:
    # Sub-agents first, as ADK fills its dict; an agent met twice is described once.
    if agent.name in agents:
        return
    subs = [sub for sub in agent.sub_agents if isinstance(sub, LlmAgent)]
    for sub in subs:
        await _describe(sub, agents)
    agents[agent.name] = {
        "name": agent.name, "description": agent.description or "",
        "instruction": _instruction(agent), "tools": await _tools(agent),
        "sub_agents": [sub.name for sub in subs],
    }


def _instruction(agent: LlmAgent) -> str:
    # A provider may need session state (or be async): it is named, never called.
    if callable(agent.instruction):
        provider = agent.instruction
        return f"<InstructionProvider: {getattr(provider, '__name__', type(provider).__name__)}>"
    return agent.instruction


async def _tools(agent: LlmAgent) -> list[dict[str, Any]]:
    shown = []
    for tool in await agent.canonical_tools(None):
        declaration = tool._get_declaration()
        if declaration is not None:
            shown.append(types.Tool(function_declarations=[declaration]).model_dump(
                mode="json", by_alias=True, exclude_none=True))
    return shown
