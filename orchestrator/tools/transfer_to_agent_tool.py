"""transfer_to_agent: the tool an LlmAgent uses to hand the conversation to another agent."""

from __future__ import annotations

from typing import Any

from google.genai import types

from orchestrator.agents.context import ToolContext
from orchestrator.tools.base_tool import BaseTool


def transfer_to_agent(agent_name: str, tool_context: ToolContext, transfer_reason: str = "") -> None:
    """Transfer the question to another agent.

    Use this tool to hand off control to another agent that is more suitable to answer the
    user's question according to that agent's description.
    """
    tool_context.actions.transfer_to_agent = agent_name
    if transfer_reason:
        tool_context.actions.transfer_reason = transfer_reason


class TransferToAgentTool(BaseTool):
    """``transfer_to_agent`` declared with an enum of the agents it may target."""

    def __init__(self, agent_names: list[str]) -> None:
        super().__init__(name="transfer_to_agent", description=transfer_to_agent.__doc__ or "")
        self.agent_names = agent_names
        """The allowed targets."""

    def _get_declaration(self) -> types.FunctionDeclaration | None:
        """Declare ``agent_name`` as an enum of the allowed targets."""
        return types.FunctionDeclaration(
            name=self.name,
            description=self.description,
            parameters_json_schema={
                "type": "object",
                "properties": {
                    "agent_name": {"type": "string", "enum": self.agent_names},
                    "transfer_reason": {"type": "string"},
                },
                "required": ["agent_name"],
            },
        )

    async def run_async(self, *, args: dict[str, Any], tool_context: ToolContext) -> Any:
        """Record the transfer in the event's actions; the result is ``None``."""
        transfer_to_agent(
            str(args.get("agent_name", "")), tool_context, str(args.get("transfer_reason", ""))
        )
        return None
