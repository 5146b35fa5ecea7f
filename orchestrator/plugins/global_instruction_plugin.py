"""GlobalInstructionPlugin: one instruction put in front of every agent's system instruction."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from google.genai import types

from orchestrator.flows.instructions import inject_session_state
from orchestrator.plugins.base_plugin import BasePlugin

if TYPE_CHECKING:
    from orchestrator.agents.context import CallbackContext, ReadonlyContext
    from orchestrator.models.llm_request import LlmRequest
    from orchestrator.models.llm_response import LlmResponse

InstructionProvider = Callable[["ReadonlyContext"], "str | Awaitable[str]"]


class GlobalInstructionPlugin(BasePlugin):
    """App-wide instruction (the replacement of ``LlmAgent.global_instruction``).

    Before every model call of every agent, the instruction leads the request's system
    instruction, followed by a blank line and the agent's own. A string is a template
    (``{key}`` placeholders filled from the session state, as agent instructions are); a
    callable ``(readonly_context) -> str`` (sync or async) is used as it returns.
    """

    def __init__(
        self, global_instruction: str | InstructionProvider = "", name: str = "global_instruction"
    ) -> None:
        super().__init__(name=name)
        self.global_instruction = global_instruction
        """The instruction, or a function of the context that returns it."""

    async def before_model_callback(
        self, *, callback_context: CallbackContext, llm_request: LlmRequest
    ) -> LlmResponse | None:
        """Put the instruction first in ``llm_request``'s system instruction; never answers."""
        if not self.global_instruction:
            return None
        text = await self._resolve(callback_context)
        if not text:
            return None
        current = llm_request.config.system_instruction
        llm_request.config.system_instruction = _lead_with(text, current) if current else text
        return None

    async def _resolve(self, context: ReadonlyContext) -> str:
        if isinstance(self.global_instruction, str):
            return await inject_session_state(self.global_instruction, context)
        value = self.global_instruction(context)
        if inspect.isawaitable(value):
            value = await value
        return "" if value is None else str(value)  # None: no global instruction this time


def _lead_with(text: str, current: Any) -> Any:
    """``current`` (any shape a system instruction may take) with ``text`` put first."""
    if isinstance(current, str):
        return f"{text}\n\n{current}"
    if isinstance(current, types.Content):
        return current.model_copy(update={"parts": [types.Part(text=text), *(current.parts or [])]})
    parts = list(current) if isinstance(current, list) else [current]
    return [text, *parts]
