"""ToolConfirmation: the payload a human (or service) sends to approve or reject a tool call."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class ToolConfirmation(BaseModel):
    """A request for, or an answer to, a tool-call confirmation."""

    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True)

    hint: str = ""
    """Text shown to whoever confirms."""
    confirmed: bool = False
    """Whether the call was approved."""
    payload: Any | None = None
    """Optional structured data sent with the answer."""

    @classmethod
    def from_response_dict(cls, response: dict[str, Any]) -> ToolConfirmation:
        """Build from a FunctionResponse payload; a ``{"response": "<json>"}`` wrapper is accepted."""
        if set(response) == {"response"} and isinstance(response["response"], str):
            response = json.loads(response["response"])
        return cls.model_validate(response)
