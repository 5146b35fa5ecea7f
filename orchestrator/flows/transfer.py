"""Agent transfer: which agents an LlmAgent may hand off to, and the tool it uses."""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.agents.base_agent import BaseAgent
from orchestrator.tools.transfer_to_agent_tool import TransferToAgentTool

if TYPE_CHECKING:
    from orchestrator.agents.context import ToolContext
    from orchestrator.agents.llm_agent import LlmAgent
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


async def add_transfer_tool(
    agent: LlmAgent, tool_context: ToolContext, llm_request: LlmRequest
) -> None:
    """Offer ``transfer_to_agent`` and describe the targets in the system instruction."""
    if not uses_transfer(agent):
        return
    targets = transfer_targets(agent)
    if not targets:
        return
    tool = TransferToAgentTool([t.name for t in targets])
    await tool.process_llm_request(tool_context=tool_context, llm_request=llm_request)
    llm_request.append_instructions([_transfer_instruction(agent, targets)])


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
