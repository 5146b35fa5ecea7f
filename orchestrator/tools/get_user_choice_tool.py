"""get_user_choice: the model offers options and waits for the user to pick one."""

from __future__ import annotations

from orchestrator.agents.context import ToolContext
from orchestrator.tools.long_running_tool import LongRunningFunctionTool


def get_user_choice(options: list[str], tool_context: ToolContext) -> str | None:
    """Show the user these options and wait until they choose one of them."""
    # The answer comes from the user, as a FunctionResponse to this call: the invocation
    # pauses here, and the model is not called again on the empty interim result.
    tool_context.actions.skip_summarization = True
    return None


get_user_choice_tool = LongRunningFunctionTool(get_user_choice)
"""The shared instance (``orchestrator.tools.get_user_choice``)."""
