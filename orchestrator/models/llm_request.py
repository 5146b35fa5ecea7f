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

    def append_instructions(
        self, instructions: list[str] | types.Content
    ) -> list[types.Content]:
        """Append to the system instruction, each piece after a blank line.

        ``instructions``: texts, or a ``Content`` whose text parts are appended and whose
        inline data and file parts (which a system instruction cannot hold) are named there
        by a reference and sent as user contents of their own, appended to ``contents`` and
        returned (as google-adk 2.13 does). Returns ``[]`` for texts.
        """
        if isinstance(instructions, types.Content):
            texts, user_contents = instruction_parts(instructions)
            self.contents.extend(user_contents)
        elif isinstance(instructions, list) and all(isinstance(i, str) for i in instructions):
            texts, user_contents = list(instructions), []
        else:
            raise TypeError("instructions must be list[str] or types.Content, got "
                            f"{type(instructions).__name__}")
        text = "\n\n".join(i for i in texts if i)
        if text:
            current = self.config.system_instruction
            self.config.system_instruction = f"{current}\n\n{text}" if current else text
        return user_contents

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

    def set_output_schema(self, output_schema: Any = None, *, base_model: Any = None) -> None:
        """Ask the model for JSON matching ``output_schema`` (``base_model``: its old name)."""
        schema = output_schema or base_model
        if schema is None:
            raise ValueError("set_output_schema needs output_schema (base_model is its old "
                             "name); neither was given.")
        self.config.response_schema = schema
        self.config.response_mime_type = "application/json"


def instruction_parts(content: types.Content) -> tuple[list[str], list[types.Content]]:
    """The system-instruction texts of ``content`` and the user contents its data parts need.

    A text part is a text; an inline data or file part becomes a reference text (naming
    it ``inline_data_N`` or ``file_data_N``, with its display name, URI and type) and a
    user content holding that reference's name and the part itself.
    """
    texts: list[str] = []
    user_contents: list[types.Content] = []
    for part in content.parts or []:
        if part.text:
            texts.append(part.text)
            continue
        if part.inline_data:
            kind, what, data = "inline_data", "inline binary data", part.inline_data
            details = [f"'{data.display_name}'" if data.display_name else "",
                       f"type: {data.mime_type}" if data.mime_type else ""]
        elif part.file_data:
            kind, what, file = "file_data", "file data", part.file_data
            details = [f"'{file.display_name}'" if file.display_name else "",
                       f"URI: {file.file_uri}" if file.file_uri else "",
                       f"type: {file.mime_type}" if file.mime_type else ""]
        else:
            continue
        name = f"{kind}_{len(user_contents)}"
        shown = ", ".join(d for d in details if d)
        texts.append(f"[Reference to {what}: {name}{f' ({shown})' if shown else ''}]")
        label = "inline data" if kind == "inline_data" else "file data"
        user_contents.append(types.Content(role="user", parts=[
            types.Part(text=f"Referenced {label}: {name}"), part,
        ]))
    return texts, user_contents
