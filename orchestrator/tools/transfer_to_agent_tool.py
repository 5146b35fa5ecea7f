"""transfer_to_agent: the tool an LlmAgent uses to hand the conversation to another agent."""

from __future__ import annotations

from google.genai import types

from orchestrator.agents.context import ToolContext
from orchestrator.tools.function_tool import FunctionTool


def transfer_to_agent(agent_name: str, tool_context: ToolContext, *, transfer_reason: str = "") -> None:
    """Hand the conversation over to another agent.

    Call it when another agent's description fits the user's request better than yours.
    """
    tool_context.actions.transfer_to_agent = agent_name
    tool_context.actions.transfer_reason = transfer_reason or None


class TransferToAgentTool(FunctionTool):
    """The ``transfer_to_agent`` function tool, its ``agent_name`` limited to the given agents.

    The enum keeps the model from naming an agent that does not exist. ``transfer_reason`` is
    declared only with ``include_transfer_reason=True`` (google-adk's default leaves it out).
    """

    def __init__(self, agent_names: list[str], include_transfer_reason: bool = False) -> None:
        super().__init__(transfer_to_agent)
        self.agent_names = agent_names
        """The allowed targets."""
        self.include_transfer_reason = include_transfer_reason
        """Whether ``transfer_reason`` is offered to the model."""

    def _get_declaration(self) -> types.FunctionDeclaration | None:
        """The function's declaration, ``agent_name`` an enum of the allowed targets."""
        declaration = super()._get_declaration()
        if declaration is None:
            return None
        schema = dict(declaration.parameters_json_schema or {})
        properties = {key: dict(value) for key, value in schema.get("properties", {}).items()}
        if "agent_name" in properties:
            properties["agent_name"]["enum"] = list(self.agent_names)
        if not self.include_transfer_reason:
            properties.pop("transfer_reason", None)
        schema["properties"] = properties
        return declaration.model_copy(update={"parameters_json_schema": schema})
