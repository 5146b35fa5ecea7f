"""LongRunningFunctionTool: a function tool whose call pauses the invocation."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from google.genai import types

from orchestrator.tools.function_tool import FunctionTool

_LONG_RUNNING_NOTE = (
    "\n\nNOTE: This is a long-running operation. Do not call this tool again if it has "
    "already returned some intermediate or pending status."
)


class LongRunningFunctionTool(FunctionTool):
    """A function tool marked long-running.

    The function runs once when the model calls it. A falsy result leaves the call open
    (the invocation pauses until a FunctionResponse with the same id arrives); a truthy result
    is sent to the model as an interim answer.
    """

    def __init__(self, func: Callable[..., Any], **kwargs: Any) -> None:
        super().__init__(func, **kwargs)
        self.is_long_running = True
        self._noted: types.FunctionDeclaration | None = None

    def _get_declaration(self) -> types.FunctionDeclaration | None:
        """The function's declaration, with a note telling the model not to call it again.

        Built once, like :class:`FunctionTool`'s: every model call of every invocation
        declares the tool again; each gets a copy of its own, as from :class:`FunctionTool`.
        """
        if self._noted is None:
            declaration = super()._get_declaration()
            if declaration is None:
                return None
            # Without a description of its own, the note alone (no leading blank lines).
            description = (
                declaration.description + _LONG_RUNNING_NOTE
                if declaration.description else _LONG_RUNNING_NOTE.lstrip()
            )
            self._noted = declaration.model_copy(update={"description": description})
        return self._noted.model_copy(deep=True)
