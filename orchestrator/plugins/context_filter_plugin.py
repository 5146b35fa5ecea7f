"""ContextFilterPlugin: send the model only the most recent turns of a long conversation."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from orchestrator.plugins.base_plugin import BasePlugin

if TYPE_CHECKING:
    from google.genai import types

    from orchestrator.agents.context import CallbackContext
    from orchestrator.models.llm_request import LlmRequest
    from orchestrator.models.llm_response import LlmResponse

logger = logging.getLogger(__name__)

ContentFilter = Callable[[list["types.Content"]], list["types.Content"]]


class ContextFilterPlugin(BasePlugin):
    """Trims each model request's history; the session itself keeps everything.

    ``num_invocations_to_keep``: keep the last N turns (a turn starts with the user's
    message; tool results do not start one). Trimming happens once the history holds
    ``num_invocations_to_keep + remove_amount`` turns, so it is not trimmed on every call.
    The cut never separates a function response from its call. ``custom_filter`` then gets
    the contents and returns the ones to send (a list). A filter that fails, or returns
    something else than a list, leaves the request as it was (logged).
    """

    def __init__(
        self,
        num_invocations_to_keep: int | None = None,
        custom_filter: ContentFilter | None = None,
        name: str = "context_filter_plugin",
        remove_amount: int = 1,
    ) -> None:
        if remove_amount < 1:
            raise ValueError(f"remove_amount must be at least 1, got {remove_amount}.")
        super().__init__(name)
        self._keep = num_invocations_to_keep
        self._custom_filter = custom_filter
        self._remove_amount = remove_amount

    async def before_model_callback(
        self, *, callback_context: CallbackContext, llm_request: LlmRequest
    ) -> LlmResponse | None:
        """Trim ``llm_request.contents``; never answers for the model."""
        try:
            contents = list(llm_request.contents)
            if self._keep is not None and self._keep > 0:
                starts = _turn_starts(contents)
                if len(starts) >= self._keep + self._remove_amount:
                    cut = _keep_calls_with_responses(contents, starts[-self._keep])
                    contents = contents[cut:]
            if self._custom_filter is not None:
                contents = self._custom_filter(contents)
                if not isinstance(contents, list):
                    raise TypeError(f"custom_filter returned {type(contents).__name__}, "
                                    "not a list of contents")
            llm_request.contents = contents
        except Exception:  # a broken filter must not break the model call
            logger.exception("ContextFilterPlugin %r could not filter the request", self.name)
        return None


def _is_user_message(content: types.Content) -> bool:
    return content.role == "user" and not any(
        p.function_response is not None for p in content.parts or []
    )


def _turn_starts(contents: Sequence[types.Content]) -> list[int]:
    """Indexes where a turn starts: the first of consecutive user messages."""
    starts = []
    previous_user = False
    for index, content in enumerate(contents):
        user = _is_user_message(content)
        if user and not previous_user:
            starts.append(index)
        previous_user = user
    return starts


def _keep_calls_with_responses(contents: Sequence[types.Content], cut: int) -> int:
    """Move ``cut`` back until no kept function response lost its call."""
    answered_later: set[str] = set()
    for index in range(len(contents) - 1, -1, -1):
        for part in reversed(contents[index].parts or []):
            if part.function_response is not None and part.function_response.id:
                answered_later.add(part.function_response.id)
            if part.function_call is not None and part.function_call.id:
                answered_later.discard(part.function_call.id)
        if index <= cut and not answered_later:
            return index
    return 0
