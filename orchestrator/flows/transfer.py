"""Agent transfer: which agents an LlmAgent may hand off to, and the tool it uses."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING

from orchestrator import failpoints
from orchestrator.agents.base_agent import BaseAgent
from orchestrator.models.model_names import combines_builtin_tools_with_functions
from orchestrator.tools.enterprise_search_tool import EnterpriseWebSearchTool
from orchestrator.tools.google_search_tool import GoogleSearchTool
from orchestrator.tools.transfer_to_agent_tool import TransferToAgentTool
from orchestrator.tools.vertex_ai_search_tool import VertexAiSearchTool

if TYPE_CHECKING:
    from orchestrator.agents.context import ToolContext
    from orchestrator.agents.invocation_context import InvocationContext
    from orchestrator.agents.llm_agent import LlmAgent
    from orchestrator.events.event import Event
    from orchestrator.models.llm_request import LlmRequest


def transfer_targets(agent: LlmAgent) -> list[BaseAgent]:
    """Sub-agents, then the parent and peers unless disallowed (only under an LLM parent)."""
    from orchestrator.agents.llm_agent import LlmAgent

    targets: list[BaseAgent] = list(agent.sub_agents)
    parent = agent.parent_agent
    if isinstance(parent, LlmAgent):
        if not agent.disallow_transfer_to_parent:
            targets.append(parent)
        if not agent.disallow_transfer_to_peers:
            targets.extend(p for p in parent.sub_agents if p is not agent)
    return targets


def uses_transfer(agent: LlmAgent) -> bool:
    """False for a single-flow agent (no sub-agents and both transfers disallowed)."""
    return not (
        agent.disallow_transfer_to_parent
        and agent.disallow_transfer_to_peers
        and not agent.sub_agents
    )


def transfer_tool(agent: LlmAgent) -> TransferToAgentTool | None:
    """The ``transfer_to_agent`` tool ``agent`` offers, or None when it has no targets."""
    targets = transfer_targets(agent) if uses_transfer(agent) else []
    return TransferToAgentTool([t.name for t in targets]) if targets else None


async def add_transfer_tool(
    agent: LlmAgent, tool_context: ToolContext, llm_request: LlmRequest
) -> None:
    """Offer ``transfer_to_agent`` and describe the targets in the system instruction."""
    if not uses_transfer(agent):
        return
    targets = transfer_targets(agent)
    if not targets:
        return
    problem = builtin_search_conflict(agent, llm_request.model)
    if problem is not None:
        # As google-adk: refused outright when the agent has sub-agents to delegate to;
        # with only a parent or peers to go back to, the agent simply cannot transfer.
        if any(t in agent.sub_agents for t in targets):
            raise ValueError(problem)
        return
    tool = TransferToAgentTool([t.name for t in targets])
    await tool.process_llm_request(tool_context=tool_context, llm_request=llm_request)
    llm_request.append_instructions([_transfer_instruction(agent, targets)])


def builtin_search_conflict(agent: LlmAgent, model: str | None) -> str | None:
    """Why ``agent``'s built-in search cannot sit beside ``transfer_to_agent``, if it cannot.

    Gemini models before 3 refuse built-in search tools in a request that declares functions.
    ``google_search`` and ``VertexAiSearchTool`` get around it with
    ``bypass_multi_tools_limit=True``; ``enterprise_web_search`` cannot.
    """
    for tool in agent.tools:
        if not isinstance(tool, GoogleSearchTool | VertexAiSearchTool | EnterpriseWebSearchTool):
            continue
        if combines_builtin_tools_with_functions(getattr(tool, "model", None) or model):
            continue
        if isinstance(tool, EnterpriseWebSearchTool):
            return (
                f"Agent {agent.name!r} has agents to transfer to and enterprise_web_search: "
                "Gemini models before 3 do not take built-in search beside function calls. "
                "Use a Gemini 3 model, or give the search an agent of its own."
            )
        if not tool.bypass_multi_tools_limit:
            return (
                f"Agent {agent.name!r} has agents to transfer to and {type(tool).__name__} "
                "without bypass_multi_tools_limit=True: Gemini models before 3 do not take "
                "built-in search beside function calls. Use a Gemini 3 model, or set "
                "bypass_multi_tools_limit=True on the search tool."
            )
    return None


def _transfer_instruction(agent: LlmAgent, targets: list[BaseAgent]) -> str:
    listing = "\n\n".join(
        f"Agent name: {t.name}\nAgent description: {t.description}" for t in targets
    )
    text = (
        "You can hand the conversation to one of these agents:\n\n"
        f"{listing}\n\n"
        "Answer yourself when your own description fits the request best. When another "
        "agent's description fits better, call the `transfer_to_agent` function with that "
        "agent's name, and produce no other text in that turn."
    )
    parent = agent.parent_agent
    if parent is not None and parent in targets:
        text += (
            f"\n\nWhen the request is outside your description and none of the agents above "
            f"fits, transfer back to your parent agent {parent.name}."
        )
    return text


def resolve_target(agent: LlmAgent, name: str) -> BaseAgent:
    """Return the agent ``name`` if ``agent`` may transfer to it; raise ValueError otherwise."""
    for target in transfer_targets(agent) if uses_transfer(agent) else []:
        if target.name == name:
            return target
    raise ValueError(f"Agent {agent.name} is not allowed to transfer to agent {name}.")


async def transfer_to(
    ctx: InvocationContext, agent: LlmAgent, target_name: str
) -> AsyncGenerator[Event, None]:
    """Act on the transfer ``agent`` asked for: hand its turn to agent ``target_name``.

    When the Runner schedules ``agent`` at the top of an invocation whose root is an
    LlmAgent, the transfer is a hop, as in google-adk 2.13's node runtime: ``agent``'s run
    ends here (no after-agent callbacks) and the Runner runs the target next. Anywhere else
    (under a workflow agent, google-adk's legacy path) the target runs here, inside
    ``agent``'s run, whose after-callbacks run when the target is done.
    """
    target = resolve_target(agent, target_name)
    if ctx.transfers_by_hop(agent):
        failpoints.hit("transfer.answered")  # the transfer is in the log, its hop is not
        ctx.hop_to(target)
        return
    async for event in target.run_async(ctx):
        yield event
