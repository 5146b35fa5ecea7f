"""An app's agent tree as the dev UI draws it: a JSON description and Graphviz DOT text.

The dev UI asks for the tree (``build_graph``) to navigate it and for DOT source to draw
each level; the browser renders the DOT itself. Only names, kinds and descriptions are
shown: no instructions, callbacks or tool arguments.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from orchestrator.agents.base_agent import BaseAgent
from orchestrator.apps.app import App
from orchestrator.models.base_llm import BaseLlm


def tool_names(agent: BaseAgent) -> list[str]:
    """The names of the agent's tools (functions, tools, toolsets), sub-agents left out."""
    subs = {sub.name for sub in agent.sub_agents}
    names = []
    for tool in getattr(agent, "tools", None) or []:
        name = getattr(tool, "name", None) or getattr(tool, "__name__", None) or type(tool).__name__
        if name not in subs:
            names.append(str(name))
    return names


def _model_name(agent: BaseAgent) -> str | None:
    model = getattr(agent, "model", None)
    if isinstance(model, BaseLlm):
        return model.model or type(model).__name__
    return model or None


def describe_agent(agent: BaseAgent) -> dict[str, Any]:
    """One agent and everything under it (the JSON of the dev UI's ``root_agent``)."""
    shown: dict[str, Any] = {"name": agent.name, "agent_class": type(agent).__name__}
    if agent.description:
        shown["description"] = agent.description
    model = _model_name(agent)
    if model:
        shown["model"] = model
    tools = tool_names(agent)
    if tools:
        shown["tools"] = [{"name": name, "type": "tool"} for name in tools]
    if agent.sub_agents:
        shown["sub_agents"] = [describe_agent(sub) for sub in agent.sub_agents]
    return shown


def describe_app(app: App) -> dict[str, Any]:
    """The app with its whole agent tree (the dev UI's ``build_graph`` answer)."""
    shown: dict[str, Any] = {"name": app.name, "root_agent": describe_agent(app.root_agent)}
    if app.resumability_config is not None:
        shown["resumability_config"] = app.resumability_config.model_dump(mode="json")
    return shown


def find_agent(root: BaseAgent, path: str) -> BaseAgent | None:
    """The agent at ``path`` (sub-agent names joined by ``/``, ``''`` = the root)."""
    agent = root
    for name in (part for part in path.split("/") if part):
        agent = next((sub for sub in agent.sub_agents if sub.name == name.split("@")[0]), None)
        if agent is None:
            return None
    return agent


_LIGHT = {"bg": "#ffffff", "fg": "#202124", "agent": "#e8f0fe", "tool": "#f1f3f4",
          "edge": "#5f6368", "hot": "#1a73e8"}
_DARK = {"bg": "#121212", "fg": "#e8eaed", "agent": "#1e3a5f", "tool": "#2a2a2a",
         "edge": "#9aa0a6", "hot": "#8ab4f8"}


def _quoted(text: str) -> str:
    return json.dumps(text)  # a JSON string is a valid DOT quoted string


def to_dot(root: BaseAgent, *, dark: bool = False,
           highlights: Iterable[tuple[str, str]] = ()) -> str:
    """DOT source of ``root``, its tools and sub-agents (recursively).

    ``highlights``: (from, to) pairs of node names whose edges and nodes are drawn in the
    highlight colour (a call from an agent to a tool, its answer back).
    """
    colors = _DARK if dark else _LIGHT
    hot_edges = set(highlights)
    hot_nodes = {name for pair in hot_edges for name in pair}
    lines = [
        "digraph agents {",
        f'  graph [rankdir=LR, bgcolor="{colors["bg"]}"];',
        f'  node [fontname="Helvetica", fontcolor="{colors["fg"]}", color="{colors["edge"]}"];',
        f'  edge [color="{colors["edge"]}"];',
    ]
    edges: list[tuple[str, str]] = []

    def node(name: str, shape: str, fill: str) -> None:
        hot = f', color="{colors["hot"]}", penwidth=2' if name in hot_nodes else ""
        lines.append(f"  {_quoted(name)} [shape={shape}, style=filled, fillcolor=\"{fill}\"{hot}];")

    def walk(agent: BaseAgent) -> None:
        node(agent.name, "ellipse", colors["agent"])
        for tool in tool_names(agent):
            node(tool, "box", colors["tool"])
            edges.append((agent.name, tool))
        for sub in agent.sub_agents:
            edges.append((agent.name, sub.name))
            walk(sub)

    walk(root)
    for start, end in edges:
        if (start, end) in hot_edges or (end, start) in hot_edges:
            lines.append(f'  {_quoted(start)} -> {_quoted(end)} [color="{colors["hot"]}", penwidth=2];')
        else:
            lines.append(f"  {_quoted(start)} -> {_quoted(end)};")
    lines.append("}")
    return "\n".join(lines)
