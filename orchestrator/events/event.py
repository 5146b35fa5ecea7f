"""Event: one committed (or partial) step of an invocation, as ADK writes it."""

from __future__ import annotations

from typing import Any

from google.genai import _transformers
from pydantic import ConfigDict, Field, PrivateAttr, field_serializer, model_validator

from orchestrator import platform
from orchestrator.events.event_actions import EventActions
from orchestrator.events.state_json import STRICT_JSON
from orchestrator.models.llm_response import LlmResponse


class Event(LlmResponse):
    """An event in a session: a model turn, a tool result, a user message or a state change."""

    model_config = ConfigDict(extra="ignore")

    invocation_id: str = ""
    """The invocation this event belongs to (``e-<uuid4>``)."""
    author: str = ""
    """``'user'`` or the name of the agent that produced the event."""
    actions: EventActions = Field(default_factory=EventActions)
    """Side effects applied when the event is committed."""
    output: Any | None = None
    """Data a workflow node produced (ADK 2.x); plain agents leave it None."""
    long_running_tool_ids: set[str] | None = None
    """Ids of the function calls in this event that pause the invocation."""
    branch: str | None = None
    """Dot path ``agent_1.agent_2`` isolating history between parallel branches."""
    id: str = ""
    """Unique event id (uuid4), set on construction when empty."""
    timestamp: float = Field(default_factory=platform.get_time)
    """Creation time in seconds."""
    _commit_dispatch: Any = PrivateAttr(default=None)
    # Jobs the commit of this event sends (orchestrator.distributed.transport.CommitDispatch);
    # never serialised.

    @model_validator(mode="before")
    @classmethod
    def _accept_shorthands(cls, data: Any) -> Any:
        """ADK 2.x shorthands: ``message=`` fills ``content``, ``state=`` the state delta.

        A subclass that declares ``message`` or ``state`` as a field of its own keeps it.
        """
        if not isinstance(data, dict) or ("message" not in data and "state" not in data):
            return data  # the common case, on every event built or parsed: nothing to do
        own = set(cls.model_fields) | {f.alias for f in cls.model_fields.values() if f.alias}
        data = dict(data)
        message = None if "message" in own else data.pop("message", None)
        state = None if "state" in own else data.pop("state", None)
        if message is not None:
            if data.get("content") is not None:
                raise ValueError("Event: give either 'message' or 'content', not both.")
            data["content"] = _as_content(message)
        if state is not None:
            actions = data.get("actions")
            if isinstance(actions, EventActions):
                actions = actions.model_dump()
            if actions is None or isinstance(actions, dict):
                data["actions"] = {**(actions or {}), "state_delta": state}
        return data

    @property
    def message(self) -> Any:
        """The event's message: ``content`` (or a subclass's own ``message`` field)."""
        if "message" in type(self).model_fields:
            return self.__dict__.get("message")
        return self.content

    @message.setter
    def message(self, value: Any) -> None:
        if "message" in type(self).model_fields:
            self.__pydantic_validator__.validate_assignment(self, "message", value)
            return
        self.content = None if value is None else _as_content(value)

    def model_post_init(self, __context: Any) -> None:
        """Give the event an id when it has none."""
        if not self.id:
            self.id = platform.new_uuid()

    @field_serializer("long_running_tool_ids")
    def _serialize_long_running_tool_ids(self, value: set[str] | None) -> list[str] | None:
        return sorted(value) if value is not None else None

    @staticmethod
    def new_id() -> str:
        """Return a fresh event id."""
        return platform.new_uuid()

    def is_final_response(self) -> bool:
        """Return True when this event ends the agent's turn (ADK 2.x rules)."""
        if self.actions.skip_summarization or self.long_running_tool_ids:
            return True
        if self.error_code and not self.partial and not self.get_function_calls():
            return True
        return (
            not self.get_function_calls()
            and not self.get_function_responses()
            and not self.partial
            and not self.has_trailing_code_execution_result()
        )

    def to_wire(self) -> dict[str, Any]:
        """Return the event as ADK writes it on the wire: camelCase, ``None`` omitted.

        Strict, as the runtime stores and sends this form: a state value of no JSON type
        raises ``PydanticSerializationError`` (a plain ``model_dump(mode="json")`` writes
        its repr instead, as google-adk does).
        """
        return self.model_dump(mode="json", by_alias=True, exclude_none=True, context=STRICT_JSON)

    def to_json(self) -> str:
        """Return the wire form as a JSON string (strict, as :meth:`to_wire`)."""
        return self.model_dump_json(by_alias=True, exclude_none=True, context=STRICT_JSON)

    @classmethod
    def from_wire(cls, data: dict[str, Any] | str | bytes) -> Event:
        """Parse an event from its wire form (camelCase or snake_case keys)."""
        if isinstance(data, (str, bytes)):
            return cls.model_validate_json(data)
        return cls.model_validate(data)


def _as_content(value: Any) -> Any:
    # google-genai's own conversion (text, parts, lists of them, dicts -> a user Content), the
    # one google-adk applies to ``message``, so both frameworks build the same content.
    return _transformers.t_content(value)


def call_author(events: list[Event], call_id: str | None) -> str | None:
    """The author of the latest event in ``events`` that made the call ``call_id``."""
    if not call_id:
        return None
    for event in reversed(events):
        if any(c.id == call_id for c in event.get_function_calls()):
            return event.author
    return None
