"""LlmRequest: what an agent sends to a model for one call."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from google.genai import types
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

if TYPE_CHECKING:
    from orchestrator.tools.base_tool import BaseTool

logger = logging.getLogger(__name__)


class LlmRequest(BaseModel):
    """One model call: model name, history, generation config and the tools on offer."""

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    model: str | None = None
    """Model name; filled from the agent's model."""
    contents: list[types.Content] = Field(default_factory=list)
    """Conversation history, oldest first."""
    config: types.GenerateContentConfig = Field(default_factory=types.GenerateContentConfig)
    """Generation config, including ``system_instruction`` and ``tools``."""
    tools_dict: dict[str, Any] = Field(default_factory=dict, exclude=True)
    """Tool name -> BaseTool, for the tools declared in ``config.tools``."""
    _dynamic_instructions: list[str] | None = PrivateAttr(default=None)

    def _append_dynamic_instructions(self, instructions: list[str]) -> None:
        """Queue instructions a tool adds while the request is built (google-adk's hook).

        The flow appends them to the system instruction once every tool has had its say.
        """
        if self._dynamic_instructions is None:
            self._dynamic_instructions = []
        self._dynamic_instructions.extend(instructions)

    def _finalize_dynamic_instructions(self) -> None:
        """Move the queued tool instructions into the system instruction (one block)."""
        if self._dynamic_instructions:
            self.append_instructions(["\n\n".join(self._dynamic_instructions)])
            self._dynamic_instructions = None

    def _insert_transient_user_content(self, contents: list[types.Content]) -> None:
        """Put request-only user content just before the latest plain user turn.

        The content goes after the last model turn or function response, ahead of the
        trailing user messages, and is never stored in the session.
        """
        index = len(self.contents)
        for i in range(len(self.contents) - 1, -1, -1):
            content = self.contents[i]
            if content.role != "user" or any(p.function_response for p in content.parts or []):
                break
            index = i
        self.contents[index:index] = contents

    def append_instructions(self, instructions: list[str]) -> None:
        """Append text to the system instruction, separated by a blank line."""
        text = "\n\n".join(i for i in instructions if i)
        if not text:
            return
        current = self.config.system_instruction
        if current:
            self.config.system_instruction = f"{current}\n\n{text}"
        else:
            self.config.system_instruction = text

    def append_tools(self, tools: list[BaseTool]) -> None:
        """Declare tools to the model and remember them by name."""
        declarations = []
        for tool in tools:
            declaration = tool._get_declaration()
            if declaration is not None:
                declarations.append(declaration)
                if tool.name in self.tools_dict:
                    logger.warning(
                        "Two tools are named %r: calls go to the one declared last; the "
                        "earlier one cannot be called.", tool.name,
                    )
                self.tools_dict[tool.name] = tool
        if not declarations:
            return
        if self.config.tools is None:
            self.config.tools = []
        for existing in self.config.tools:
            if isinstance(existing, types.Tool) and existing.function_declarations is not None:
                existing.function_declarations.extend(declarations)
                return
        self.config.tools.append(types.Tool(function_declarations=declarations))

    def set_output_schema(self, schema: Any) -> None:
        """Ask the model for JSON matching ``schema``."""
        self.config.response_schema = schema
        self.config.response_mime_type = "application/json"
