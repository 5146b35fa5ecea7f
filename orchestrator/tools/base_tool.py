"""BaseTool: a callable the model can invoke by name."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from google.genai import types

if TYPE_CHECKING:
    from orchestrator.agents.context import ToolContext
    from orchestrator.models.llm_request import LlmRequest


class BaseTool:
    """A tool: a declaration for the model and an async ``run_async``."""

    def __init__(
        self,
        *,
        name: str,
        description: str,
        is_long_running: bool = False,
        custom_metadata: dict[str, Any] | None = None,
    ) -> None:
        self.name = name
        """The name the model calls the tool by."""
        self.description = description
        """What the tool does, for the model."""
        self.is_long_running = is_long_running
        """A long-running call pauses the invocation until its answer arrives."""
        self.custom_metadata = custom_metadata
        """Free-form metadata (e.g. routing hints)."""

    def _get_declaration(self) -> types.FunctionDeclaration | None:
        """Return the function declaration sent to the model (None: not declared)."""
        return None

    async def run_async(self, *, args: dict[str, Any], tool_context: ToolContext) -> Any:
        """Run the tool with the model's arguments."""
        raise NotImplementedError(f"{type(self).__name__} does not implement run_async")

    async def process_llm_request(
        self, *, tool_context: ToolContext, llm_request: LlmRequest
    ) -> None:
        """Add this tool to the request (by default: declare it)."""
        llm_request.append_tools([self])

    async def check_require_confirmation(
        self, args: dict[str, Any], tool_context: ToolContext
    ) -> bool:
        """Return True if this call needs a human confirmation first."""
        return False

    def never_requires_confirmation(self) -> bool:
        """True if no call of this tool can need a confirmation, whatever its arguments.

        So whether a call needs one is known without running any rule (user code that
        google-adk runs only after the call is committed). A subclass with a rule of its own
        (its own :meth:`check_require_confirmation`) is not known to never need one.
        """
        return type(self).check_require_confirmation is BaseTool.check_require_confirmation

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"
